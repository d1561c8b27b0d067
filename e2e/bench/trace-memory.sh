#!/usr/bin/env bash
# Peak memory of `kascade trace` over a large audit log: the bench log
# (e2e/bench/load-log.sh) with 956 copies of the deployment fixture, 571 MB,
# one Deployment's tree printed. Prints wall time, CPU seconds and peak RSS
# (from /usr/bin/time -v) and the tree's lines.
# Target: peak RSS ≤ 600 MB (the spans are spilled to a temporary file,
# only their index held: frontend/raw/spill.rs).
#   KASCADE_BIN       the binary to measure (default: a dist-profile build of this tree)
#   KASCADE_BASELINE_BIN  another binary (e.g. a build of the previous commit)
#                 measured the same way, its tree compared with KASCADE_BIN's
#   BENCH_NAMESPACES  copies of the fixture (default 956 ≈ 571 MB)
#   BENCH_COPY_SPACING_MS  copy i happens i × N ms after the first (default 5,
#                 overlapping, as e2e/bench/collect.sh sends them)
#   BENCH_LOG         where to write (and keep) the log; default: a temporary file
#   BENCH_MAX_RSS_MB  fail when KASCADE_BIN peaks above this many MB (10^6 bytes; default 600)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
KASCADE_BIN="${KASCADE_BIN:-$TARGET/dist/kascade}"
[[ "$KASCADE_BIN" != "$TARGET/dist/kascade" ]] || (cd "$ROOT" && cargo build --profile dist --locked --bin kascade >&2)
[[ -x /usr/bin/time ]] || { echo "/usr/bin/time is needed (apt-get install time)" >&2; exit 1; }
RUN="$(mktemp -d)"
trap 'rm -rf "$RUN"' EXIT
LOG="${BENCH_LOG:-$RUN/load.log}"
NAMESPACES="${BENCH_NAMESPACES:-956}"
# shellcheck source=/dev/null
source "$ROOT/e2e/bench/load-log.sh"
write_load_log "$LOG" "$NAMESPACES" "${BENCH_COPY_SPACING_MS:-5}"
events=$(wc -l <"$LOG")
size_mb=$(( $(stat -c %s "$LOG") / 1000000 ))
# One Deployment in the middle of the log: its ReplicaSets and Pods.
args=(trace "$LOG" --resource deployments --namespace "bench-$(( NAMESPACES / 2 ))" --name hello)
rss_mb=0
measure() { # label, binary, output file
  local label="$1" bin="$2" out="$3"
  /usr/bin/time -v "$bin" "${args[@]}" >"$out" 2>"$RUN/time.txt" \
    || { cat "$RUN/time.txt" >&2; exit 1; }
  local wall rss_kib cpu
  wall=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$RUN/time.txt")
  rss_kib=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$RUN/time.txt")
  cpu=$(awk -F': ' '/User time|System time/ {s += $2} END {print s}' "$RUN/time.txt")
  rss_mb=$((rss_kib * 1024 / 1000000))
  echo "$label: log_mb=$size_mb events=$events wall=$wall cpu_s=$cpu peak_rss_mib=$((rss_kib / 1024)) peak_rss_mb=$rss_mb tree_lines=$(wc -l <"$out")"
}
if [[ -n "${KASCADE_BASELINE_BIN:-}" ]]; then
  measure baseline "$KASCADE_BASELINE_BIN" "$RUN/baseline.txt"
fi
measure trace "$KASCADE_BIN" "$RUN/trace.txt"
if [[ -n "${KASCADE_BASELINE_BIN:-}" ]] && ! cmp -s "$RUN/baseline.txt" "$RUN/trace.txt"; then
  echo "the trees differ:" >&2
  diff "$RUN/baseline.txt" "$RUN/trace.txt" | head -20 >&2
  exit 1
fi
max="${BENCH_MAX_RSS_MB:-600}"
(( rss_mb <= max )) || { echo "peak RSS $rss_mb MB is above $max MB" >&2; exit 1; }
