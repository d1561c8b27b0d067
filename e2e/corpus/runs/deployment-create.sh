#!/usr/bin/env bash
# Healthy: Deployment store/api (3 replicas) is created and becomes Available.
source "$(dirname "$0")/lib.sh"
NS=store
fresh_namespace "$NS"
say "deployment api (3 replicas)"
k create deployment api -n "$NS" --image=ghcr.io/example/store-api:2.3.1 --replicas=3 --port=8080
k rollout status deployment/api -n "$NS" --timeout=60s
k wait deployment/api -n "$NS" --for=condition=Available --timeout=30s
