#!/usr/bin/env bash
# Healthy: Deployment real-healthy/web, 2 Pods that run and become Ready on a real kubelet.
# On one real node (e2e/node.sh: a kubelet with containerd and runc) beside
# the kwok nodes: e2e/scenarios/real-healthy.sh. capture.sh's teardown
# (cluster.sh down) stops the node first.
source "$(dirname "$0")/lib.sh"
say "a real node"
"$E2E_DIR/node.sh" up --name "$CLUSTER_NAME" --port-base "$CORPUS_PORT_BASE" --tracing-endpoint none >&2 \
  || fail "the real node did not come up (e2e/node.sh up)"
scenario real-healthy
