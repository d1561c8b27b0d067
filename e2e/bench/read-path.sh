#!/usr/bin/env bash
# The Jaeger UI's read path through real Jaegers: a Deployment with PODS Pods
# (default 1,000: the deployment fixture with one Pod's audit lines copied
# under fresh names, as benches/assemble.rs makes it) replayed into the
# harness's raw Jaeger (e2e/jaeger/raw.yaml), a release `kascade frontend`
# over it and a query Jaeger (e2e/jaeger/query.yaml) in front. Timed: the
# UI's two calls, `/api/traces?service=tracing&tags=…` (the search, which
# assembles the trace) then `/api/traces/{id}` (the trace page opened by its
# URL), cold (a frontend just started: nothing cached) and warm (the same
# calls again), with the frontend reading the raw Jaeger over its
# remote-storage gRPC API (--jaeger-grpc-url) and over its query HTTP API.
# The search alone is timed too: it is all the Jaeger UI waits for when a
# trace is opened from the search results (v1.74.0 keeps the search's traces
# and fetches a trace only when it has none; TracePage ensureTraceFetched).
# Prints one line per store: cold and warm medians over RUNS (default 5), of
# both calls and of the search alone, and the frontend's raw reads and
# requests of one cold assembly.
#   KASCADE_BIN   the binary to measure (default: a release build of this tree)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
BIN="$("$ROOT/e2e/build.sh" all | sed -n 's/^KASCADE_E2E_BIN=//p')"
KASCADE_BIN="${KASCADE_BIN:-$ROOT/target/release/kascade}"
[[ "$KASCADE_BIN" != "$ROOT/target/release/kascade" ]] || cargo build --release --locked --bin kascade >&2
PODS="${PODS:-1000}"
RUNS="${RUNS:-5}"
RUN="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$RUN"
}
trap cleanup EXIT

wait_for() { # what url [log]
  local deadline=$((SECONDS + 60))
  until curl -sf "$2" >/dev/null 2>&1; do
    (( SECONDS < deadline )) || { echo "$1 not ready" >&2; [[ -z "${3:-}" ]] || tail -n 20 "$3" >&2; exit 1; }
    sleep 0.2
  done
}

# The raw Jaeger, as the harness runs it.
JAEGER_BIND_HOST=127.0.0.1 JAEGER_OTLP_GRPC_PORT=29417 JAEGER_OTLP_HTTP_PORT=29418 \
  JAEGER_QUERY_HTTP_PORT=29486 JAEGER_QUERY_GRPC_PORT=29485 JAEGER_HEALTH_PORT=29433 \
  JAEGER_METRICS_PORT=29488 JAEGER_REMOTE_STORAGE_PORT=29471 \
  "$BIN/jaeger" --config "file:$ROOT/e2e/jaeger/raw.yaml" >"$RUN/jaeger-raw.log" 2>&1 &
pids+=($!)
wait_for "raw Jaeger" http://127.0.0.1:29486/api/services "$RUN/jaeger-raw.log"

python3 - "$ROOT/e2e/fixtures/deployment/audit.log" "$PODS" >"$RUN/audit.log" <<'PY'
import sys
template_pod = "hello-54f9b65d48-dfv6w"
lines = [l for l in open(sys.argv[1]) if l.strip()]
sys.stdout.writelines(lines)
template = [l for l in lines if template_pod in l]
for i in range(int(sys.argv[2])):
    name = f"hello-54f9b65d48-b{i:05}"
    sys.stdout.writelines(l.replace(template_pod, name) for l in template)
PY
"$KASCADE_BIN" replay --cluster bench --otlp-endpoint http://127.0.0.1:29417 --output otlp \
  "$RUN/audit.log" >"$RUN/replay.log" 2>&1 || { cat "$RUN/replay.log" >&2; exit 1; }
# The search range: the fixture's time, from an hour before (object spans
# start with their window, up to --window before the first write).
read -r START END < <(python3 - "$RUN/audit.log" <<'PY'
import datetime, json, sys
ts = [json.loads(l)["stageTimestamp"] for l in open(sys.argv[1]) if l.strip()]
us = lambda s: int(datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp() * 1e6)
print(min(map(us, ts)) - 3_600_000_000, max(map(us, ts)) + 60_000_000)
PY
)
# Every raw span stored before timing (the exporter's last batch included).
expected=$(grep -c . "$RUN/audit.log")
deadline=$((SECONDS + 120))
until curl -sf "http://127.0.0.1:29486/api/traces?service=kascade&tags=%7B%22resource%22%3A%22pods%22%2C%22name%22%3A%22hello-54f9b65d48-b$(printf %05d $((PODS - 1)))%22%7D&start=$START&end=$END&limit=5" \
  | python3 -c 'import json,sys; sys.exit(0 if json.load(sys.stdin).get("data") else 1)' 2>/dev/null; do
  (( SECONDS < deadline )) || { echo "the last Pod's spans never reached the raw Jaeger ($expected audit lines)" >&2; exit 1; }
  sleep 0.5
done

