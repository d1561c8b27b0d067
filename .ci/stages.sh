#!/usr/bin/env bash
# Runs `make STAGE` for each stage given, in order, stopping at the first
# that fails, and prints how long each took when it ends (pass or fail):
# the suite's time budget is watched stage by stage.
#
#   stages.sh [--idle 'COMMAND' LOG] STAGE...
#
# --idle starts COMMAND in the background at the lowest CPU priority
# (SCHED_IDLE: it runs only on cycles nothing else wants, so the stages'
# own work and timings are not slowed), its output in LOG: a build a later
# stage needs, made from the cores the earlier stages leave idle (a cargo
# build in the same target dir later waits for it and finds it done). It is
# stopped at the end if still running.
set -uo pipefail
declare -a rows=()
started=$SECONDS
idle_pid=""
if [[ "${1:-}" == --idle ]]; then
  idle_cmd="$2"; idle_log="$3"; shift 3
  mkdir -p "$(dirname "$idle_log")"
  if command -v chrt >/dev/null; then idle=(chrt --idle 0); else idle=(nice -n 19); fi
  setsid "${idle[@]}" bash -c "$idle_cmd" >"$idle_log" 2>&1 </dev/null &
  idle_pid=$!
  echo "stages: '$idle_cmd' runs in the background at idle priority (pid $idle_pid, output in $idle_log)" >&2
fi
summary() {
  local rc=$?
  if [[ -n "$idle_pid" ]] && kill -0 "$idle_pid" 2>/dev/null; then
    kill -TERM -- "-$idle_pid" 2>/dev/null || true
  fi
  {
    echo
    echo "stage times (make test):"
    printf '  %s\n' "${rows[@]}"
    printf '  %-8s %5ds\n' total $((SECONDS - started))
  } >&2
  exit $rc
}
trap summary EXIT
for stage in "$@"; do
  t=$SECONDS
  make --no-print-directory "$stage"
  rc=$?
  rows+=("$(printf '%-8s %5ds%s' "$stage" $((SECONDS - t)) "$([[ $rc -ne 0 ]] && echo '  FAILED')")")
  [[ $rc -eq 0 ]] || exit $rc
done
