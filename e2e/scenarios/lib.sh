# Shared by the scenarios: load the cluster's env and give helpers.
# shellcheck shell=bash
set -euo pipefail
SCENARIO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ENV_FILE="${KASCADE_E2E_ENV:-$SCENARIO_DIR/../.run/env}"
if [[ ! -f "$ENV_FILE" ]]; then
  echo "no $ENV_FILE: run e2e/cluster.sh up first (or set KASCADE_E2E_ENV)" >&2
  exit 1
fi
# shellcheck source=/dev/null
source "$ENV_FILE"
say() { printf '[scenario %s] %s\n' "$(basename "$0" .sh)" "$*" >&2; }
k() { "$KUBECTL" "$@"; }
# fresh_namespace NS: deletes leftovers of an earlier run, then creates NS.
fresh_namespace() {
  if k get namespace "$1" >/dev/null 2>&1; then
    say "deleting namespace $1 left by an earlier run"
    k delete namespace "$1" --wait --timeout=120s >/dev/null
  fi
  k create namespace "$1" >/dev/null
}
# real_node: loads e2e/node.sh's env (REAL_NODE, BUSYBOX_IMAGE) for the
# real-*.sh scenarios, whose Pods run on that real node: they select it
# (nodeSelector kascade.io/real-node) and tolerate its taint.
real_node() {
  local f="$KASCADE_E2E_RUN_DIR/node/env"
  [[ -f "$f" ]] || { echo "no $f: run e2e/node.sh up first" >&2; exit 1; }
  # shellcheck source=/dev/null
  source "$f"
}
