#!/usr/bin/env bash
# Latency to queryable: how long after a write its span can be found. A
# dist-profile `kascade collect` (defaults: --export-batch-timeout 1s) exports to
# the harness's raw Jaeger (e2e/jaeger/raw.yaml); `kascade frontend` and a
# query Jaeger (e2e/jaeger/query.yaml) serve the assembled traces. A paced
# sender posts the deployment fixture's real audit events (Event writes left
# out), copied into fresh namespaces with their timestamps set to the moment
# of sending, as audit webhook batches of 400 at RATES events/s (default
# "1000 10000") for SECONDS_PER_RATE each (default 60). For one sampled write
# a second (the create of a copy's Deployment) it polls, every 200 ms, until
# (a) the raw Jaeger's query API returns that write's span and (b) the query
# Jaeger (the UI's API) returns the assembled trace with it, and prints
# p50/p99/max of stageTimestamp → found for both, and the rate reached.
# The apiserver is not in the loop: it adds its own batching before this
# (--audit-webhook-batch-max-wait, 1 s in the harness, 30 s by default).
#   KASCADE_BIN   the binary to measure (default: a dist-profile build of this tree)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
BIN="$("$ROOT/e2e/build.sh" all | sed -n 's/^KASCADE_E2E_BIN=//p')"
KASCADE_BIN="${KASCADE_BIN:-$ROOT/target/dist/kascade}"
[[ "$KASCADE_BIN" != "$ROOT/target/dist/kascade" ]] || cargo build --profile dist --locked --bin kascade >&2
RATES="${RATES:-1000 10000}"
DURATION="${SECONDS_PER_RATE:-60}"
RUN="$(mktemp -d)"
pids=()
# kascade first: on SIGTERM it exports what it accepted, which needs Jaeger.
cleanup() {
  if [[ -n "${KPID:-}" ]]; then kill "$KPID" 2>/dev/null || true; wait "$KPID" 2>/dev/null || true; fi
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$RUN"
}
trap cleanup EXIT
wait_for() { # what url log
  local deadline=$((SECONDS + 60))
  until curl -sf "$2" >/dev/null 2>&1; do
    (( SECONDS < deadline )) || { echo "$1 not ready" >&2; tail -n 20 "$3" >&2; exit 1; }
    sleep 0.2
  done
}

JAEGER_BIND_HOST=127.0.0.1 JAEGER_OTLP_GRPC_PORT=29717 JAEGER_OTLP_HTTP_PORT=29718 \
  JAEGER_QUERY_HTTP_PORT=29786 JAEGER_QUERY_GRPC_PORT=29785 JAEGER_HEALTH_PORT=29733 \
  JAEGER_METRICS_PORT=29788 JAEGER_REMOTE_STORAGE_PORT=29771 \
  "$BIN/jaeger" --config "file:$ROOT/e2e/jaeger/raw.yaml" >"$RUN/jaeger-raw.log" 2>&1 &
pids+=($!)
wait_for "raw Jaeger" http://127.0.0.1:29786/api/services "$RUN/jaeger-raw.log"
"$KASCADE_BIN" collect --listen 127.0.0.1:29790 --admin-listen 127.0.0.1:29791 \
  --otlp-endpoint http://127.0.0.1:29717 --spool-dir "$RUN/spool" >"$RUN/collect.log" 2>&1 &
KPID=$!
"$KASCADE_BIN" frontend --grpc-listen 127.0.0.1:29793 --http-listen 127.0.0.1:29794 \
  --jaeger-url http://127.0.0.1:29786 --jaeger-grpc-url http://127.0.0.1:29771 \
  --default-cluster bench >"$RUN/frontend.log" 2>&1 &
pids+=($!)
JAEGER_BIND_HOST=127.0.0.1 JAEGER_QUERY_HTTP_PORT=29796 JAEGER_QUERY_GRPC_PORT=29797 \
  JAEGER_HEALTH_PORT=29798 JAEGER_OTLP_GRPC_PORT=29799 JAEGER_OTLP_HTTP_PORT=29800 \
  KASCADE_FRONTEND_GRPC=127.0.0.1:29793 \
  "$BIN/jaeger" --config "file:$ROOT/e2e/jaeger/query.yaml" >"$RUN/jaeger-query.log" 2>&1 &
pids+=($!)
wait_for "kascade collect" http://127.0.0.1:29791/readyz "$RUN/collect.log"
wait_for "kascade frontend" http://127.0.0.1:29794/readyz "$RUN/frontend.log"
wait_for "query Jaeger" http://127.0.0.1:29796/api/services "$RUN/jaeger-query.log"

python3 - "$ROOT/e2e/fixtures/deployment/audit.log" "$DURATION" $RATES <<'PY'
import datetime, http.client, json, queue, re, sys, threading, time, urllib.parse, urllib.request

fixture, duration, rates = sys.argv[1], float(sys.argv[2]), [int(r) for r in sys.argv[3:]]
events = [json.loads(l) for l in open(fixture) if l.strip()]
events = [e for e in events if (e.get("objectRef") or {}).get("resource") != "events"]
events.sort(key=lambda e: e["stageTimestamp"])
# The sampled write: the user's create of the Deployment.
sample_at = next(i for i, e in enumerate(events)
                 if e["verb"] == "create" and e["objectRef"]["resource"] == "deployments")
