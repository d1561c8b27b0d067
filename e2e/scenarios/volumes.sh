#!/usr/bin/env bash
# A StatefulSet with a volumeClaimTemplate: its claims bind to the harness's
# pre-created PersistentVolumes (default StorageClass, e2e/cluster.sh) through
# the real PV binder, so every Pod gets past scheduling and runs.
source "$(dirname "$0")/lib.sh"
NS=vol-demo
fresh_namespace "$NS"
k apply -n "$NS" -f - <<'YAML'
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: data
spec:
  serviceName: data
  replicas: 3
  selector:
    matchLabels: {app: data}
  template:
    metadata:
      labels: {app: data}
    spec:
      containers:
      - name: redis
        image: redis:7
        volumeMounts: [{name: data, mountPath: /data}]
  volumeClaimTemplates:
  - metadata: {name: data}
    spec:
      accessModes: [ReadWriteOnce]
      resources: {requests: {storage: 1Gi}}
YAML
say "statefulset data: 3 replicas, one claim each"
k rollout status statefulset/data -n "$NS" --timeout=90s
for i in 0 1 2; do
  k wait pod/data-$i -n "$NS" --for=jsonpath='{.status.phase}'=Running --timeout=30s >/dev/null
  k wait pvc/data-data-$i -n "$NS" --for=jsonpath='{.status.phase}'=Bound --timeout=30s >/dev/null
done
say "3 Pods Running, 3 claims Bound"
say "done"
