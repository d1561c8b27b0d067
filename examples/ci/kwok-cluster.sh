#!/usr/bin/env bash
# The same with kwok (no kubelets, no containers: fake nodes that run Pods
# by stages): kwokctl starts a control plane with the audit policy, and
# hands the log back with `kwokctl logs audit`.
#   examples/ci/kwok-cluster.sh up     create the cluster "ci" with auditing on
#   examples/ci/kwok-cluster.sh explain  write audit.log, events.json and the reports
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
case "${1:-}" in
  up)
    kwokctl create cluster --name ci --kube-audit-policy "$HERE/audit-policy.yaml"
    kwokctl scale node --name ci --replicas 2
    ;;
  explain)
    kwokctl logs audit --name ci > audit.log
    kubectl --context kwok-ci get events -A -o json > events.json
    kascade explain audit.log --events events.json \
      --output markdown=kascade-summary.md --output html=kascade-report.html
    ;;
  *) echo "usage: $0 up|explain" >&2; exit 2 ;;
esac
