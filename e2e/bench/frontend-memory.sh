#!/usr/bin/env bash
# The frontend's peak memory at its defaults, measured in the burst its
# bounds are sized for (docs/benchmarks.md, *The Jaeger UI's read path*): the trace
# cache filled with 1,000-Pod Deployments' traces (FILL of them, default 11:
# ≈ 17 MB each once served, past the 192 MiB --cache-bytes), then, all at
# once, one Deployment too big for --max-trace-bytes (WIDE_PODS, default
# 2,000 Pods: a wide assembly, stopped at its budget) and SMALL Deployments
# (default 3, SMALL_PODS = 200 Pods each: below a quarter of the budget, so
# never wide), the --max-assemblies (4) allowed in flight together.
# Each Deployment is the deployment fixture copied into a namespace of its
# own, with one Pod's audit lines copied under fresh names (as
# e2e/bench/read-path.sh makes its 1,000 Pods); replayed into the harness's
# raw Jaeger; a dist-profile `kascade frontend` (defaults, gRPC reads) and a
# query Jaeger in front; the searches are the Jaeger UI's.
# Prints a line "burst: …": the frontend's RSS once the cache is full, its
# peak RSS (VmHWM) over the burst, the cache's bytes, the Pods each trace
# shows, and the burst's assemblies, waits and evictions. Then, from a
# fresh frontend, "search_all: …": one search that finds every Deployment
# (FILL + 1 + SMALL traces, up to the UI's limit of 20, in one answer) and
# the frontend's peak RSS over it; again with `--cache-bytes 0`, where no
# trace of the answer is cached.
#   KASCADE_BIN   the binary to measure (default: a dist-profile build of this tree)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
BIN="$("$ROOT/e2e/build.sh" all | sed -n 's/^KASCADE_E2E_BIN=//p')"
KASCADE_BIN="${KASCADE_BIN:-$ROOT/target/dist/kascade}"
[[ "$KASCADE_BIN" != "$ROOT/target/dist/kascade" ]] || cargo build --profile dist --locked --bin kascade >&2
FILL="${FILL:-11}"
WIDE_PODS="${WIDE_PODS:-2000}"
SMALL="${SMALL:-3}"
SMALL_PODS="${SMALL_PODS:-200}"
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

# Namespaces fill-0…, wide, small-0…, one Deployment `hello` each; a line
# "namespace pods" per Deployment in $RUN/deployments.
{
  for i in $(seq 0 $((FILL - 1))); do echo "fill-$i 1000"; done
  echo "wide $WIDE_PODS"
  for i in $(seq 0 $((SMALL - 1))); do echo "small-$i $SMALL_PODS"; done
} >"$RUN/deployments"
python3 - "$ROOT/e2e/fixtures/deployment/audit.log" "$RUN/deployments" >"$RUN/audit.log" <<'PY'
import re, sys
template_pod = "hello-54f9b65d48-dfv6w"
lines = [l for l in open(sys.argv[1]) if l.strip()]
pod_lines = [l for l in lines if template_pod in l]
audit_id = re.compile(r'"auditID":"([^"]*)"')
out = sys.stdout
for deployment in open(sys.argv[2]):
    ns, pods = deployment.split()
    def moved(l, suffix):
        l = l.replace('"namespace":"default"', f'"namespace":"{ns}"').replace("/namespaces/default/", f"/namespaces/{ns}/")
        return audit_id.sub(lambda m: f'"auditID":"{m.group(1)}-{ns}{suffix}"', l, count=1)
    out.writelines(moved(l, "") for l in lines)
    for i in range(int(pods)):
        name = f"hello-54f9b65d48-b{i:05}"
        out.writelines(moved(l.replace(template_pod, name), f"-{i}") for l in pod_lines)
PY
replay_into_raw_jaeger "$RUN/audit.log"
read -r START END < <(search_range "$ROOT/e2e/fixtures/deployment/audit.log")
# Every raw span stored before measuring: the last Deployment's last Pod.
wait_for_raw_spans "{\"namespace\":\"small-$((SMALL - 1))\",\"resource\":\"pods\",\"name\":\"hello-54f9b65d48-b$(printf %05d $((SMALL_PODS - 1)))\"}" "$START" "$END"

