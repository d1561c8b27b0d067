#!/usr/bin/env bash
# Mergelog intake of `kascade collect`: a real OTLP receiver (Jaeger v2 with
# a discarding pipeline), kascade (dist profile), and a Python generator
# posting batches of mergelogs (each merging 2 CPIDs, as a controller would)
# to POST /cpid/mergelogs over one keep-alive connection. Prints mergelogs
# per kascade CPU-second (utime + stime of the kascade process) and its peak
# RSS (VmHWM). BENCH_MERGELOGS (default 200000) and BENCH_BATCH (1000).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
BIN="$("$ROOT/e2e/build.sh" all | sed -n 's/^KASCADE_E2E_BIN=//p')"
KASCADE_BIN="${KASCADE_BIN:-$ROOT/target/dist/kascade}"
[[ "$KASCADE_BIN" != "$ROOT/target/dist/kascade" ]] || cargo build --profile dist --locked --bin kascade >&2
RUN="$(mktemp -d)"
pids=()
cleanup() {
  if [[ -n "${KPID:-}" ]]; then kill "$KPID" 2>/dev/null || true; wait "$KPID" 2>/dev/null || true; fi
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$RUN"
}
trap cleanup EXIT
JAEGER_OTLP_GRPC_PORT=29317 JAEGER_HEALTH_PORT=29133 \
  "$BIN/jaeger" --config "file:$ROOT/e2e/jaeger/sink.yaml" >"$RUN/jaeger.log" 2>&1 &
pids+=($!)
"$KASCADE_BIN" collect --listen 127.0.0.1:29090 --admin-listen 127.0.0.1:29091 \
  --otlp-endpoint http://127.0.0.1:29317 --spool-dir "$RUN/spool" >"$RUN/kascade.log" 2>&1 &
KPID=$!; pids+=($KPID)
deadline=$((SECONDS + 30))
until curl -sf http://127.0.0.1:29133/status >/dev/null 2>&1 || curl -sf http://127.0.0.1:29133/ >/dev/null 2>&1; do
  (( SECONDS < deadline )) || { echo "Jaeger sink not ready" >&2; exit 1; }; sleep 0.2
done
until curl -sf http://127.0.0.1:29091/readyz >/dev/null; do
  (( SECONDS < deadline )) || { echo "kascade not ready" >&2; cat "$RUN/kascade.log" >&2; exit 1; }; sleep 0.2
done
cpu() { awk '{print $14 + $15}' "/proc/$KPID/stat"; }
ticks="$(getconf CLK_TCK)"
before="$(cpu)"
start=$(date +%s.%N)
N="${BENCH_MERGELOGS:-200000}" B="${BENCH_BATCH:-1000}" python3 - <<'PY'
import http.client, json, os, uuid, time
n, b = int(os.environ["N"]), int(os.environ["B"])
conn = http.client.HTTPConnection("127.0.0.1", 29090)
now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
sent = 0
while sent < n:
    k = min(b, n - sent)
    items = [{"cpid": str(uuid.uuid4()), "sources": [str(uuid.uuid4()), str(uuid.uuid4())],
              "time": now, "controller": "bench"} for _ in range(k)]
    body = json.dumps({"mergelogs": items})
    while True:
        conn.request("POST", "/cpid/mergelogs", body, {"Content-Type": "application/json"})
        r = conn.getresponse(); r.read()
        if r.status == 200: break
        if r.status != 429: raise SystemExit(f"HTTP {r.status}")
        time.sleep(0.05)
    sent += k
PY
# Processed and exported: every mergelog accepted is 3 spans (merge + 2 merged_into).
want=$(( ${BENCH_MERGELOGS:-200000} * 3 ))
until [[ "$(curl -sf http://127.0.0.1:29091/metrics | awk '$1 ~ /^kascade_spans_exported_total/ {s += $2} END {print s+0}')" -ge "$want" ]]; do
  sleep 0.2
done
end=$(date +%s.%N)
after="$(cpu)"
hwm="$(awk '/VmHWM/ {print $2}' "/proc/$KPID/status")"
python3 -c "
n=${BENCH_MERGELOGS:-200000}; cpu=($after-$before)/$ticks; wall=$end-$start
print(f'{n} mergelogs ({n*3} spans) in {wall:.1f} s: {n/wall:,.0f} mergelogs/s, kascade CPU {cpu:.2f} s = {n/cpu:,.0f} mergelogs per CPU-second; peak RSS {$hwm/1024:.0f} MiB')
"
