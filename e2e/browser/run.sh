#!/usr/bin/env bash
# The HTML report in a real browser (make browser; part of make test): the
# report of the unschedulable fixture, written by `kascade explain` as HTML
# and JSON into target/explain/, opened in Debian's headless Chromium by
# report-test.mjs. The screenshot is kept as target/explain/report.png (the
# CI artifact). Setup (chromium, playwright-core) by setup.sh.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
OUT="$ROOT/target/explain"
mkdir -p "$OUT"
eval "$(bash "$ROOT/e2e/browser/setup.sh")"
# KASCADE=BIN tests that binary (make browser: the one the unit tests ran).
if [[ -z "${KASCADE:-}" ]]; then
  (cd "$ROOT" && cargo build --locked --bin kascade >&2)
  KASCADE="$TARGET/debug/kascade"
fi
LOG="$ROOT/e2e/fixtures/unschedulable/audit.log"
"$KASCADE" explain "$LOG" --format json --output html="$OUT/unschedulable.html" >"$OUT/unschedulable.json"
KASCADE_BROWSER_MODULES="$MODULES" CHROMIUM="$CHROMIUM" node "$ROOT/e2e/browser/report-test.mjs" \
  --html "$OUT/unschedulable.html" --json "$OUT/unschedulable.json" \
  --expect "FailedScheduling" --expect "pods sched-demo/stuck" \
  --screenshot "$OUT/report.png"
