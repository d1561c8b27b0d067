#!/usr/bin/env bash
# docker-compose quickstart, service `cluster-setup`: waits for the
# apiserver, creates the 3 kwok nodes (e2e/kwok/nodes.yaml, the harness's
# file) and waits until they are Ready and the default ServiceAccount exists,
# as e2e/cluster.sh does.
set -euo pipefail
export KUBECONFIG=/pki/admin.kubeconfig
wait_for() {
  local what="$1" secs="$2"; shift 2
  local deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    if (( SECONDS >= deadline )); then echo "cluster-setup: timed out after ${secs}s waiting for $what" >&2; return 1; fi
    sleep 1
  done
  echo "cluster-setup: $what: ok"
}
wait_for "kube-apiserver /readyz" 180 kubectl get --raw /readyz
kubectl apply -f /e2e/kwok/nodes.yaml
wait_for "3 kwok nodes Ready" 120 kubectl wait --for=condition=Ready node --all --timeout=2s
wait_for "default ServiceAccount" 120 kubectl get serviceaccount default -n default
