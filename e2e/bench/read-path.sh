#!/usr/bin/env bash
# The Jaeger UI's read path through real Jaegers: a Deployment with PODS Pods
# (default 1,000: the deployment fixture with one Pod's audit lines copied
# under fresh names, as benches/assemble.rs makes it) replayed into the
# harness's raw Jaeger (e2e/jaeger/raw.yaml), a dist-profile `kascade frontend`
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
#   KASCADE_BIN   the binary to measure (default: a dist-profile build of this tree)
#   SIBLINGS      summary (default: the UI's search as users type it, the
#                 ReplicaSet's Pods beyond --max-siblings summarised by one
#                 span) or all (the search tag siblings=all: every Pod a span)
#   MODE          tracing (default: Service tracing, a span per object) or
#                 cascade (Service cascade, a span per write; every Pod's
#                 create is expected, shown or named by a summary)
#   STORES        the raw reads measured (default: grpc http)
#   COMPONENT_TRACES=1  also stores kube-apiserver's request trace of every
#                 write of the log in the raw Jaeger (service apiserver,
#                 derived from captured ones: e2e/bench/apiserver-traces.py;
#                 the copied Pods' lines get audit IDs of their own), and
#                 measures frontends with the join (the default
#                 --component-service apiserver) and without it (a service
#                 the store has no traces of: the one search a store
#                 without component traces costs), paired: ROUNDS (default
#                 2) rounds of without–with–with–without per store. Each
#                 line also gives the apiserver spans in the cold answer.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
BIN="$("$ROOT/e2e/build.sh" all | sed -n 's/^KASCADE_E2E_BIN=//p')"
KASCADE_BIN="${KASCADE_BIN:-$ROOT/target/dist/kascade}"
[[ "$KASCADE_BIN" != "$ROOT/target/dist/kascade" ]] || cargo build --profile dist --locked --bin kascade >&2
PODS="${PODS:-1000}"
RUNS="${RUNS:-5}"
SIBLINGS="${SIBLINGS:-summary}"
MODE="${MODE:-tracing}"
STORES="${STORES:-grpc http}"
COMPONENT_TRACES="${COMPONENT_TRACES:-0}"
[[ "$MODE" == tracing || "$MODE" == cascade ]] || { echo "MODE must be tracing or cascade, not $MODE" >&2; exit 2; }
RUN="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$RUN"
}
trap cleanup EXIT
# shellcheck source=/dev/null
source "$ROOT/e2e/bench/jaegers.sh"
start_raw_jaeger

python3 - "$ROOT/e2e/fixtures/deployment/audit.log" "$PODS" "$COMPONENT_TRACES" >"$RUN/audit.log" <<'PY'
import json, sys
template_pod = "hello-54f9b65d48-dfv6w"
lines = [l for l in open(sys.argv[1]) if l.strip()]
sys.stdout.writelines(lines)
template = [l for l in lines if template_pod in l]
ids = [json.loads(l)["auditID"] for l in template]
for i in range(int(sys.argv[2])):
    name = f"hello-54f9b65d48-b{i:05}"
    copies = [l.replace(template_pod, name) for l in template]
    if sys.argv[3] == "1":
        # Each copied write its own audit ID, as the join needs.
        copies = [l.replace(id, f"{id[:-12]}{i + 1:012x}") for l, id in zip(copies, ids)]
    sys.stdout.writelines(copies)
