#!/usr/bin/env python3
"""Captures the apiserver's own traces of a namespace's writes from a Jaeger.

    capture-component-traces.py AUDIT_LOG NAMESPACE JAEGER_QUERY_URL OUT_DIR

Writes OUT_DIR/audit.log (the audit log's write lines of NAMESPACE, and of the
namespace itself, unedited) and OUT_DIR/apiserver-traces.jsonl: for each of
those lines' audit IDs, the apiserver's trace of that request as Jaeger's
/api/v3 returns it (OTLP/JSON TracesData, one per line, spans unedited; the
form `kascade explain --component-traces` reads). Requests with no trace
(sampled out, or the exporter had not connected yet) are listed on stderr.
"""
import json
import sys
import urllib.parse
import urllib.request

WRITES = {"create", "update", "patch", "delete", "deletecollection"}


def get(url):
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.load(r)


def main():
    audit_log, ns, jaeger, out = sys.argv[1:5]
    lines = []
    for line in open(audit_log):
        ev = json.loads(line)
        ref = ev.get("objectRef") or {}
        ours = ref.get("namespace") == ns or (ref.get("resource") == "namespaces" and ref.get("name") == ns)
        if ev.get("verb") in WRITES and ours and ev.get("stage") == "ResponseComplete":
            lines.append(line)
    with open(f"{out}/audit.log", "w") as f:
        f.writelines(lines)
    missing = 0
    with open(f"{out}/apiserver-traces.jsonl", "w") as f:
        for line in lines:
            audit_id = json.loads(line)["auditID"]
            q = urllib.parse.urlencode({"service": "apiserver", "tags": json.dumps({"audit-id": audit_id}),
                                        "lookback": "6h", "limit": "5"})
            found = get(f"{jaeger}/api/traces?{q}")["data"]
            if not found:
                missing += 1
                print(f"no trace for audit ID {audit_id}", file=sys.stderr)
                continue
            for t in found:
                otlp = get(f"{jaeger}/api/v3/traces/{t['traceID']}")["result"]
                f.write(json.dumps(otlp, separators=(",", ":")) + "\n")
    print(f"{len(lines)} writes, {len(lines) - missing} traced", file=sys.stderr)


main()
