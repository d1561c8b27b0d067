#!/usr/bin/env bash
# An update of an immutable field: Deployment api is applied with selector
# app=api and runs; then its manifest is re-applied with the labels renamed
# to app.kubernetes.io/name=api, selector included: 422, spec.selector: field
# is immutable. The old Deployment keeps running. The run expects the failure.
source "$(dirname "$0")/lib.sh"
NS=immutable-demo
fresh_namespace "$NS"
manifest() { # LABEL_KEY
  cat <<YAML
apiVersion: apps/v1
kind: Deployment
metadata:
  name: api
spec:
  replicas: 2
  selector:
    matchLabels: {$1: api}
  template:
    metadata:
      labels: {$1: api}
    spec:
      containers:
      - {name: api, image: "ghcr.io/example/api:1.4.2"}
YAML
}
manifest app | k apply -n "$NS" -f -
k rollout status deployment/api -n "$NS" --timeout=60s
say "re-apply with the selector's label renamed"
if manifest app.kubernetes.io/name | k apply -n "$NS" -f - 2>"$CORPUS_WORK/apply.err"; then
  fail "the selector change was accepted"
fi
grep -q "field is immutable" "$CORPUS_WORK/apply.err" || fail "the apply failed otherwise: $(cat "$CORPUS_WORK/apply.err")"
say "refused as expected: $(cat "$CORPUS_WORK/apply.err")"
