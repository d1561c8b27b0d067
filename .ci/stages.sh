#!/usr/bin/env bash
# Runs `make STAGE` for each stage given, in order, stopping at the first
# that fails, and prints how long each took when it ends (pass or fail):
# the suite's time budget is watched stage by stage.
set -uo pipefail
declare -a rows=()
started=$SECONDS
summary() {
  local rc=$?
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
