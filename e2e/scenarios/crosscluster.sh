#!/usr/bin/env bash
# Run against a second cluster (KASCADE_E2E_ENV=e2e/.run-NAME/env): a Pod
# whose labels change (with the Metadata-level pods audit policy its diff can
# only come from the list-watch), and a ConfigMap annotated with a kascade.io/link
# to the Deployment `hello` of cluster $LINK_CLUSTER (default e2e).
source "$(dirname "$0")/lib.sh"
NS=remote-demo
LINK_CLUSTER="${LINK_CLUSTER:-e2e}"
fresh_namespace "$NS"
say "pod relabeled"
k run labeled -n "$NS" --image=nginx:1.27 --labels=stage=one >/dev/null
k wait -n "$NS" --for=condition=Ready pod/labeled --timeout=60s >/dev/null
k label -n "$NS" pod/labeled stage=two --overwrite >/dev/null
say "configmap linked to deployments/default/hello in cluster $LINK_CLUSTER"
k create configmap linked -n "$NS" --from-literal=owner=elsewhere --dry-run=client -o yaml \
  | k annotate --local -f - -o yaml \
      "kascade.io/link={\"cluster\":\"$LINK_CLUSTER\",\"group\":\"apps\",\"resource\":\"deployments\",\"namespace\":\"default\",\"name\":\"hello\",\"role\":\"parent\"}" \
  | k apply -f - >/dev/null
say "done"
