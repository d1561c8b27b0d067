#!/usr/bin/env bash
# Healthy: a rolling update. Deployment catalog/catalog (3 replicas) runs
# nginx:1.27; kubectl set image moves it to nginx:1.28: a second ReplicaSet
# takes over, the first is scaled to 0.
source "$(dirname "$0")/lib.sh"
NS=catalog
fresh_namespace "$NS"
k create deployment catalog -n "$NS" --image=nginx:1.27 --replicas=3
k rollout status deployment/catalog -n "$NS" --timeout=60s
say "set image nginx=nginx:1.28"
k set image deployment/catalog -n "$NS" nginx=nginx:1.28
k rollout status deployment/catalog -n "$NS" --timeout=90s
old_scaled_down() {
  [[ "$(k get replicasets -n "$NS" -l app=catalog -o jsonpath='{range .items[*]}{.spec.replicas}{"\n"}{end}' | sort | tr '\n' ' ')" == "0 3 " ]]
}
wait_until 60 "old ReplicaSet at 0, new at 3" old_scaled_down
