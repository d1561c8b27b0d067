#!/usr/bin/env python3
"""A burst of searches at the read side, as a dashboard's refresh or many
users at once would send it (e2e/faults.sh, scenario `searches`): the Jaeger
query tier (the UI's API) in front of `kascade frontend`, which reads the
raw Jaeger the fault suite's load was exported to.

200 searches at once through the query tier's /api/traces: 100 identical
ones (one namespace's Deployments) and 100 different ones (a namespace
each). Checked:
1. every search gets an HTTP answer (none is dropped or left hanging);
2. an answer with traces shows the namespace searched for, and nothing
   else;
3. an answer without traces says why (the frontend's busy message, or the
   query tier's deadline), and not every search is refused;
4. the identical searches share raw reads (the frontend's
   searches_shared counter grows);
5. the frontend's /healthz answers during the burst, and it is alive after.

Usage: searches.py UI_URL FRONTEND_ADMIN_URL FRONTEND_PID ACCEPTED_TSV
Prints one line `key=value ...`; exits 1 when a check fails.
"""
import json
import os
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

ui, admin, pid, accepted = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
failures = []

namespaces = []
with open(accepted) as f:
    for line in f:
        ns = line.split("\t", 1)[0]
        if ns not in namespaces:
            namespaces.append(ns)
if len(namespaces) < 101:
    sys.exit(f"searches.py: {accepted} names {len(namespaces)} namespaces; 101 are needed")


def alive():
    try:
        os.kill(pid, 0)
        return True
    except OSError:
        return False


def metric(name):
    """The frontend's counter whose name contains `name` (0 when absent)."""
    with urllib.request.urlopen(admin + "/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if not line.startswith("#") and name in line.split(" ")[0]:
                return float(line.rsplit(" ", 1)[1])
    return 0.0


def search(ns):
    query = urllib.parse.urlencode({
        "service": "tracing",
        "tags": json.dumps({"resource": "deployments", "namespace": ns}),
        "lookback": "6h",
        "limit": "20",
    })
    req = urllib.request.Request(f"{ui}/api/traces?{query}")
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        body = e.read()
        try:
            return e.code, json.loads(body)
        except ValueError:
            return e.code, {"errors": [{"msg": body.decode(errors="replace")[:300]}]}
    except Exception as e:  # no answer at all: what the probe is about
        return None, {"errors": [{"msg": f"no answer: {e}"}]}


shared_before = metric("searches_shared")
searched = [namespaces[0]] * 100 + namespaces[1:101]
results = [None] * len(searched)
start = threading.Barrier(len(searched) + 1)


def run(i):
    start.wait()
    results[i] = search(searched[i])


threads = [threading.Thread(target=run, args=(i,)) for i in range(len(searched))]
for t in threads:
    t.start()
start.wait()
began = time.monotonic()
# The frontend's health while the burst is in flight.
healthz_ok = 0
for _ in range(5):
    try:
        with urllib.request.urlopen(admin + "/healthz", timeout=10) as r:
            healthz_ok += r.status == 200
    except Exception:
        pass
for t in threads:
    t.join()
burst_s = time.monotonic() - began

served = refused = unanswered = 0
reasons = {}
for ns, (status, body) in zip(searched, results):
    if status is None:
        unanswered += 1
        failures.append(f"search of {ns}: {body['errors'][0]['msg']}")
        continue
    traces = body.get("data") or []
    if traces:
        served += 1
        names = {s["operationName"] for t in traces for s in t["spans"] if not s.get("references")}
        wrong = [n for n in names if not n.startswith(ns + "/")]
        if wrong:
            failures.append(f"search of {ns} answered with roots of other namespaces: {wrong[:3]}")
        continue
    refused += 1
    msgs = [e.get("msg", "") for e in body.get("errors") or []]
    if not msgs or not any(msgs):
        failures.append(f"search of {ns}: HTTP {status}, no trace and no reason")
        continue
    # A late answer says which deadline passed: the query tier's, or the
    # frontend's --assembly-timeout (gRPC DeadlineExceeded).
    late = "deadline" in msgs[0].lower() or "--assembly-timeout" in msgs[0]
    reason = "busy" if "--search-wait" in msgs[0] else "deadline" if late else "other"
    reasons[reason] = reasons.get(reason, 0) + 1
    if reason == "other":
        failures.append(f"search of {ns}: HTTP {status}: {msgs[0][:200]}")

shared = metric("searches_shared") - shared_before
# What the frontend counted, for the log (e2e/faults.sh keeps it).
with urllib.request.urlopen(admin + "/metrics", timeout=10) as r:
    for line in r.read().decode().splitlines():
        if not line.startswith("#") and any(w in line for w in ("search", "cache", "request", "raw_read")):
            print(line, file=sys.stderr)
if served == 0:
    failures.append("every search was refused")
if shared < 1:
    failures.append("the 100 identical searches shared no raw read")
if healthz_ok == 0:
    failures.append("/healthz did not answer during the burst")
if not alive():
    failures.append("the frontend died")

print(f"searches=200 served={served} refused={refused} "
      f"busy={reasons.get('busy', 0)} deadline={reasons.get('deadline', 0)} "
      f"unanswered={unanswered} shared_reads={int(shared)} healthz_during={healthz_ok}/5 "
      f"burst={burst_s:.0f}s")
for f in failures:
    print(f"FAIL: {f}", file=sys.stderr)
sys.exit(1 if failures else 0)
