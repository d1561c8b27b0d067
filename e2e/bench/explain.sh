#!/usr/bin/env bash
# `kascade explain` over the 1-million-event bench log (e2e/bench/load-log.sh),
# once with no scope and once for one namespace of it. Prints wall time, CPU
# seconds and peak RSS (from /usr/bin/time -v) and the findings' totals.
# Targets (issue 14): no scope ≤ 30 s and ≤ 1 GiB; one namespace ≤ 5 s.
#   KASCADE_BIN       the binary to measure (default: a dist-profile build of this tree)
#   BENCH_NAMESPACES  copies of the fixture (default 7700)
#   BENCH_COPY_SPACING_MS  copy i happens i × N ms after the first (default 5,
#                 overlapping, as e2e/bench/collect.sh sends them); 0: the
#                 copies at the same times, one after the other
#   BENCH_OMIT_MANAGED_FIELDS  1: the objects without metadata.managedFields,
#                 as an audit policy with omitManagedFields: true logs them
#   BENCH_LOG         where to write (and keep) the log; default: a temporary file
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
KASCADE_BIN="${KASCADE_BIN:-$TARGET/dist/kascade}"
[[ "$KASCADE_BIN" != "$TARGET/dist/kascade" ]] || (cd "$ROOT" && cargo build --profile dist --locked --bin kascade >&2)
[[ -x /usr/bin/time ]] || { echo "/usr/bin/time is needed (apt-get install time)" >&2; exit 1; }
RUN="$(mktemp -d)"
trap 'rm -rf "$RUN"' EXIT
LOG="${BENCH_LOG:-$RUN/load.log}"
# shellcheck source=/dev/null
source "$ROOT/e2e/bench/load-log.sh"
write_load_log "$LOG" "${BENCH_NAMESPACES:-7700}" "${BENCH_COPY_SPACING_MS:-5}"
events=$(wc -l <"$LOG")
measure() { # label, explain flags...
  local label="$1"; shift
  /usr/bin/time -v "$KASCADE_BIN" explain --format json "$@" "$LOG" >"$RUN/report.json" 2>"$RUN/time.txt" \
    || { cat "$RUN/time.txt" >&2; exit 1; }
  local wall rss_kib cpu totals
  wall=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$RUN/time.txt")
  rss_kib=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$RUN/time.txt")
  cpu=$(awk -F': ' '/User time|System time/ {s += $2} END {print s}' "$RUN/time.txt")
  totals=$(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); t=r['totals']; print(f\"in_scope={r['inputs']['events_in_scope']} errors={t['error']} warnings={t['warning']} notes={t['info']}\")" "$RUN/report.json")
  echo "$label: events=$events wall=$wall cpu_s=$cpu peak_rss_mib=$((rss_kib / 1024)) $totals"
}
measure "no scope"
measure "one namespace" --namespace "bench-$(( ${BENCH_NAMESPACES:-7700} / 2 ))"
