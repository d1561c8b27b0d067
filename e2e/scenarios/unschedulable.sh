#!/usr/bin/env bash
# A Pod whose nodeSelector matches no node: the scheduler reports
# FailedScheduling (a Warning Event) and the Pod stays Pending.
source "$(dirname "$0")/lib.sh"
NS=sched-demo
fresh_namespace "$NS"
say "pod stuck with a nodeSelector no node has"
k apply -n "$NS" -f - <<'YAML'
apiVersion: v1
kind: Pod
metadata:
  name: stuck
spec:
  nodeSelector: {kascade.io/no-such-node: "true"}
  containers:
  - {name: app, image: nginx:1.27}
YAML
say "waiting for the scheduler's FailedScheduling event"
deadline=$((SECONDS + 60))
until k get events -n "$NS" --field-selector reason=FailedScheduling,involvedObject.name=stuck -o name 2>/dev/null | grep -q .; do
  (( SECONDS < deadline )) || { say "no FailedScheduling event after 60s"; exit 1; }
  sleep 0.5
done
say "done"
