#!/usr/bin/env bash
# Memory of the list-watch: a harness cluster of its own, kascade collect
# watching it, then N Pods (default 10,000; kwok runs them on fake nodes).
# Prints kascade's RSS and state-cache size before and after, per object.
# docs/benchmarks.md reports the result. PODS=N to change the count.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
PODS="${PODS:-10000}"
NAME=watchmem
cargo build --profile dist --locked --bin kascade >&2
"$ROOT/e2e/cluster.sh" up --name "$NAME" --port-base 30500 >&2
KPID=""
cleanup() {
  [[ -n "$KPID" ]] && kill "$KPID" 2>/dev/null || true
  "$ROOT/e2e/cluster.sh" down --name "$NAME" >/dev/null 2>&1 || true
}
trap cleanup EXIT
# shellcheck source=/dev/null
source "$ROOT/e2e/.run-$NAME/env"
LOG="$KASCADE_E2E_RUN_DIR/kascade-watch.log"
"$ROOT/target/dist/kascade" collect --listen 127.0.0.1:30590 --admin-listen 127.0.0.1:30591 \
  --cluster "$NAME" --watch-cluster "$NAME=$KASCADE_KUBECONFIG" --output otlp-json=/dev/null --spool-dir "$KASCADE_E2E_RUN_DIR/spool" >"$LOG" 2>&1 &
KPID=$!
metric() { curl -sf http://127.0.0.1:30591/metrics | awk -v m="$1" '$1==m {print $2}'; }
rss_kib() { awk '/VmRSS/ {print $2}' "/proc/$KPID/status"; }
deadline=$((SECONDS + 60))
until [[ -n "$(metric kascade_state_cache_entries)" ]]; do
  (( SECONDS < deadline )) || { echo "kascade not ready" >&2; tail "$LOG" >&2; exit 1; }; sleep 0.5
done
sleep 5 # initial lists of the empty cluster
base_rss=$(rss_kib); base_entries=$(metric kascade_state_cache_entries); base_bytes=$(metric kascade_state_cache_bytes)
echo "creating $PODS pods" >&2
"$KUBECTL" create namespace mem >/dev/null
python3 - "$PODS" > "$KASCADE_E2E_RUN_DIR/pods.json" <<'PY'
import json, sys
n = int(sys.argv[1])
items = [{"apiVersion": "v1", "kind": "Pod",
          "metadata": {"name": f"p-{i:05d}", "namespace": "mem", "labels": {"app": "mem", "shard": str(i % 10)}},
          "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]}} for i in range(n)]
json.dump({"apiVersion": "v1", "kind": "List", "items": items}, sys.stdout)
PY
start=$SECONDS
"$KUBECTL" create -f "$KASCADE_E2E_RUN_DIR/pods.json" >/dev/null
echo "created in $((SECONDS - start))s; waiting for kascade to hold them" >&2
deadline=$((SECONDS + 600))
while :; do
  entries=$(metric kascade_state_cache_entries)
  (( ${entries%.*} - ${base_entries%.*} >= PODS )) && break
  (( SECONDS < deadline )) || { echo "kascade holds only $entries states" >&2; exit 1; }
  sleep 2
done
sleep 10 # let kwok's status updates settle
rss=$(rss_kib); entries=$(metric kascade_state_cache_entries); bytes=$(metric kascade_state_cache_bytes)
peak=$(awk '/VmHWM/ {print $2}' "/proc/$KPID/status")
python3 - "$PODS" "$base_rss" "$rss" "$peak" "$base_entries" "$entries" "$base_bytes" "$bytes" <<'PY'
import sys
pods, base_rss, rss, peak, be, e, bb, b = (float(x) for x in sys.argv[1:])
print(f"pods:                 {int(pods)}")
print(f"RSS before/after:     {base_rss/1024:.0f} MiB / {rss/1024:.0f} MiB (peak {peak/1024:.0f} MiB)")
print(f"RSS per pod:          {(rss-base_rss)*1024/pods:.0f} bytes")
print(f"state cache:          {int(e-be)} objects, {(b-bb)/1024/1024:.1f} MiB, {(b-bb)/max(e-be,1):.0f} bytes per object")
PY
