#!/usr/bin/env bash
# Changes stamped by kascade cpid-webhook (e2e/suite.sh registers it for
# namespaces labeled kascade.io/cpid-webhook=enabled): a Deployment created
# and its image changed with plain kubectl, no CPID given. Each change gets
# its own CPID; kubectl prints it as a warning.
source "$(dirname "$0")/lib.sh"
NS=cpidhook-demo
fresh_namespace "$NS"
k label namespace "$NS" kascade.io/cpid-webhook=enabled >/dev/null
# The webhook answers within the apiserver's timeout; a create it missed
# (failurePolicy Ignore) would carry no CPID: wait until one is stamped.
deadline=$((SECONDS + 30))
until k create configmap probe -n "$NS" --from-literal=a=b -o jsonpath='{.metadata.annotations.kascade\.io/cpid}' 2>/dev/null | grep -q .; do
  k delete configmap probe -n "$NS" --ignore-not-found >/dev/null
  (( SECONDS < deadline )) || { say "the CPID webhook never stamped a write"; exit 1; }
  sleep 0.5
done
k create deployment web -n "$NS" --image=nginx:1.27 --replicas=1 2>"$KASCADE_E2E_RUN_DIR/cpid-webhook-create.err" >/dev/null
say "created: $(cat "$KASCADE_E2E_RUN_DIR/cpid-webhook-create.err")"
k rollout status deployment/web -n "$NS" --timeout=60s
k set image deployment/web -n "$NS" nginx=nginx:1.28 2>"$KASCADE_E2E_RUN_DIR/cpid-webhook-set-image.err" >/dev/null
say "image changed: $(cat "$KASCADE_E2E_RUN_DIR/cpid-webhook-set-image.err")"
k rollout status deployment/web -n "$NS" --timeout=60s
say "done"
