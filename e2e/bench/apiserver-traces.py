#!/usr/bin/env python3
"""Stores kube-apiserver request traces for the writes of an audit log in a
raw Jaeger, as an apiserver tracing every request would have exported them
through `kascade collect --component-traces-listen` (which forwards them
unchanged but for the resource's k8s.cluster.name).

The traces are derived from the captured ones of two whole-cluster runs
(e2e/corpus/traced-healthy and e2e/corpus/slow-webhook: real kube-apiserver
traces, OTLP/JSON, one request a line), reused cyclically: each write
(create, update, patch, delete) gets a captured trace of a write of its verb
and resource (and subresource when one was captured), with a fresh trace id
and fresh span ids (parent links kept), the write's audit ID on every
`audit-id` tag and its times moved to the write's. Posted as OTLP/JSON to
OTLP_HTTP_URL/v1/traces, 50 traces a request.

  apiserver-traces.py AUDIT_LOG OTLP_HTTP_URL CLUSTER
Prints "TRACES SPANS LAST_AUDIT_ID".
"""
import copy
import datetime
import gzip
import itertools
import json
import os
import secrets
import sys
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CAPTURED = ["e2e/corpus/traced-healthy/apiserver-traces.jsonl.gz",
            "e2e/corpus/slow-webhook/apiserver-traces.jsonl.gz"]
METHODS = {"create": ["POST"], "update": ["PUT"], "patch": ["PATCH", "APPLY"], "delete": ["DELETE"]}


def spans_of(trace):
    for rs in trace["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            yield from ss["spans"]


def tags(span):
    return {a["key"]: a["value"].get("stringValue") for a in span.get("attributes", [])}


def kind(trace):
    for s in spans_of(trace):
        t = tags(s)
        if "verb" in t:
            return t["verb"], t.get("resource") or "", t.get("subresource") or ""
    return None


def ns(rfc3339):
    t = datetime.datetime.fromisoformat(rfc3339.replace("Z", "+00:00"))
    return int(t.timestamp()) * 10**9 + t.microsecond * 1000


def main():
    log, url, cluster = sys.argv[1], sys.argv[2].rstrip("/"), sys.argv[3]
    captured = []
    for f in CAPTURED:
        with gzip.open(os.path.join(ROOT, f), "rt") as lines:
            captured += [json.loads(l) for l in lines if l.strip()]
    kinds = [kind(t) for t in captured]
    cycles = {}

    def trace_for(verb, resource, sub):
        key = (verb, resource, sub)
        if key not in cycles:
            exact = [t for t, k in zip(captured, kinds)
                     if k and k[0] in METHODS[verb] and k[1] == resource and k[2] == sub]
            loose = [t for t, k in zip(captured, kinds)
                     if k and k[0] in METHODS[verb] and k[1] == resource]
            cycles[key] = itertools.cycle(exact or loose or captured)
        return next(cycles[key])

    traces, n_spans, last = [], 0, ""
    for line in open(log):
        if not line.strip():
            continue
        ev = json.loads(line)
        if ev.get("verb") not in METHODS or ev.get("stage", "ResponseComplete") != "ResponseComplete":
            continue
        ref = ev.get("objectRef", {})
        t = copy.deepcopy(trace_for(ev["verb"], ref.get("resource", ""), ref.get("subresource", "")))
        spans = list(spans_of(t))
        shift = ns(ev.get("requestReceivedTimestamp") or ev["stageTimestamp"]) - min(int(s["startTimeUnixNano"]) for s in spans)
        trace_id, ids = secrets.token_hex(16), {}
        new_id = lambda old: ids.setdefault(old, secrets.token_hex(8))
        for s in spans:
            s["traceId"] = trace_id
            s["spanId"] = new_id(s["spanId"])
            if s.get("parentSpanId"):
                s["parentSpanId"] = new_id(s["parentSpanId"])
            for key in ("startTimeUnixNano", "endTimeUnixNano"):
                s[key] = str(int(s[key]) + shift)
            for e in s.get("events", []):
                e["timeUnixNano"] = str(int(e["timeUnixNano"]) + shift)
            for a in s.get("attributes", []):
                if a["key"] == "audit-id":
                    a["value"] = {"stringValue": ev["auditID"]}
        for rs in t["resourceSpans"]:
            attrs = rs.setdefault("resource", {}).setdefault("attributes", [])
            if not any(a["key"] == "k8s.cluster.name" for a in attrs):
                attrs.append({"key": "k8s.cluster.name", "value": {"stringValue": cluster}})
        traces.append(t)
        n_spans += len(spans)
        last = ev["auditID"]
    for i in range(0, len(traces), 50):
        body = json.dumps({"resourceSpans": [rs for t in traces[i:i + 50] for rs in t["resourceSpans"]]})
        req = urllib.request.Request(url + "/v1/traces", body.encode(),
                                     {"Content-Type": "application/json"})
        urllib.request.urlopen(req, timeout=60).read()
    print(len(traces), n_spans, last)


main()
