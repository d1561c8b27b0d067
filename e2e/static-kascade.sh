#!/usr/bin/env bash
# Builds kascade as a release ships it: a static Linux binary (musl, for this
# machine's architecture), checks that it is static and that it runs, and
# prints KASCADE=<path> as its last line. e2e/suite.sh and e2e/faults.sh test
# this binary, so the end-to-end suites run a static build, as releases are.
#
#   e2e/static-kascade.sh                 # the unit suite's build (profile test)
#   KASCADE_STATIC_PROFILE=release e2e/static-kascade.sh
#   KASCADE_STATIC_PROFILE=dist KASCADE_STATIC_BUILD=install e2e/static-kascade.sh
#   e2e/static-kascade.sh --toolchain     # only install what the build needs
#
# KASCADE_STATIC_PROFILE (e2e/profile.sh) says which profile: by default the
# unit suite's (`cargo test --workspace --target <arch>-unknown-linux-musl`,
# make unit), so that one build of the dependencies serves the unit, e2e and
# fault stages.
# KASCADE_STATIC_BUILD says which build makes the binary:
#   tests    (default) the binary `cargo test` builds beside the test
#            programs (tests/e2e/ runs it as CARGO_BIN_EXE_kascade): there
#            the dev-dependencies' features are unified in (tokio's
#            test-util, opentelemetry_sdk's testing, jemalloc's statistics,
#            …), which makes kascade, kube, tonic, hyper, tokio and jemalloc a
#            second build of their own under `install`. They add code kascade
#            does not call and change nothing it does (tokio's clock only
#            moves differently once a test pauses it), so the e2e and fault
#            suites use this one. The lint stage checks that the `install`
#            features build (`cargo clippy --bins`).
#   install  `cargo build --bin kascade`, the features `cargo install` and a
#            release build have.
#
# The release workflow (.github/workflows/release.yml) builds the same target
# with the `dist` profile: fat LTO and one codegen unit take several times
# longer and link the same code and C libraries.
# What the build needs is installed when missing (idempotent): Debian's
# musl-tools (musl-gcc, for the C in ring and jemalloc; apt-get, sudo when
# not root) and the rustup target.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
log() { printf '[static %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# shellcheck source=e2e/profile.sh
source "$ROOT/e2e/profile.sh"
triple="$E2E_TARGET"
build="${KASCADE_STATIC_BUILD:-tests}"
case "$build" in
  install|tests) ;;
  *) log "KASCADE_STATIC_BUILD must be install or tests, not '$build'"; exit 2 ;;
esac

if ! command -v musl-gcc >/dev/null; then
  log "installing Debian's musl-tools"
  SUDO=(); [[ $(id -u) -eq 0 ]] || SUDO=(sudo)
  "${SUDO[@]}" apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -qq musl-tools >&2
fi
if ! rustup target list --installed | grep -qx "$triple"; then
  log "adding the rustup target $triple"
  rustup target add "$triple" >&2
fi
[[ "${1:-}" != --toolchain ]] || exit 0

log "building kascade for $triple (profile $E2E_PROFILE, as $build builds it)"
if [[ "$build" = tests ]]; then
  cargo test "${E2E_CARGO_PROFILE[@]}" --locked --no-run --test e2e >&2
else
  cargo build "${E2E_CARGO_PROFILE[@]}" --locked --bin kascade >&2
fi
bin="$E2E_OUT/kascade"

# Static: no program interpreter, no shared library (`file` says "static-pie
# linked" or "statically linked"; glibc's ldd refuses or says so).
kind="$(file -b "$bin")"
if [[ "$kind" != *"static"*" linked"* ]] || ldd "$bin" 2>&1 | grep -q '=>'; then
  log "FAIL: $bin is not a static executable: $kind"
  ldd "$bin" >&2 || true
  exit 1
fi
"$bin" --version >&2
# It runs: the trace of a Deployment from a captured audit log.
fixture="$ROOT/e2e/fixtures/deployment/audit.log"
out="$("$bin" trace "$fixture" --resource deployments --namespace default --name hello 2>/dev/null)" \
  || { log "FAIL: $bin trace $fixture exited with $?"; exit 1; }
grep -q 'deployments default/hello .*◀ searched' <<<"$out" \
  || { log "FAIL: $bin trace $fixture printed no trace of deployments default/hello:"; head -n 20 <<<"$out" >&2; exit 1; }
grep -q 'replicasets default/hello-' <<<"$out" \
  || { log "FAIL: the trace of deployments default/hello from $bin has no ReplicaSet:"; head -n 20 <<<"$out" >&2; exit 1; }
log "$bin: $kind; runs (--version, trace of the deployment fixture)"
echo "KASCADE=$bin"
