#!/usr/bin/env bash
# A PersistentVolumeClaim of a StorageClass that does not exist stays
# Pending (the PV controller's ProvisioningFailed), and the Pod that mounts
# it cannot be scheduled.
source "$(dirname "$0")/lib.sh"
NS=pvc-demo
fresh_namespace "$NS"
k apply -n "$NS" -f - <<'YAML'
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: data
spec:
  storageClassName: no-such-class
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
---
apiVersion: v1
kind: Pod
metadata:
  name: db
spec:
  containers:
  - name: db
    image: postgres:17
    volumeMounts: [{name: data, mountPath: /var/lib/postgresql/data}]
  volumes:
  - name: data
    persistentVolumeClaim: {claimName: data}
YAML
say "claim data (storage class no-such-class) and pod db mounting it"
wait_event() { # reason, involved kind
  local deadline=$((SECONDS + 60))
  until k get events -n "$NS" --field-selector "reason=$1,involvedObject.kind=$2" -o name 2>/dev/null | grep -q .; do
    (( SECONDS < deadline )) || { say "no $1 event on a $2 after 60s"; exit 1; }
    sleep 0.5
  done
}
say "waiting for the PV controller's ProvisioningFailed and the scheduler's FailedScheduling"
wait_event ProvisioningFailed PersistentVolumeClaim
wait_event FailedScheduling Pod
[[ "$(k get pvc data -n "$NS" -o jsonpath='{.status.phase}')" == Pending ]] || { say "claim data is not Pending"; exit 1; }
say "done"
