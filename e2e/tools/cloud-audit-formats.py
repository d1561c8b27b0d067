#!/usr/bin/env python3
"""Converts a kube-apiserver audit log (JSON lines, plain or .gz) into the
forms managed Kubernetes services export it in, following each provider's
documented schema, so that kascade's readers can be tested on them without
a cloud account:

  eks-s3       Amazon EKS control-plane logs exported from CloudWatch Logs
               to S3 (create-export-task): one line per log event,
               `<ISO 8601 time> <message>`, the message the audit event.
  eks-events   CloudWatch Logs events as read back (filter-log-events /
               get-log-events, one event per line): {"timestamp", "message",
               "ingestionTime", "logStreamName"}.
  aks-storage  Azure AKS diagnostic settings archived to a storage account
               (PT1H.json blobs, one record per line): {"time",
               "resourceId", "category": "kube-audit", "operationName",
               "properties": {"log": <the audit event as text>, "stream",
               "pod"}}.
  gke          Google GKE Cloud Audit Logs entries as a Logging sink writes
               them (one LogEntry per line): protoPayload (AuditLog) with
               serviceName k8s.io, methodName io.k8s.<group>.<version>.
               <resource>[.<subresource>].<verb>, resourceName <group>/
               <version>/[namespaces/<ns>/]<resource>/<name>[/<sub>],
               authenticationInfo, requestMetadata, request/response (with
               "@type"), status (a google.rpc.Code); operation.id the audit
               ID; one timestamp (the request's end).

Usage: cloud-audit-formats.py FORMAT IN OUT
"""
import datetime
import gzip
import json
import sys

fmt, src, dst = sys.argv[1], sys.argv[2], sys.argv[3]
opener = gzip.open if src.endswith(".gz") else open
RESOURCE = "/SUBSCRIPTIONS/00000000-0000-0000-0000-000000000000/RESOURCEGROUPS/CI/PROVIDERS/MICROSOFT.CONTAINERSERVICE/MANAGEDCLUSTERS/CI"


def millis(ts):
    t = datetime.datetime.strptime(ts.replace("Z", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z")
    return int(t.timestamp() * 1000)


# HTTP answer → google.rpc.Code, as Google's APIs map them.
GRPC = {400: 9, 401: 16, 403: 7, 404: 5, 409: 10, 422: 3, 429: 8, 500: 13, 503: 14, 504: 4}


def gke_entry(e):
    ref = e.get("objectRef") or {}
    group = ref.get("apiGroup") or "core"
    version = ref.get("apiVersion") or "v1"
    parts = [group, version]
    if ref.get("namespace") and not (ref.get("resource") == "namespaces" and not ref.get("apiGroup")):
        parts += ["namespaces", ref["namespace"]]
    parts += [ref.get("resource", "")]
    if ref.get("name"):
        parts += [ref["name"]]
    if ref.get("subresource"):
        parts += [ref["subresource"]]
    method = ".".join(["io.k8s", group, version, ref.get("resource", "")]
                      + ([ref["subresource"]] if ref.get("subresource") else []) + [e["verb"]])
    status = e.get("responseStatus") or {}
    code = status.get("code", 200)
    grpc = 0 if code < 300 else (6 if code == 409 and e["verb"] == "create" else GRPC.get(code, 2))
    payload = {
        "@type": "type.googleapis.com/google.cloud.audit.AuditLog",
        "serviceName": "k8s.io",
        "methodName": method,
        "resourceName": "/".join(parts),
        "authenticationInfo": {"principalEmail": e["user"]["username"]},
        "requestMetadata": {"callerIp": (e.get("sourceIPs") or [""])[0],
                            "callerSuppliedUserAgent": e.get("userAgent", "")},
        "status": {"code": grpc, **({"message": status["message"]} if status.get("message") else {})},
    }
    kind = lambda o: f"{ref.get('apiGroup') or 'core'}.k8s.io/{version}.{o.get('kind', '')}"
    for key, field in (("requestObject", "request"), ("responseObject", "response")):
        if isinstance(e.get(key), dict):
            payload[field] = {"@type": kind(e[key]), **e[key]}
    return {
        "protoPayload": payload,
        "insertId": e["auditID"][:16],
        "resource": {"type": "k8s_cluster", "labels": {"cluster_name": "ci", "location": "us-central1", "project_id": "ci"}},
        "timestamp": e["stageTimestamp"],
        "receiveTimestamp": e["stageTimestamp"],
        "severity": "NOTICE",
        "logName": "projects/ci/logs/cloudaudit.googleapis.com%2Factivity",
        "operation": {"id": e["auditID"], "producer": "k8s.io", "first": True, "last": True},
    }


with opener(src, "rt") as f, open(dst, "w") as out:
    for n, line in enumerate(f):
        line = line.rstrip("\n")
        if not line.strip():
            continue
        event = json.loads(line)
        stamp = event.get("stageTimestamp") or event.get("requestReceivedTimestamp")
        if fmt == "eks-s3":
            out.write(f"{stamp} {line}\n")
        elif fmt == "eks-events":
            out.write(json.dumps({
                "logStreamName": "kube-apiserver-audit-0123456789abcdef",
                "timestamp": millis(stamp),
                "message": line,
                "ingestionTime": millis(stamp) + 1500,
                "eventId": str(n),
            }) + "\n")
        elif fmt == "aks-storage":
            out.write(json.dumps({
                "time": stamp,
                "resourceId": RESOURCE,
                "category": "kube-audit",
                "operationName": "Microsoft.ContainerService/managedClusters/diagnosticLogs/Read",
                "properties": {"log": line, "stream": "stdout", "pod": "kube-apiserver-5d8f7c9b8-abcde"},
            }) + "\n")
        elif fmt == "gke":
            out.write(json.dumps(gke_entry(event)) + "\n")
        else:
            sys.exit(f"unknown format {fmt!r}: eks-s3, eks-events, aks-storage or gke")
