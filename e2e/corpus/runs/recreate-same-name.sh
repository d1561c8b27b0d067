#!/usr/bin/env bash
# Healthy: Deployment shop/web is created and becomes Available, is deleted
# (its Pods gone), then created again under the same name with a new image
# and becomes Available again; ConfigMap shop/settings is deleted and
# created again beside it. One name, two lives each.
source "$(dirname "$0")/lib.sh"
NS=shop
fresh_namespace "$NS"
say "configmap settings and deployment web (2 replicas)"
k create configmap settings -n "$NS" --from-literal=mode=a
k create deployment web -n "$NS" --image=ghcr.io/example/shop-web:1.0.0 --replicas=2 --port=8080
k rollout status deployment/web -n "$NS" --timeout=60s
say "delete both, wait for the Pods to go"
k delete deployment web -n "$NS" --wait=true
k delete configmap settings -n "$NS"
pods_gone() { [[ -z "$(k get pods -n "$NS" -l app=web -o name)" ]]; }
wait_until 60 "web's Pods gone" pods_gone
say "create them again under the same names"
k create configmap settings -n "$NS" --from-literal=mode=b
k create deployment web -n "$NS" --image=ghcr.io/example/shop-web:2.0.0 --replicas=2 --port=8080
k rollout status deployment/web -n "$NS" --timeout=60s
k wait deployment/web -n "$NS" --for=condition=Available --timeout=30s
