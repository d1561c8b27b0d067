#!/usr/bin/env bash
# Runs `kascade analyze` over the audit logs an e2e/experiments/propagation.sh
# run saved, one analysis per N (its repetitions together, as the paper's
# histograms combine its 10 measurements):
#   DIR/analysis/n<N>.{txt,json,csv}  the report in each format
#   DIR/analysis/n<N>/                its plots (PNG and SVG per edge class)
#   DIR/analysis/resources.md         e2e/experiments/summarize.py DIR
#
#   e2e/experiments/analyze.sh DIR
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DIR="${1:?usage: $0 DIR (an output directory of e2e/experiments/propagation.sh)}"
[[ -f "$DIR/runs.csv" ]] || { echo "$DIR has no runs.csv: not an output of propagation.sh" >&2; exit 1; }
KASCADE="${KASCADE_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/kascade}"
[[ -n "${KASCADE_BIN:-}" ]] || (cd "$ROOT" && cargo build --release --locked --bin kascade 2>&1 | tail -n 1 >&2)
mkdir -p "$DIR/analysis"
TMP="$(mktemp -d)"; trap 'rm -rf "$TMP"' EXIT
for sized in "$DIR"/n*/; do
  n="$(basename "$sized")"
  logs=("$sized"*.audit.log.gz)
  [[ -f "${logs[0]}" ]] || continue
  # kascade reads plain files: unpack this N's logs, then drop them again.
  rm -f "$TMP"/*.log
  for f in "${logs[@]}"; do gzip -dc "$f" >"$TMP/$(basename "$f" .gz)"; done
  echo "== $n: ${#logs[@]} runs" >&2
  "$KASCADE" analyze "$TMP"/*.log --format text >"$DIR/analysis/$n.txt"
  "$KASCADE" analyze "$TMP"/*.log --format json >"$DIR/analysis/$n.json"
  "$KASCADE" analyze "$TMP"/*.log --format csv --plot "$DIR/analysis/$n" >"$DIR/analysis/$n.csv"
done
python3 "$ROOT/e2e/experiments/summarize.py" "$DIR" >"$DIR/analysis/resources.md"
echo "written to $DIR/analysis" >&2
