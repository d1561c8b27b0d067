#!/usr/bin/env bash
# busy.sh COMMAND...: runs COMMAND while CPU-burning processes keep the cores
# busy (BURNERS, default 2: both cores of the development machine), as on a
# loaded CI runner or a laptop building other things, so that a test which
# depends on how fast the machine is fails here rather than sometimes
# elsewhere. The burners are stopped when COMMAND ends, however it ends;
# COMMAND's exit status is the script's.
set -euo pipefail
burners="${BURNERS:-2}"
[[ "$burners" =~ ^[0-9]+$ ]] || { echo "busy.sh: BURNERS must be a number, not '$burners'" >&2; exit 2; }
pids=()
stop() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap stop EXIT
trap 'exit 130' INT TERM
for ((i = 0; i < burners; i++)); do
  # At the same priority as the tests: they compete for the cores.
  nice -n 0 sh -c 'while :; do :; done' &
  pids+=("$!")
done
echo "busy.sh: $burners CPU burners (pids ${pids[*]}) running beside: $*" >&2
"$@"
