#!/usr/bin/env bash
# busy.sh [--load SCRIPT [--build CMD]] [--beside LOCK] COMMAND...: runs
# COMMAND while the cores are kept busy, as on a loaded CI runner or a laptop
# building other things, so that a test which depends on how fast the
# machine is fails here rather than sometimes elsewhere.
#
# The load is CPU-burning processes (BURNERS, default 2: both cores of the
# development machine) at the same priority as COMMAND. With --load SCRIPT,
# the load is first SCRIPT (`bash SCRIPT`, e.g. a cargo build, which keeps
# the cores busy with work that is needed anyway; its output goes to
# target/busy-load.log) and the burners take over if it ends before COMMAND;
# if COMMAND ends first, busy.sh waits for SCRIPT (or stops it, when COMMAND
# failed). --build CMD (a shell command) runs before COMMAND, beside SCRIPT
# but never beside the burners, which would only slow a compiler down.
# --beside LOCK: a build started elsewhere (another stage, in the background)
# holds the lock file LOCK while it runs; it is the load until it ends, the
# burners wait for it (busy.sh does not). The burners are stopped when
# COMMAND ends, however it ends. The exit status is that of CMD or COMMAND
# when it failed, else SCRIPT's.
set -euo pipefail
load="" build=""
if [[ "${1:-}" == --load ]]; then
  load="${2:?busy.sh: --load needs a script}"
  [[ -f "$load" ]] || { echo "busy.sh: --load $load: no such file" >&2; exit 2; }
  shift 2
  if [[ "${1:-}" == --build ]]; then
    build="${2:?busy.sh: --build needs a command}"
    shift 2
  fi
fi
beside=""
if [[ "${1:-}" == --beside ]]; then
  beside="${2:?busy.sh: --beside needs a lock file}"
  mkdir -p "$(dirname "$beside")"
  shift 2
fi
(($# > 0)) || { echo "usage: busy.sh [--load SCRIPT [--build CMD]] [--beside LOCK] COMMAND..." >&2; exit 2; }
burners="${BURNERS:-2}"
[[ "$burners" =~ ^[0-9]+$ ]] || { echo "busy.sh: BURNERS must be a number, not '$burners'" >&2; exit 2; }
target="${CARGO_TARGET_DIR:-target}"
load_log="$target/busy-load.log"
pids=() burner_pids=() load_pid="" cmd_pid=""
stop() {
  local p
  # The load and COMMAND beside it run in their own process groups: their
  # children (rustc, test binaries) stop with them.
  [[ -z "$load_pid" ]] || kill -- "-$load_pid" 2>/dev/null || true
  [[ -z "$cmd_pid" ]] || kill -- "-$cmd_pid" 2>/dev/null || true
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap stop EXIT
trap 'exit 130' INT TERM
start_burners() {
  local i
  for ((i = 0; i < burners; i++)); do
    # flock(1) creates LOCK when it is missing; a shared lock waits only
    # for the build's exclusive one.
    nice -n 0 sh -c '[ -z "$1" ] || flock -s "$1" true; while :; do :; done' burner "$beside" &
    pids+=("$!") burner_pids+=("$!")
  done
  echo "busy.sh: $burners CPU burners (pids ${burner_pids[*]}) running beside: $*${beside:+ (once the build holding $beside ends)}" >&2
}

if [[ -z "$load" ]]; then
  start_burners "$@"
  "$@"
  exit
fi

mkdir -p "$target"
started=$SECONDS
load_done="$(mktemp)"
rm -f "$load_done"
setsid bash -c 'bash "$1" >"$2" 2>&1; rc=$?; touch "$3"; exit $rc' busy-load "$load" "$load_log" "$load_done" &
load_pid=$!
pids+=("$load_pid")
echo "busy.sh: $load (pid $load_pid, output in $load_log) running beside: ${build:+$build, then }$*" >&2
load_ended() { # reaps the load, which has ended
  wait "$load_pid" && load_rc=0 || load_rc=$?
  load_pid=""
  rm -f "$load_done"
  echo "busy.sh: $load ended after $((SECONDS - started))s (exit $load_rc)" >&2
  if ((load_rc != 0)); then
    echo "busy.sh: $load failed; the end of $load_log:" >&2
    tail -n 40 "$load_log" >&2
  fi
}
load_rc=""
if [[ -n "$build" ]]; then
  bash -c "$build" || { rc=$?; echo "busy.sh: $build failed (exit $rc); stopping $load" >&2; exit "$rc"; }
fi
if [[ -e "$load_done" ]]; then
  load_ended
  ((load_rc == 0)) || exit "$load_rc"
  start_burners "$@"
  "$@"
  exit
fi
setsid "$@" &
cmd_pid=$!
pids+=("$cmd_pid")
finished=""
wait -n -p finished "$load_pid" "$cmd_pid" && rc=0 || rc=$?
if [[ "$finished" == "$load_pid" ]]; then
  load_ended
  if ((load_rc != 0)); then
    echo "busy.sh: stopping $*" >&2
    exit "$load_rc"
  fi
  start_burners "$@"
  wait "$cmd_pid" && rc=0 || rc=$?
  cmd_pid=""
  exit "$rc"
fi
cmd_pid=""
if ((rc != 0)); then
  echo "busy.sh: $* failed (exit $rc); stopping $load" >&2
  exit "$rc"
fi
echo "busy.sh: $* ended after $((SECONDS - started))s; waiting for $load" >&2
load_ended
exit "$load_rc"
