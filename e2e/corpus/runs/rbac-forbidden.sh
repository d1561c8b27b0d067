#!/usr/bin/env bash
# RBAC: the ClusterRoleBinding system:controller:replicaset-controller (which
# lets the ReplicaSet controller's service account create Pods) is deleted;
# then Deployment web is created. The Deployment controller creates its
# ReplicaSet, but the ReplicaSet controller's Pod creates (and its status
# updates and Events) get 403 Forbidden: no Pod ever. Meanwhile the healthy
# Job of e2e/scenarios/job.sh (namespace job-demo) completes: the Job
# controller has its own binding.
source "$(dirname "$0")/lib.sh"
NS=rbac-demo
CRB=system:controller:replicaset-controller
k get clusterrolebinding "$CRB" >/dev/null || fail "no ClusterRoleBinding $CRB to delete"
say "delete ClusterRoleBinding $CRB"
k delete clusterrolebinding "$CRB"
fresh_namespace "$NS"
create_web() {
  say "deployment web (2 replicas)"
  k create deployment web -n "$NS" --image=nginx:1.27 --replicas=2
  wait_until 60 "403 on a Pod create of the ReplicaSet controller in $NS" audit_has \
    "ev['verb'] == 'create' and ref(ev).get('resource') == 'pods' and ref(ev).get('namespace') == '$NS' and code(ev) == 403 and ev['user']['username'] == 'system:serviceaccount:kube-system:replicaset-controller'"
}
together web create_web
together job scenario job
join
[[ -z "$(k get pods -n "$NS" -o name)" ]] || fail "namespace $NS has Pods"
