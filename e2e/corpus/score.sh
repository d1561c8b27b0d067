#!/usr/bin/env bash
# Scores `kascade explain` and the UI's error marks on the corpus of
# whole-cluster runs against each run's truth.yaml (score.py says how), and
# fails unless every failing run's first finding is its true cause and no
# healthy run raises an alarm.
#
#   e2e/corpus/score.sh [RUN...]
#
# KASCADE=BIN scores that binary; by default the debug build is made (or
# reused) with cargo.
set -euo pipefail
CORPUS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$CORPUS_DIR/../.." && pwd)"
if [[ -z "${KASCADE:-}" ]]; then
  (cd "$ROOT" && cargo build --locked --quiet --bin kascade)
  target="${CARGO_TARGET_DIR:-target}"
  [[ "$target" = /* ]] || target="$ROOT/$target"
  KASCADE="$target/debug/kascade"
fi
exec python3 "$CORPUS_DIR/score.py" --kascade "$KASCADE" "$@"