PY
replay_into_raw_jaeger "$RUN/audit.log"
read -r START END < <(search_range "$RUN/audit.log")
# Every raw span stored before timing (the exporter's last batch included).
wait_for_raw_spans "{\"resource\":\"pods\",\"name\":\"hello-54f9b65d48-b$(printf %05d $((PODS - 1)))\"}" "$START" "$END"
if [[ "$COMPONENT_TRACES" == 1 ]]; then
  read -r TRACES SPANS LAST_ID < <(python3 "$ROOT/e2e/bench/apiserver-traces.py" "$RUN/audit.log" http://127.0.0.1:29418 bench)
  echo "apiserver traces stored: $TRACES requests, $SPANS spans" >&2
  SERVICE=apiserver wait_for_raw_spans "{\"audit-id\":\"$LAST_ID\"}" "$START" "$END"
fi

# One frontend + query Jaeger per run, in a subshell; $1 = grpc|http. Prints
# "cold_ms warm_ms cold_search_ms warm_search_ms reads requests assemble_ms"
# (assemble_ms: the frontend's own time for the cold assembly, raw reads
# included).
measure() {
  local store=$1 variant=$2 args=(--jaeger-url http://127.0.0.1:29486)
  [[ "$store" == http ]] || args+=(--jaeger-grpc-url http://127.0.0.1:29471)
  [[ "$variant" != without ]] || args+=(--component-service apiserver-not-stored)
  # measure runs in a subshell of its own: its processes end with it.
  trap stop_frontend EXIT
  start_frontend "${args[@]}"
  local rc=0
  python3 - "$START" "$END" "$PODS" "$SIBLINGS" "$MODE" <<'PY' || rc=$?
import json, sys, time, urllib.parse, urllib.request
start, end, pods, siblings, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
ui = "http://127.0.0.1:29496"
tags = {"resource": "deployments", "name": "hello"}
if siblings != "summary":
    tags["siblings"] = siblings
search = ui + "/api/traces?" + urllib.parse.urlencode({
    "service": mode, "start": start, "end": end, "limit": 20,
    "tags": json.dumps(tags)})
copied = "default/hello-54f9b65d48-b"
# Tracing: a Pod's span is named by it; cascade: its create is a write span.
named = (lambda n: n.startswith(copied)) if mode == "tracing" else (lambda n: ("create pods " + copied) in n)
summary = " more pods" if mode == "tracing" else " more create pods"
expected = pods
def pods_in(trace):
    """Every copied Pod is in the answer: a span of its own, or named in
    the log of the span that summarises the Pods not shown."""
    shown = sum(1 for s in trace["spans"] if named(s["operationName"]))
    listed = sum(1 for s in trace["spans"] if s["operationName"].endswith(summary)
                 for log in s["logs"] for f in log["fields"]
                 if f["key"] == "event" and named(f["value"]))
    assert shown + listed >= expected, f"{shown} shown and {listed} listed of {expected} Pods"
    assert siblings != "summary" or shown < pods, f"{shown} Pods shown, none summarised"
def answer(url):
    """(the answer's data, ms from the request to its last byte): the
    servers' time. The client's JSON parse is left out: Python's takes
    longer than the servers for these ~10 MB answers, a browser's far less."""
    t = time.monotonic()
    body = urllib.request.urlopen(url, timeout=120).read()
    ms = (time.monotonic() - t) * 1000
    return json.loads(body)["data"], ms
def apiserver_spans(trace):
    return sum(1 for s in trace["spans"]
               if trace["processes"][s["processID"]]["serviceName"] == "apiserver")
def ui_calls():
    """(both calls, the search alone, apiserver spans) in ms; each answer
    holds every Pod."""
    found, search_ms = answer(search)
    assert len(found) == 1, f"{len(found)} traces found"
    traces, page_ms = answer(f"{ui}/api/traces/{found[0]['traceID']}")
    pods_in(found[0])
    pods_in(traces[0])
    return search_ms + page_ms, search_ms, apiserver_spans(traces[0])
cold, cold_search, joined = ui_calls()
warms = [ui_calls() for _ in range(5)]
warm = sorted(w[0] for w in warms)[2]
warm_search = sorted(w[1] for w in warms)[2]
metrics = urllib.request.urlopen("http://127.0.0.1:29494/metrics").read().decode()
value = lambda n: next(l.split()[-1] for l in metrics.splitlines() if l.startswith(n))
assemble_ms = float(value('kascade_frontend_assemble_seconds_sum')) * 1000
# Every warm call was answered from the cache: the trace fits --cache-bytes.
assembled = value('kascade_frontend_traces_assembled_total')
assert assembled == '1', f"the trace was assembled {assembled} times (cache: {value('kascade_frontend_cache_bytes')} bytes)"
print(f"{cold:.0f} {warm:.0f} {cold_search:.0f} {warm_search:.0f} {value('kascade_frontend_raw_reads_total')} {value('kascade_frontend_raw_requests_total')} {assemble_ms:.0f} {joined}")
PY
  stop_frontend
  [[ $rc -eq 0 ]] || { tail -n 5 "$RUN/frontend.log" >&2; return "$rc"; }
}

order=()
if [[ "$COMPONENT_TRACES" == 1 ]]; then
  for _ in $(seq "${ROUNDS:-2}"); do order+=(without with with without); done
else
  for _ in $(seq "$RUNS"); do order+=(plain); done
fi
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
for store in $STORES; do
  : >"$RUN/results"
  for variant in "${order[@]}"; do
    (measure "$store" "$variant") >"$RUN/measured"
    echo "$variant $(cat "$RUN/measured")" >>"$RUN/results"
  done
  for variant in plain without with; do
    colds=() warms=() cold_searches=() warm_searches=() assembles=()
    while read -r v cold warm cold_search warm_search r q assemble j; do
      [[ "$v" == "$variant" ]] || continue
      reads=$r requests=$q joined=$j
      colds+=("$cold"); warms+=("$warm"); assembles+=("$assemble")
      cold_searches+=("$cold_search"); warm_searches+=("$warm_search")
    done <"$RUN/results"
    (( ${#colds[@]} )) || continue
    components=""
    [[ "$variant" == plain ]] || components=" components=$variant apiserver_spans=$joined"
    echo "store=$store mode=$MODE pods=$PODS siblings=$SIBLINGS runs=${#colds[@]}$components cold_ms=$(median "${colds[@]}") (${colds[*]}) warm_ms=$(median "${warms[@]}") (${warms[*]}) search_alone_cold_ms=$(median "${cold_searches[@]}") (${cold_searches[*]}) search_alone_warm_ms=$(median "${warm_searches[@]}") (${warm_searches[*]}) frontend_assemble_ms=$(median "${assembles[@]}") (${assembles[*]}) raw_reads=$reads raw_requests=$requests"
  done
done
