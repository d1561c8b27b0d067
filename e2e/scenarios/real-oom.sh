#!/usr/bin/env bash
# On the real node (e2e/node.sh): Pod hog has a 16Mi memory limit and a
# container that allocates without end (busybox tail on /dev/zero waits for a
# newline that never comes). The kernel's OOM killer ends it in its memory
# cgroup; restartPolicy Never, so the Pod fails with the container terminated,
# reason OOMKilled, exit code 137.
source "$(dirname "$0")/lib.sh"
real_node
NS=real-oom
fresh_namespace "$NS"
k apply -n "$NS" -f - <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: hog
spec:
  nodeSelector: {kascade.io/real-node: "true"}
  tolerations: [{key: kascade.io/real-node, operator: Exists}]
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
  restartPolicy: Never
  containers:
  - name: app
    image: $BUSYBOX_IMAGE
    imagePullPolicy: IfNotPresent
    command: [sh, -c, 'echo "allocating past the 16Mi limit"; tail /dev/zero']
    resources:
      limits: {memory: 16Mi}
YAML
say "pod hog: 16Mi limit, allocating without end"
say "waiting for the container to be OOMKilled"
k wait pod/hog -n "$NS" --timeout=120s \
  --for=jsonpath='{.status.containerStatuses[0].state.terminated.reason}'=OOMKilled
k wait pod/hog -n "$NS" --timeout=60s --for=jsonpath='{.status.phase}'=Failed
k get pod/hog -n "$NS" -o jsonpath='{.status.phase} {.status.containerStatuses[0].state.terminated}{"\n"}' >&2
say "done"