BATCH = 400
# Each event keeps its time relative to the sampled create (microseconds,
# written as a placeholder); the placeholders become times when the batch is
# sent, so the sampled write's stageTimestamp is the moment it is sent.
def us(s):
    return int(datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp() * 1e6)
origin = us(events[sample_at]["stageTimestamp"])
PLACEHOLDER = re.compile(r'"@(-?[0-9]+)@"')

def template_lines():
    out = []
    for e in events:
        line = json.dumps(e, separators=(",", ":"))
        line = line.replace('"namespace":"default"', '"namespace":"@NS@"').replace("/namespaces/default/", "/namespaces/@NS@/")
        c = json.loads(line)
        c["auditID"] = f'{c["auditID"]}-@NS@'
        for k in ("requestReceivedTimestamp", "stageTimestamp"):
            c[k] = f"@{us(c[k]) - origin}@"
        out.append(json.dumps(c, separators=(",", ":")))
    return out

TEMPLATE = template_lines()

def copy_lines(ns):
    return [l.replace("@NS@", ns) for l in TEMPLATE]

def stamped(body, sent):
    def at(m):
        t = datetime.datetime.fromtimestamp(sent + int(m.group(1)) / 1e6, datetime.timezone.utc)
        return '"' + t.strftime("%Y-%m-%dT%H:%M:%S.%fZ") + '"'
    return PLACEHOLDER.sub(at, body)

def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))] if xs else float("nan")

def found_raw(ns, sent):
    q = urllib.parse.urlencode({"service": "kascade", "limit": 5,
        "start": int((sent - 3600) * 1e6), "end": int((sent + 600) * 1e6),
        "tags": json.dumps({"namespace": ns, "resource": "deployments"})})
    d = json.load(urllib.request.urlopen("http://127.0.0.1:29786/api/traces?" + q, timeout=30))
    # The object's raw trace with the write's span in it.
    return any(tag["key"] == "kascade.span" and tag["value"] == "audit"
               for t in d.get("data") or [] for s in t["spans"] for tag in s["tags"])

def found_ui(ns, sent):
    q = urllib.parse.urlencode({"service": "tracing", "limit": 5,
        "start": int((sent - 3600) * 1e6), "end": int((time.time() + 1) * 1e6),
        "tags": json.dumps({"namespace": ns, "resource": "deployments", "name": "hello", "scope": "object"})})
    d = json.load(urllib.request.urlopen("http://127.0.0.1:29796/api/traces?" + q, timeout=30))
    return any(" create" in json.dumps(t) for t in d.get("data") or [])

def poller(samples, results, stop):
    pending = []
    while not (stop.is_set() and not pending and samples.empty()):
        while not samples.empty():
            pending.append(samples.get())
        now = time.time()
        still = []
        for s in pending:
            ns, sent, raw_at = s
            try:
                if raw_at is None and found_raw(ns, sent):
                    raw_at = time.time()
                if raw_at is not None and found_ui(ns, sent):
                    results.append((raw_at - sent, time.time() - sent))
                    continue
            except Exception as e:  # counted as not yet found
                pass
            if now - sent > 120:
                results.append((float("inf"), float("inf")))
                continue
            still.append((ns, sent, raw_at))
        pending = still
        time.sleep(0.2)

copy_no = 0
for rate in rates:
    samples, results, stop = queue.Queue(), [], threading.Event()
    t = threading.Thread(target=poller, args=(samples, results, stop))
    t.start()
    conn = http.client.HTTPConnection("127.0.0.1", 29790, timeout=60)
    sent_events, start, buf, retries = 0, time.time(), [], 0
    interval = BATCH / rate
    next_at = next_sample_at = start
    while time.time() - start < duration:
        while len(buf) < BATCH:
            ns = f"lat-{copy_no}"; copy_no += 1
            lines = copy_lines(ns)
            buf.extend((ns if i == sample_at else None, l) for i, l in enumerate(lines))
        batch, buf = buf[:BATCH], buf[BATCH:]
        now = time.time()
        if now < next_at:
            time.sleep(next_at - now)
        next_at += interval
        sent = time.time()
        body = stamped('{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[' +
                       ",".join(l for _, l in batch) + "]}", sent).encode()
        while True:
            conn.request("POST", "/audit/bench", body, {"Content-Type": "application/json"})
            r = conn.getresponse(); r.read()
            if r.status != 429:
                break
            retries += 1; time.sleep(0.05)
        if r.status != 200:
            sys.exit(f"webhook answered {r.status}")
        sent_events += len(batch)
        # One sampled write a second: each poll is a search the raw Jaeger
        # answers by scanning its traces, so polling must stay light.
        sample = next((ns for ns, _ in batch if ns), None)
        if sample and sent >= next_sample_at:
            samples.put((sample, sent, None))
            next_sample_at = sent + 1.0
    elapsed = time.time() - start
    stop.set(); t.join()
    raw = [a for a, _ in results]; ui = [b for _, b in results]
    lost = sum(1 for a in raw if a == float("inf"))
    print(f"rate={rate}/s reached={sent_events / elapsed:.0f}/s events={sent_events} samples={len(results)} "
          f"not_found_in_120s={lost} 429_retries={retries}")
    print(f"  raw Jaeger query API: p50={pct(raw, .5):.2f}s p99={pct(raw, .99):.2f}s max={max(raw):.2f}s")
    print(f"  assembled (query Jaeger): p50={pct(ui, .5):.2f}s p99={pct(ui, .99):.2f}s max={max(ui):.2f}s")
    sys.stdout.flush()
PY
