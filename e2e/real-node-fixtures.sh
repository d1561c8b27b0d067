#!/usr/bin/env bash
# Regenerates e2e/fixtures/real-<scenario>/ from a fresh control plane with one
# real node (e2e/node.sh) beside the kwok nodes, for the scenarios only a real
# kubelet produces (e2e/scenarios/real-*.sh):
#   audit.log               the audit log's write lines of the scenario's namespace
#                           (and of the namespace itself), unedited
#   apiserver-traces.jsonl  the apiserver's trace of each of those writes
#                           (e2e/tools/capture-component-traces.py)
#   kubelet-traces.jsonl    the kubelet's traces of the namespace's Pods and of its
#                           own writes, containerd's spans under them
#                           (e2e/tools/capture-kubelet-traces.py)
#   events.json             core/v1 Events of the namespace (EventList)
#
#   e2e/real-node-fixtures.sh [scenario...]   (default: crashloop image-missing oom readiness)
#
# The cluster is `--name realnode --port-base 33000` unless KASCADE_E2E_NAME /
# KASCADE_E2E_PORT_BASE say otherwise; the apiserver, the kubelet and
# containerd all send their traces to the cluster's own Jaeger. Everything is
# torn down at the end, also on failure. Needs root (see e2e/node.sh).
set -euo pipefail
E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
NAME="${KASCADE_E2E_NAME:-realnode}"
PORT_BASE="${KASCADE_E2E_PORT_BASE:-33000}"
RUN_DIR="$E2E_DIR/.run-$NAME"
OUT="$E2E_DIR/fixtures"
# Seconds after a scenario for the exporters' batches (5 s) to reach Jaeger.
SETTLE="${KASCADE_REAL_SETTLE:-10}"
SCENARIOS=("$@")
[[ ${#SCENARIOS[@]} -gt 0 ]] || SCENARIOS=(crashloop image-missing oom readiness)
declare -A NS=([crashloop]=real-crash [image-missing]=real-image [oom]=real-oom [readiness]=real-ready)

cleanup() { "$E2E_DIR/cluster.sh" down --name "$NAME" --port-base "$PORT_BASE" >&2 || true; }
trap cleanup EXIT
# No kascade listens there: the audit webhook's failures are logged by the apiserver and harmless.
"$E2E_DIR/cluster.sh" up --name "$NAME" --port-base "$PORT_BASE" \
  --audit-webhook-url "https://127.0.0.1:$((PORT_BASE + 999))/audit/$NAME" \
  --tracing-endpoint "127.0.0.1:$((PORT_BASE + 317))"
"$E2E_DIR/node.sh" up --name "$NAME" --port-base "$PORT_BASE"
# shellcheck source=/dev/null
source "$RUN_DIR/env"

for s in "${SCENARIOS[@]}"; do
  ns="${NS[$s]:?unknown scenario $s}"
  dir="$OUT/real-$s"; rm -rf "$dir"; mkdir -p "$dir"
  echo "== real-$s (namespace $ns)" >&2
  KASCADE_E2E_ENV="$RUN_DIR/env" "$E2E_DIR/scenarios/real-$s.sh"
  sleep "$SETTLE"
  # The audit log is written before each response (--audit-log-mode blocking):
  # every write the scenario waited for is in it.
  python3 "$E2E_DIR/tools/capture-component-traces.py" "$AUDIT_LOG" "$ns" "$JAEGER_QUERY_URL" "$dir"
  python3 "$E2E_DIR/tools/capture-kubelet-traces.py" "$dir" "$JAEGER_QUERY_URL"
  "$KUBECTL" get --raw "/api/v1/namespaces/$ns/events" >"$dir/events.json"
done
echo "fixtures written to $OUT/real-*" >&2
