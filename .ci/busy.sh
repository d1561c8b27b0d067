#!/usr/bin/env bash
# busy.sh [--load SCRIPT] COMMAND...: runs COMMAND while the cores are kept
# busy, as on a loaded CI runner or a laptop building other things, so that a
# test which depends on how fast the machine is fails here rather than
# sometimes elsewhere.
#
# The load is CPU-burning processes (BURNERS, default 2: both cores of the
# development machine) at the same priority as COMMAND. With --load SCRIPT,
# the load is first SCRIPT (`bash SCRIPT`, e.g. a cargo build, which keeps
# the cores busy with work that is needed anyway; its output goes to
# target/busy-load.log) and the burners take over if it ends before COMMAND;
# if COMMAND ends first, busy.sh waits for SCRIPT (or stops it, when COMMAND
# failed). The burners are stopped when COMMAND ends, however it ends. The
# exit status is COMMAND's when it failed, else SCRIPT's.
set -euo pipefail
load=""
if [[ "${1:-}" == --load ]]; then
  load="${2:?busy.sh: --load needs a script}"
  [[ -f "$load" ]] || { echo "busy.sh: --load $load: no such file" >&2; exit 2; }
  shift 2
fi
(($# > 0)) || { echo "usage: busy.sh [--load SCRIPT] COMMAND..." >&2; exit 2; }
burners="${BURNERS:-2}"
[[ "$burners" =~ ^[0-9]+$ ]] || { echo "busy.sh: BURNERS must be a number, not '$burners'" >&2; exit 2; }
target="${CARGO_TARGET_DIR:-target}"
load_log="$target/busy-load.log"
pids=() burner_pids=() load_pid=""
stop() {
  local p
  # The load in its own process group: its cargo and rustc stop with it.
  [[ -z "$load_pid" ]] || kill -- "-$load_pid" 2>/dev/null || true
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap stop EXIT
trap 'exit 130' INT TERM
start_burners() {
  local i
  for ((i = 0; i < burners; i++)); do
    nice -n 0 sh -c 'while :; do :; done' &
    pids+=("$!") burner_pids+=("$!")
  done
  echo "busy.sh: $burners CPU burners (pids ${burner_pids[*]}) running beside: $*" >&2
}

if [[ -z "$load" ]]; then
  start_burners "$@"
  "$@"
  exit
fi

mkdir -p "$target"
started=$SECONDS
setsid bash "$load" >"$load_log" 2>&1 &
load_pid=$!
pids+=("$load_pid")
echo "busy.sh: $load (pid $load_pid, output in $load_log) running beside: $*" >&2
"$@" &
cmd_pid=$!
pids+=("$cmd_pid")
cmd_rc="" load_rc=""
finished=""
wait -n -p finished "$load_pid" "$cmd_pid" && rc=0 || rc=$?
if [[ "$finished" == "$load_pid" ]]; then
  load_rc=$rc load_pid=""
  echo "busy.sh: $load ended after $((SECONDS - started))s (exit $load_rc); CPU burners for the rest" >&2
  start_burners "$@"
  wait "$cmd_pid" && cmd_rc=0 || cmd_rc=$?
else
  cmd_rc=$rc
  if ((cmd_rc != 0)); then
    echo "busy.sh: $* failed (exit $cmd_rc); stopping $load" >&2
    exit "$cmd_rc"
  fi
  echo "busy.sh: $* ended after $((SECONDS - started))s; waiting for $load" >&2
  wait "$load_pid" && load_rc=0 || load_rc=$?
  load_pid=""
  echo "busy.sh: $load ended after $((SECONDS - started))s (exit $load_rc)" >&2
fi
if ((load_rc != 0)); then
  echo "busy.sh: $load failed (exit $load_rc); the end of $load_log:" >&2
  tail -n 40 "$load_log" >&2
fi
((cmd_rc != 0)) && exit "$cmd_rc"
exit "$load_rc"
