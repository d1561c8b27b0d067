#!/usr/bin/env bash
# What the browser tests need, installed when missing (idempotent):
#   - Debian's chromium (apt-get; sudo when not root), skipped when on PATH
#   - playwright-core from the npm registry (package-lock.json), into a cache
#     directory outside the repository keyed by the lock file's hash; it
#     drives that chromium and downloads no browser of its own.
# Prints two lines: CHROMIUM=<path> and MODULES=<node_modules directory>.
set -euo pipefail
DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
log() { printf '[browser %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

if ! command -v chromium >/dev/null; then
  log "installing Debian's chromium"
  SUDO=(); [[ $(id -u) -eq 0 ]] || SUDO=(sudo)
  "${SUDO[@]}" apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -qq chromium >&2
fi
CHROMIUM="$(command -v chromium)"

command -v npm >/dev/null || { log "npm is needed (apt-get install npm)"; exit 1; }
hash="$(sha256sum "$DIR/package-lock.json" | cut -c1-16)"
CACHE="${KASCADE_BROWSER_CACHE:-$HOME/.cache/kascade-e2e/browser}/$hash"
if [[ ! -f "$CACHE/.complete" ]]; then
  log "installing playwright-core into $CACHE"
  rm -rf "$CACHE"; mkdir -p "$CACHE"
  cp "$DIR/package.json" "$DIR/package-lock.json" "$CACHE/"
  # No browser download: the tests use Debian's chromium.
  (cd "$CACHE" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error >&2)
  touch "$CACHE/.complete"
fi
echo "CHROMIUM=$CHROMIUM"
echo "MODULES=$CACHE/node_modules"
