#!/usr/bin/env bash
# Healthy, on a control plane of two kube-apiservers sharing one etcd
# (runs/two-apiservers.up-args: the controller-manager and the admin write
# through the first, the scheduler and the kubelets through the second):
# the cluster's writes are split over two audit logs (audit.log.gz,
# audit-2.log.gz), each cascade crossing from one to the other at every
# binding and Pod status. Deployment ha-demo/web is created, scaled 2 → 4
# and rolled to a new image.
source "$(dirname "$0")/lib.sh"
NS=ha-demo
fresh_namespace "$NS"
k create deployment web -n "$NS" --image=nginx:1.27 --replicas=2
k rollout status deployment/web -n "$NS" --timeout=60s
say "scale to 4"
k scale deployment/web -n "$NS" --replicas=4
k rollout status deployment/web -n "$NS" --timeout=60s
say "set image nginx=nginx:1.28"
k set image deployment/web -n "$NS" nginx=nginx:1.28
k rollout status deployment/web -n "$NS" --timeout=90s
old_scaled_down() {
  [[ "$(k get replicasets -n "$NS" -l app=web -o jsonpath='{range .items[*]}{.spec.replicas}{"\n"}{end}' | sort | tr '\n' ' ')" == "0 4 " ]]
}
wait_until 60 "old ReplicaSet at 0, new at 4" old_scaled_down
