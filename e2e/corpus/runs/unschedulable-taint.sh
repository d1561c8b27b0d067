#!/usr/bin/env bash
# Unschedulable by taint: an administrator reserves every node for GPU work
# (taint dedicated=gpu:NoSchedule); then Deployment web (2 replicas), which
# tolerates nothing, is created: its Pods stay Pending, the scheduler's
# FailedScheduling says the nodes had an untolerated taint.
source "$(dirname "$0")/lib.sh"
NS=taint-demo
fresh_namespace "$NS"
say "taint every node dedicated=gpu:NoSchedule"
k taint nodes --all dedicated=gpu:NoSchedule
say "deployment web (2 replicas, no toleration)"
k create deployment web -n "$NS" --image=nginx:1.27 --replicas=2
wait_event 60 "$NS" FailedScheduling Pod
[[ "$(k get pods -n "$NS" -l app=web -o jsonpath='{.items[*].status.phase}')" == "Pending Pending" ]] \
  || fail "web's 2 Pods are not both Pending"
