#!/usr/bin/env python3
"""Captures a real kubelet's traces of a scenario's Pods from a Jaeger.

    capture-kubelet-traces.py OUT_DIR JAEGER_QUERY_URL

Reads OUT_DIR/audit.log and OUT_DIR/apiserver-traces.jsonl (written first by
capture-component-traces.py) and writes OUT_DIR/kubelet-traces.jsonl: every
trace Jaeger holds with a kubelet span that is
  - about one of the scenario's Pods (its `k8s.pod.uid` attribute: syncPod,
    syncTerminatingPod, ... and the CRI calls under them), or
  - linked from one of the apiserver's spans of the scenario's writes (the
    kubelet's own requests: its HTTP client span is the apiserver span's link;
    status patches and Events are traced so),
one OTLP/JSON TracesData per line, as Jaeger's /api/v3 returns it (spans
unedited; containerd's spans of the same trace included: the kubelet passes
its trace context on to the CRI), ordered by the trace's first span. Prints a
summary of span names and attribute keys per service on stderr.
"""
import collections
import json
import sys
import urllib.error
import urllib.parse
import urllib.request


def get(url):
    with urllib.request.urlopen(url, timeout=60) as r:
        return json.load(r)


def spans(traces_data):
    for rs in traces_data.get("resourceSpans", []):
        service = next((a["value"].get("stringValue") for a in rs.get("resource", {}).get("attributes", [])
                        if a["key"] == "service.name"), "?")
        for ss in rs.get("scopeSpans", []):
            for s in ss.get("spans", []):
                yield service, s


def main():
    out, jaeger = sys.argv[1:3]
    uids = set()
    for line in open(f"{out}/audit.log"):
        ev = json.loads(line)
        ref = ev.get("objectRef") or {}
        if ref.get("resource") != "pods":
            continue
        obj = ev.get("responseObject") or {}
        uid = ref.get("uid") or ((obj.get("metadata") or {}).get("uid") if obj.get("kind") == "Pod" else None)
        if uid:
            uids.add(uid)
    trace_ids = set()
    for uid in sorted(uids):
        q = urllib.parse.urlencode({"service": "kubelet", "tags": json.dumps({"k8s.pod.uid": uid}),
                                    "lookback": "6h", "limit": "5000"})
        found = get(f"{jaeger}/api/traces?{q}")["data"]
        print(f"pod {uid}: {len(found)} kubelet traces", file=sys.stderr)
        trace_ids.update(t["traceID"] for t in found)
    linked = set()
    for line in open(f"{out}/apiserver-traces.jsonl"):
        for _, s in spans(json.loads(line)):
            for link in s.get("links", []):
                linked.add(link["traceId"])
    traces = []
    for tid in sorted(trace_ids | linked):
        try:
            data = get(f"{jaeger}/api/v3/traces/{tid}")["result"]
        except urllib.error.HTTPError as e:
            if e.code == 404 and tid in linked:
                continue  # a link to a trace of no service Jaeger holds
            raise
        if not any(service == "kubelet" for service, _ in spans(data)):
            continue
        first = min(int(s["startTimeUnixNano"]) for _, s in spans(data))
        traces.append((first, tid, data))
    traces.sort(key=lambda t: t[:2])
    with open(f"{out}/kubelet-traces.jsonl", "w") as f:
        for _, _, data in traces:
            f.write(json.dumps(data, separators=(",", ":")) + "\n")
    names = collections.defaultdict(collections.Counter)
    keys = collections.defaultdict(set)
    for _, _, data in traces:
        for service, s in spans(data):
            names[service][s["name"]] += 1
            keys[(service, s["name"])].update(a["key"] for a in s.get("attributes", []))
    print(f"{len(uids)} pods, {len(traces)} traces with kubelet spans "
          f"({sum(tid in linked for _, tid, _ in traces)} linked from the apiserver's spans)", file=sys.stderr)
    for service in sorted(names):
        for name, n in names[service].most_common():
            print(f"  {service:10} {n:5} {name}: {', '.join(sorted(keys[(service, name)]))}", file=sys.stderr)


main()
