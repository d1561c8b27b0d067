#!/usr/bin/env bash
# On the real node (e2e/node.sh): Deployment crasher's container prints a line
# and exits 1 a second later, every time. The kubelet restarts it with a
# growing back-off: BackOff Warning Events, the container's waiting reason
# CrashLoopBackOff, its lastState terminated with exit code 1 (reason Error).
source "$(dirname "$0")/lib.sh"
real_node
NS=real-crash
fresh_namespace "$NS"
k apply -n "$NS" -f - <<YAML
apiVersion: apps/v1
kind: Deployment
metadata:
  name: crasher
spec:
  replicas: 1
  selector:
    matchLabels: {app: crasher}
  template:
    metadata:
      labels: {app: crasher}
    spec:
      nodeSelector: {kascade.io/real-node: "true"}
      tolerations: [{key: kascade.io/real-node, operator: Exists}]
      automountServiceAccountToken: false
      terminationGracePeriodSeconds: 1
      containers:
      - name: app
        image: $BUSYBOX_IMAGE
        imagePullPolicy: IfNotPresent
        command: [sh, -c, 'echo "starting, then failing"; sleep 1; exit 1']
YAML
say "deployment crasher: a container that exits 1 after a second"
say "waiting for CrashLoopBackOff after at least 2 restarts"
k wait pod -n "$NS" -l app=crasher --timeout=120s \
  --for=jsonpath='{.status.containerStatuses[0].state.waiting.reason}'=CrashLoopBackOff
deadline=$((SECONDS + 90))
until [[ "$(k get pod -n "$NS" -l app=crasher -o jsonpath='{.items[0].status.containerStatuses[0].restartCount}')" -ge 2 ]]; do
  (( SECONDS < deadline )) || { say "fewer than 2 restarts after 90s"; exit 1; }
  sleep 1
done
k get pod -n "$NS" -l app=crasher -o jsonpath='{.items[0].status.containerStatuses[0].lastState.terminated}{"\n"}' >&2
say "done"
