#!/usr/bin/env bash
# Two controllers fighting over one field: Deployment web in fight-demo; an
# "autoscaler" (service account fight-demo/autoscaler, field manager
# autoscaler) keeps its replicas at 5, a GitOps "sync" (service account
# fight-demo/gitops-sync, field manager gitops-sync) at 3, the value in git.
# Each is a control loop polling every second and writing when the field
# differs; they fight for 30 s, the ReplicaSet scaling up and down each time.
source "$(dirname "$0")/lib.sh"
NS=fight-demo
fresh_namespace "$NS"
k create deployment web -n "$NS" --image=nginx:1.27 --replicas=3
k rollout status deployment/web -n "$NS" --timeout=60s
k create role replica-writer -n "$NS" --verb=get,list,watch,patch --resource=deployments
for sa in autoscaler gitops-sync; do
  k create serviceaccount "$sa" -n "$NS"
  k create rolebinding "$sa" -n "$NS" --role=replica-writer --serviceaccount="$NS:$sa"
  sa_kubeconfig "$NS" "$sa" "$CORPUS_WORK/$sa.kubeconfig"
done
# controller NAME REPLICAS SECONDS: the control loop (its period is the
# poll; no wait for anything).
controller() {
  local name="$1" want="$2" end=$((SECONDS + $3)) have writes=0
  while (( SECONDS < end )); do
    have="$("$KUBECTL" --kubeconfig "$CORPUS_WORK/$name.kubeconfig" get deployment web -n "$NS" -o jsonpath='{.spec.replicas}')"
    if [[ "$have" != "$want" ]]; then
      "$KUBECTL" --kubeconfig "$CORPUS_WORK/$name.kubeconfig" patch deployment web -n "$NS" --type=merge \
        --field-manager="$name" -p "{\"spec\":{\"replicas\":$want}}" >/dev/null
      writes=$((writes + 1))
    fi
    sleep 1
  done
  say "$name: $writes writes of replicas=$want"
  (( writes >= 5 )) || fail "$name wrote only $writes times: no fight"
}
say "autoscaler (replicas 5) and gitops-sync (replicas 3) for 30 s"
together autoscaler controller autoscaler 5 30
together gitops-sync controller gitops-sync 3 30
join
