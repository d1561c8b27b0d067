#!/usr/bin/env bash
# A Deployment denied by a ResourceQuota: the namespace allows one Pod, the
# Deployment asks for 3. The ReplicaSet controller's Pod creates (generateName)
# beyond the first are refused with 403 "exceeded quota", and it reports
# FailedCreate Warning Events on the ReplicaSet.
source "$(dirname "$0")/lib.sh"
NS=quota-demo
fresh_namespace "$NS"
k apply -n "$NS" -f - <<'YAML'
apiVersion: v1
kind: ResourceQuota
metadata:
  name: pods
spec:
  hard: {pods: "1"}
YAML
# Quota admission refuses every Pod until the quota controller has filled in
# the quota's status.
k wait resourcequota/pods -n "$NS" --for=jsonpath='{.status.hard.pods}'=1 --timeout=60s
say "deployment capped with 3 replicas under a quota of 1 pod"
k create deployment capped -n "$NS" --image=nginx:1.27 --replicas=3
say "waiting for the ReplicaSet controller's FailedCreate events"
deadline=$((SECONDS + 60))
until k get events -n "$NS" --field-selector reason=FailedCreate,involvedObject.kind=ReplicaSet -o name 2>/dev/null | grep -q .; do
  (( SECONDS < deadline )) || { say "no FailedCreate event after 60s"; exit 1; }
  sleep 0.5
done
k wait --for=jsonpath='{.status.readyReplicas}'=1 deployment/capped -n "$NS" --timeout=60s
say "done"
