#!/usr/bin/env bash
# Unschedulable by nodeSelector (e2e/scenarios/unschedulable.sh: Pod
# sched-demo/stuck selects a label no node has), while the healthy
# Deployment rollout of e2e/scenarios/deployment.sh runs in namespace default.
source "$(dirname "$0")/lib.sh"
together unschedulable scenario unschedulable
together deployment scenario deployment
join
[[ "$(k get pod stuck -n sched-demo -o jsonpath='{.status.phase}')" == Pending ]] || fail "pod stuck is not Pending"
