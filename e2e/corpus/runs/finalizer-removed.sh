#!/usr/bin/env bash
# Healthy: a delete held by a finalizer that a second actor removes.
# Deployment orders/api carries finalizer example.com/drain; a "drainer"
# (service account orders/drainer) waits for its deletionTimestamp, then
# removes its finalizer; the delete completes and the garbage collector
# removes the ReplicaSet and Pods.
source "$(dirname "$0")/lib.sh"
NS=orders
fresh_namespace "$NS"
k apply -n "$NS" -f - <<'YAML'
apiVersion: apps/v1
kind: Deployment
metadata:
  name: api
  finalizers: [example.com/drain]
spec:
  replicas: 2
  selector:
    matchLabels: {app: api}
  template:
    metadata:
      labels: {app: api}
    spec:
      containers:
      - {name: api, image: "ghcr.io/example/orders-api:4.1.0"}
YAML
k rollout status deployment/api -n "$NS" --timeout=60s
k create serviceaccount drainer -n "$NS"
k create role finalizer-remover -n "$NS" --verb=get,list,watch,patch,update --resource=deployments
k create rolebinding drainer -n "$NS" --role=finalizer-remover --serviceaccount="$NS:drainer"
sa_kubeconfig "$NS" drainer "$CORPUS_WORK/drainer.kubeconfig"
drainer() {
  local kc=("$KUBECTL" --kubeconfig "$CORPUS_WORK/drainer.kubeconfig")
  "${kc[@]}" wait deployment/api -n "$NS" --for=jsonpath='{.metadata.deletionTimestamp}' --timeout=60s >/dev/null \
    || fail "drainer: deployment api never got a deletionTimestamp"
  say "drainer: api is being deleted; draining done, removing finalizer example.com/drain"
  "${kc[@]}" patch deployment api -n "$NS" --type=json -p '[{"op":"remove","path":"/metadata/finalizers"}]' \
    || fail "drainer: could not remove the finalizer"
}
together drainer drainer
say "delete deployment api"
k delete deployment api -n "$NS" --wait=false
join
k wait --for=delete deployment/api -n "$NS" --timeout=60s
k wait --for=delete pod -l app=api -n "$NS" --timeout=60s
