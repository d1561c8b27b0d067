#!/usr/bin/env bash
# A namespace stuck terminating: CRD backups.example.com (an operator's, but
# the operator is not running) and, in namespace team-a, Backup nightly with
# the operator's finalizer backup.example.com/cleanup, beside Deployment app.
# Namespace team-a is deleted: the namespace controller deletes app and
# everything else, but nightly keeps its finalizer, so the namespace stays
# Terminating (condition NamespaceFinalizersRemaining).
source "$(dirname "$0")/lib.sh"
NS=team-a
k apply -f - <<'YAML'
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: backups.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: backups, singular: backup, kind: Backup}
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
            properties:
              schedule: {type: string}
              target: {type: string}
YAML
k wait --for=condition=Established crd/backups.example.com --timeout=60s
fresh_namespace "$NS"
k create deployment app -n "$NS" --image=nginx:1.27 --replicas=2
k apply -n "$NS" -f - <<'YAML'
apiVersion: example.com/v1
kind: Backup
metadata:
  name: nightly
  finalizers: [backup.example.com/cleanup]
spec:
  schedule: "0 2 * * *"
  target: deployment/app
YAML
k rollout status deployment/app -n "$NS" --timeout=60s
say "delete namespace $NS"
k delete namespace "$NS" --wait=false
finalizers_remaining() {
  [[ "$(k get namespace "$NS" -o jsonpath='{.status.conditions[?(@.type=="NamespaceFinalizersRemaining")].status}')" == True ]]
}
wait_until 90 "condition NamespaceFinalizersRemaining on namespace $NS" finalizers_remaining
[[ "$(k get namespace "$NS" -o jsonpath='{.status.phase}')" == Terminating ]] || fail "namespace $NS is not Terminating"
wait_until 60 "Deployment app gone from $NS" bash -c "! '$KUBECTL' get deployment app -n '$NS' >/dev/null 2>&1"
