#!/usr/bin/env python3
"""Captures the apiserver's own traces of writes from a Jaeger.

    capture-component-traces.py AUDIT_LOG NAMESPACE JAEGER_QUERY_URL OUT_DIR

Writes OUT_DIR/audit.log (the audit log's write lines of NAMESPACE, and of the
namespace itself, unedited) and OUT_DIR/apiserver-traces.jsonl: for each of
those lines' audit IDs, the apiserver's trace of that request as Jaeger's
/api/v3 returns it (OTLP/JSON TracesData, one per line, spans unedited; the
form `kascade explain --component-traces` reads). Requests with no trace
(sampled out, or the exporter had not connected yet) are counted on stderr
(the first ten listed).

NAMESPACE `*` takes every write of the log (a whole-cluster corpus run,
e2e/corpus/capture.sh) and writes only OUT_DIR/apiserver-traces.jsonl: the
corpus keeps the whole audit log itself.
"""
import concurrent.futures
import json
import sys
import urllib.parse
import urllib.request

WRITES = {"create", "update", "patch", "delete", "deletecollection"}


def get(url):
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.load(r)


def traces_of(jaeger, audit_id):
    """The request's traces as OTLP/JSON lines ([] when none was stored)."""
    q = urllib.parse.urlencode({"service": "apiserver", "tags": json.dumps({"audit-id": audit_id}),
                                "lookback": "6h", "limit": "5"})
    found = get(f"{jaeger}/api/traces?{q}")["data"]
    return [json.dumps(get(f"{jaeger}/api/v3/traces/{t['traceID']}")["result"], separators=(",", ":"))
            for t in found]


def main():
    audit_log, ns, jaeger, out = sys.argv[1:5]
    whole = ns == "*"
    lines = []
    for line in open(audit_log):
        ev = json.loads(line)
        ref = ev.get("objectRef") or {}
        ours = whole or ref.get("namespace") == ns or (ref.get("resource") == "namespaces" and ref.get("name") == ns)
        if ev.get("verb") in WRITES and ours and ev.get("stage") == "ResponseComplete":
            lines.append(line)
    if not whole:
        with open(f"{out}/audit.log", "w") as f:
            f.writelines(lines)
    ids = [json.loads(line)["auditID"] for line in lines]
    missing = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool, \
            open(f"{out}/apiserver-traces.jsonl", "w") as f:
        # map keeps the log's order: the file is the same for the same store.
        for audit_id, traces in zip(ids, pool.map(lambda i: traces_of(jaeger, i), ids)):
            if not traces:
                missing.append(audit_id)
            for t in traces:
                f.write(t + "\n")
    for audit_id in missing[:10]:
        print(f"no trace for audit ID {audit_id}", file=sys.stderr)
    print(f"{len(lines)} writes, {len(lines) - len(missing)} traced", file=sys.stderr)


main()
