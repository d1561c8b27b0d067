#!/usr/bin/env bash
# A rollout exceeding its progress deadline: Deployment checkout (2 replicas,
# progressDeadlineSeconds 30) runs v1; then its image is changed to a tag that
# does not exist (a kubectl patch of the template; the patch also sets the
# annotation kascade.io/kubelet: image-pull-error that makes kwok play the
# kubelet failing the pull). The new ReplicaSet's Pod stays in
# ErrImagePull/ImagePullBackOff, the old Pods keep serving, and the Deployment
# reports ProgressDeadlineExceeded.
source "$(dirname "$0")/lib.sh"
NS=checkout
fresh_namespace "$NS"
k apply -n "$NS" -f - <<'YAML'
apiVersion: apps/v1
kind: Deployment
metadata:
  name: checkout
spec:
  replicas: 2
  progressDeadlineSeconds: 30
  selector:
    matchLabels: {app: checkout}
  template:
    metadata:
      labels: {app: checkout}
    spec:
      containers:
      - {name: checkout, image: "registry.example.com/shop/checkout:1.8.0"}
YAML
k rollout status deployment/checkout -n "$NS" --timeout=60s
say "update checkout to image registry.example.com/shop/checkout:1.9.0-typo (no such tag)"
k patch deployment checkout -n "$NS" --type=strategic -p '{"spec":{"template":{
  "metadata":{"annotations":{"kascade.io/kubelet":"image-pull-error"}},
  "spec":{"containers":[{"name":"checkout","image":"registry.example.com/shop/checkout:1.9.0-typo"}]}}}}'
k wait deployment/checkout -n "$NS" --timeout=90s \
  --for=jsonpath='{.status.conditions[?(@.type=="Progressing")].reason}'=ProgressDeadlineExceeded
[[ "$(k get deployment checkout -n "$NS" -o jsonpath='{.status.readyReplicas}')" == 2 ]] || fail "the old Pods do not serve any more"
