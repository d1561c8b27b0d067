#!/usr/bin/env bash
# Runs `make STAGE` for each stage given, in order, stopping at the first
# that fails, and prints how long each took when it ends (pass or fail):
# the suite's time budget is watched stage by stage.
#
# A stage written `&STAGE` starts in the background and runs beside the
# stages after it: its output goes to target/stage-STAGE.log and is printed
# when it ends, which the next background stage or the end of the run waits
# for. Meant for a stage whose
# length is set by the clock rather than by the work (the fuzz targets run
# for a fixed time each) beside stages that mostly wait on a control plane.
# A failure of either fails the run; when a foreground stage fails, the
# background one is stopped.
#
# Each foreground stage that passes leaves a mark, for which a background
# stage can wait (`bash .ci/stages.sh --await STAGE`; outside a stages.sh
# run it returns at once); a step within a stage leaves one with
# `--mark NAME`: the fuzz stage builds its targets beside the unit build and
# runs them once it is made (`unit-built`), beside the unit tests.
set -uo pipefail
if [[ "${1:-}" == --mark ]]; then
  # A mark of a step within a stage (the unit stage's build), awaited the
  # same way; nothing outside a stages.sh run.
  mark="${2:?stages.sh: --mark needs a name}"
  [[ -z "${KASCADE_STAGES_DIR:-}" ]] || touch "$KASCADE_STAGES_DIR/$mark.passed"
  exit 0
fi
if [[ "${1:-}" == --await ]]; then
  awaited="${2:?stages.sh: --await needs a stage}"
  [[ -n "${KASCADE_STAGES_DIR:-}" ]] || exit 0
  echo "stages.sh: waiting for the $awaited stage to pass" >&2
  # When it fails instead, stages.sh stops the stage waiting here.
  until [[ -e "$KASCADE_STAGES_DIR/$awaited.passed" ]]; do sleep 1; done
  echo "stages.sh: the $awaited stage passed" >&2
  exit 0
fi
declare -a rows=()
started=$SECONDS
target="${CARGO_TARGET_DIR:-target}"
bg_name="" bg_pid="" bg_started=0 bg_log=""
mkdir -p "$target/stages"
KASCADE_STAGES_DIR="$(cd "$target/stages" && pwd)"
export KASCADE_STAGES_DIR
rm -f "$KASCADE_STAGES_DIR"/*.passed

finish_background() {
  [[ -n "$bg_pid" ]] || return 0
  local rc=0
  wait "$bg_pid" || rc=$?
  echo "----- $bg_name (ran in the background; $bg_log) -----" >&2
  cat "$bg_log" >&2
  rows+=("$(printf '%-8s %5ds  (beside the stages after it)%s' "$bg_name" $((SECONDS - bg_started)) "$([[ $rc -ne 0 ]] && echo '  FAILED')")")
  bg_pid=""
  return $rc
}

summary() {
  local rc=$?
  if [[ -n "$bg_pid" ]]; then
    kill -- "-$bg_pid" 2>/dev/null || kill "$bg_pid" 2>/dev/null || true
    wait "$bg_pid" 2>/dev/null || true
    rows+=("$(printf '%-8s %5ds  stopped' "$bg_name" $((SECONDS - bg_started)))")
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
  if [[ "$stage" == '&'* ]]; then
    # One background stage at a time: the next waits for the last.
    finish_background || exit $?
    bg_name="${stage#&}" bg_started=$SECONDS bg_log="$target/stage-${stage#&}.log"
    mkdir -p "$target"
    echo "stages.sh: $bg_name runs in the background (output in $bg_log)" >&2
    # Its own process group, so that stopping it stops what make started.
    set -m
    make --no-print-directory "$bg_name" >"$bg_log" 2>&1 &
    bg_pid=$!
    set +m
    continue
  fi
  t=$SECONDS
  make --no-print-directory "$stage"
  rc=$?
  rows+=("$(printf '%-8s %5ds%s' "$stage" $((SECONDS - t)) "$([[ $rc -ne 0 ]] && echo '  FAILED')")")
  [[ $rc -eq 0 ]] || exit $rc
  touch "$KASCADE_STAGES_DIR/$stage.passed"
done
finish_background || exit $?
