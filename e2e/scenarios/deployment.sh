#!/usr/bin/env bash
# Deployment rollout: create hello (3) → Ready → scale to 5 → new image (second
# ReplicaSet) → scale to 2 → delete. Namespace: default.
source "$(dirname "$0")/lib.sh"
NS=default
k delete deployment hello -n "$NS" --ignore-not-found --wait >/dev/null
say "create deployment hello with 3 replicas"
k create deployment hello -n "$NS" --image=nginx:1.27 --replicas=3
k rollout status deployment/hello -n "$NS" --timeout=60s
say "scale to 5"
k scale deployment/hello -n "$NS" --replicas=5
k rollout status deployment/hello -n "$NS" --timeout=60s
say "change image: a new ReplicaSet takes over"
k set image deployment/hello -n "$NS" nginx=nginx:1.28
k rollout status deployment/hello -n "$NS" --timeout=90s
say "scale to 2"
k scale deployment/hello -n "$NS" --replicas=2
k rollout status deployment/hello -n "$NS" --timeout=60s
k wait --for=jsonpath='{.status.replicas}'=2 deployment/hello -n "$NS" --timeout=60s
say "delete"
k delete deployment hello -n "$NS" --wait
k wait --for=delete pod -l app=hello -n "$NS" --timeout=60s
say "done"
