#!/usr/bin/env bash
# Image pull failure: Deployment api (2 replicas) names an image tag that does
# not exist. Its Pods are scheduled but stay Pending: the container waits in
# ErrImagePull / ImagePullBackOff (kwok's image-pull-error lifecycle, chosen
# by the template's annotation kascade.io/kubelet, stands in for the kubelet).
source "$(dirname "$0")/lib.sh"
NS=shop
fresh_namespace "$NS"
say "deployment api with image registry.example.com/shop/api:v2.1.0-rc (no such tag)"
k apply -n "$NS" -f - <<'YAML'
apiVersion: apps/v1
kind: Deployment
metadata:
  name: api
spec:
  replicas: 2
  selector:
    matchLabels: {app: api}
  template:
    metadata:
      labels: {app: api}
      annotations: {kascade.io/kubelet: image-pull-error}
    spec:
      containers:
      - {name: api, image: "registry.example.com/shop/api:v2.1.0-rc"}
YAML
pulls_backing_off() {
  k get pods -n "$NS" -l app=api -o jsonpath='{.items[*].status.containerStatuses[0].state.waiting.reason}' | grep -q ImagePullBackOff
}
wait_until 60 "ImagePullBackOff on a Pod of api" pulls_backing_off
wait_event 30 "$NS" BackOff Pod
