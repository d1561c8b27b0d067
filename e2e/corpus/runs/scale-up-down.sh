#!/usr/bin/env bash
# Healthy: scale up, then down. Deployment batch/worker runs 2 replicas, is
# scaled to 6 (all Ready), then to 1.
source "$(dirname "$0")/lib.sh"
NS="batch"
fresh_namespace "$NS"
k create deployment worker -n "$NS" --image=ghcr.io/example/worker:0.9.4 --replicas=2
k rollout status deployment/worker -n "$NS" --timeout=60s
say "scale to 6"
k scale deployment/worker -n "$NS" --replicas=6
k rollout status deployment/worker -n "$NS" --timeout=60s
k wait --for=jsonpath='{.status.readyReplicas}'=6 deployment/worker -n "$NS" --timeout=60s
say "scale to 1"
k scale deployment/worker -n "$NS" --replicas=1
k rollout status deployment/worker -n "$NS" --timeout=60s
k wait --for=jsonpath='{.status.replicas}'=1 deployment/worker -n "$NS" --timeout=60s
one_pod() { [[ "$(k get pods -n "$NS" -l app=worker -o name | wc -l)" == 1 ]]; }
wait_until 60 "1 worker Pod left" one_pod