# One frontend + query Jaeger per run, in a subshell; $1 = grpc|http. Prints
# "cold_ms warm_ms cold_search_ms warm_search_ms reads requests assemble_ms"
# (assemble_ms: the frontend's own time for the cold assembly, raw reads
# included).
measure() {
  local store=$1 args=(--jaeger-url http://127.0.0.1:29486)
  [[ "$store" == http ]] || args+=(--jaeger-grpc-url http://127.0.0.1:29471)
  "$KASCADE_BIN" frontend --grpc-listen 127.0.0.1:29493 --http-listen 127.0.0.1:29494 "${args[@]}" \
    >"$RUN/frontend.log" 2>&1 &
  fpid=$!
  JAEGER_BIND_HOST=127.0.0.1 JAEGER_QUERY_HTTP_PORT=29496 JAEGER_QUERY_GRPC_PORT=29497 \
    JAEGER_HEALTH_PORT=29498 JAEGER_OTLP_GRPC_PORT=29499 JAEGER_OTLP_HTTP_PORT=29500 \
    KASCADE_FRONTEND_GRPC=127.0.0.1:29493 \
    "$BIN/jaeger" --config "file:$ROOT/e2e/jaeger/query.yaml" >"$RUN/jaeger-query.log" 2>&1 &
  qpid=$!
  # measure runs in a subshell of its own: its processes end with it.
  trap 'kill "$qpid" "$fpid" 2>/dev/null || true' EXIT
  wait_for "kascade frontend" http://127.0.0.1:29494/readyz "$RUN/frontend.log"
  wait_for "query Jaeger" http://127.0.0.1:29496/api/services "$RUN/jaeger-query.log"
  local rc=0
  python3 - "$START" "$END" "$PODS" <<'PY' || rc=$?
import json, sys, time, urllib.parse, urllib.request
start, end, pods = sys.argv[1], sys.argv[2], int(sys.argv[3])
ui = "http://127.0.0.1:29496"
search = ui + "/api/traces?" + urllib.parse.urlencode({
    "service": "tracing", "start": start, "end": end, "limit": 20,
    "tags": json.dumps({"resource": "deployments", "name": "hello"})})
def pods_in(trace):
    names = sum(1 for s in trace["spans"] if s["operationName"].startswith("default/hello-54f9b65d48-b"))
    assert names >= pods, f"{names} of {pods} Pods in the trace"
def answer(url):
    """(the answer's data, ms from the request to its last byte): the
    servers' time. The client's JSON parse is left out: Python's takes
    longer than the servers for these ~10 MB answers, a browser's far less."""
    t = time.monotonic()
    body = urllib.request.urlopen(url, timeout=120).read()
    ms = (time.monotonic() - t) * 1000
    return json.loads(body)["data"], ms
def ui_calls():
    """(both calls, the search alone) in ms; each answer holds every Pod."""
    found, search_ms = answer(search)
    assert len(found) == 1, f"{len(found)} traces found"
    traces, page_ms = answer(f"{ui}/api/traces/{found[0]['traceID']}")
    pods_in(found[0])
    pods_in(traces[0])
    return search_ms + page_ms, search_ms
cold, cold_search = ui_calls()
warms = [ui_calls() for _ in range(5)]
warm = sorted(w[0] for w in warms)[2]
warm_search = sorted(w[1] for w in warms)[2]
metrics = urllib.request.urlopen("http://127.0.0.1:29494/metrics").read().decode()
value = lambda n: next(l.split()[-1] for l in metrics.splitlines() if l.startswith(n))
assemble_ms = float(value('kascade_frontend_assemble_seconds_sum')) * 1000
# Every warm call was answered from the cache: the trace fits --cache-bytes.
assembled = value('kascade_frontend_traces_assembled_total')
assert assembled == '1', f"the trace was assembled {assembled} times (cache: {value('kascade_frontend_cache_bytes')} bytes)"
print(f"{cold:.0f} {warm:.0f} {cold_search:.0f} {warm_search:.0f} {value('kascade_frontend_raw_reads_total')} {value('kascade_frontend_raw_requests_total')} {assemble_ms:.0f}")
PY
  kill "$qpid" "$fpid" 2>/dev/null || true
  wait "$qpid" "$fpid" 2>/dev/null || true
  [[ $rc -eq 0 ]] || { tail -n 5 "$RUN/frontend.log" >&2; return "$rc"; }
}

for store in grpc http; do
  colds=() warms=() cold_searches=() warm_searches=() assembles=()
  for _ in $(seq "$RUNS"); do
    (measure "$store") >"$RUN/measured"
    read -r cold warm cold_search warm_search reads requests assemble <"$RUN/measured"
    colds+=("$cold"); warms+=("$warm"); assembles+=("$assemble")
    cold_searches+=("$cold_search"); warm_searches+=("$warm_search")
  done
  median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
  echo "store=$store pods=$PODS runs=$RUNS cold_ms=$(median "${colds[@]}") (${colds[*]}) warm_ms=$(median "${warms[@]}") (${warms[*]}) search_alone_cold_ms=$(median "${cold_searches[@]}") (${cold_searches[*]}) search_alone_warm_ms=$(median "${warm_searches[@]}") (${warm_searches[*]}) frontend_assemble_ms=$(median "${assembles[@]}") raw_reads=$reads raw_requests=$requests"
done
