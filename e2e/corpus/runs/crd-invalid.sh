#!/usr/bin/env bash
# A custom resource refused by its CRD's validation: CRD databases.example.com
# requires spec.engine (postgres or mysql) and 1 <= spec.replicas <= 5;
# Database orders-db says engine postgress and replicas 0: 422 Invalid value.
# The run expects the failure.
source "$(dirname "$0")/lib.sh"
NS=crd-invalid-demo
k apply -f - <<'YAML'
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: databases.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: databases, singular: database, kind: Database}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [engine]
            properties:
              engine: {type: string, enum: [postgres, mysql]}
              replicas: {type: integer, minimum: 1, maximum: 5}
              storage: {type: string}
YAML
k wait --for=condition=Established crd/databases.example.com --timeout=60s
fresh_namespace "$NS"
# Discovery may lag the CRD's Established condition a moment.
wait_until 30 "databases.example.com served" k get databases -n "$NS"
say "create database orders-db with engine postgress and replicas 0"
if k apply -n "$NS" -f - 2>"$CORPUS_WORK/apply.err" <<'YAML'
apiVersion: example.com/v1
kind: Database
metadata:
  name: orders-db
spec:
  engine: postgress
  replicas: 0
  storage: 20Gi
YAML
then fail "the create of database orders-db succeeded"; fi
grep -q "Invalid value" "$CORPUS_WORK/apply.err" || fail "the create failed otherwise: $(cat "$CORPUS_WORK/apply.err")"
say "refused as expected: $(cat "$CORPUS_WORK/apply.err")"