# A fresh frontend and query Jaeger for each measurement; $1: what to do
# (burst | search-all), run by the Python below; further arguments are the
# frontend's.
measure() {
  local what=$1
  shift
  start_frontend --jaeger-url http://127.0.0.1:29486 --jaeger-grpc-url http://127.0.0.1:29471 "$@"
  local rc=0
  python3 - "$what" "$START" "$END" "$FPID" "$RUN/deployments" "$*" <<'PY' || rc=$?
import concurrent.futures, json, sys, urllib.parse, urllib.request
what, start, end, pid, flags = sys.argv[1:5] + [sys.argv[6]]
deployments = [l.split() for l in open(sys.argv[5])]
def search(tags):
    # Every Pod shown (siblings=all): the bounds measured are those of
    # wide traces, which a summary of their Pods would not reach.
    tags = {**tags, "siblings": "all"}
    url = "http://127.0.0.1:29496/api/traces?" + urllib.parse.urlencode({
        "service": "tracing", "start": start, "end": end, "limit": 20, "tags": json.dumps(tags)})
    return json.loads(urllib.request.urlopen(url, timeout=300).read())["data"]
def pods_shown(ns):
    found = search({"namespace": ns, "resource": "deployments", "name": "hello"})
    assert len(found) == 1, f"{ns}: {len(found)} traces found"
    return sum(1 for s in found[0]["spans"] if s["operationName"].startswith(f"{ns}/hello-54f9b65d48-b"))
def status(key):
    return next(int(l.split()[1]) for l in open(f"/proc/{pid}/status") if l.startswith(key))
def metrics():
    text = urllib.request.urlopen("http://127.0.0.1:29494/metrics").read().decode()
    out = {}
    for l in text.splitlines():
        if l.startswith("kascade_frontend_") and not l.startswith("#"):
            name, value = l.rsplit(" ", 1)
            out[name] = float(value)
    return out
mib = lambda kib: f"{kib / 1024:.0f}"
if what == "search-all":
    # One search finding every Deployment `hello` (all namespaces): up to
    # the UI's limit of 20 traces in one answer.
    found = search({"resource": "deployments", "name": "hello"})
    m = metrics()
    print(f"search_all{' ' + flags if flags else ''}: traces={len(found)} peak_mib={mib(status('VmHWM'))} "
          f"cache_mib={m['kascade_frontend_cache_bytes'] / 2**20:.0f} "
          f"evictions={int(m.get('kascade_frontend_cache_evictions_total', 0))}")
    sys.exit(0)
fill = [ns for ns, _ in deployments if ns.startswith("fill-")]
burst = [ns for ns, _ in deployments if not ns.startswith("fill-")]
for ns in fill:
    pods = pods_shown(ns)
    assert pods >= 1000, f"{ns}: {pods} Pods in the trace"
before = metrics()
rss_full, hwm_fill = status("VmRSS"), status("VmHWM")
# All at once: the wide one and the small ones.
with concurrent.futures.ThreadPoolExecutor(len(burst)) as pool:
    shown = dict(zip(burst, pool.map(pods_shown, burst)))
after = metrics()
delta = lambda name: int(after.get(name, 0) - before.get(name, 0))
print(f"burst: cache_full_rss_mib={mib(rss_full)} fill_peak_mib={mib(hwm_fill)} "
      f"burst_peak_mib={mib(status('VmHWM'))} "
      f"cache_mib={after['kascade_frontend_cache_bytes'] / 2**20:.0f} "
      f"pods_shown={json.dumps(shown, separators=(',', ':'))} "
      f"assembled={delta('kascade_frontend_traces_assembled_total')} "
      f"waits={delta('kascade_frontend_assembly_waits_total')} "
      f"wide_waits={delta('kascade_frontend_wide_assembly_waits_total')} "
      f"evictions={delta('kascade_frontend_cache_evictions_total')}")
PY
  stop_frontend
  [[ $rc -eq 0 ]] || { tail -n 5 "$RUN/frontend.log" >&2; return "$rc"; }
}
measure burst
measure search-all
# Nothing kept: every trace of the answer is one the cache does not hold
# (larger than --cache-bytes, or evicted while the others were assembled).
measure search-all --cache-bytes 0
