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
        else:
            sys.exit(f"unknown format {fmt!r}: eks-s3, eks-events or aks-storage")
