#!/usr/bin/env bash
# On the real node (e2e/node.sh): Pod ghost names an image no registry has.
# There is no registry here at all, so containerd's pull fails for real
# (kascade.local does not resolve): ErrImagePull, then ImagePullBackOff, the
# kubelet's Failed and BackOff Warning Events.
source "$(dirname "$0")/lib.sh"
real_node
NS=real-image
fresh_namespace "$NS"
k apply -n "$NS" -f - <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: ghost
spec:
  nodeSelector: {kascade.io/real-node: "true"}
  tolerations: [{key: kascade.io/real-node, operator: Exists}]
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: kascade.local/no-such-image:1.0
    imagePullPolicy: IfNotPresent
YAML
say "pod ghost with image kascade.local/no-such-image:1.0"
say "waiting for ImagePullBackOff"
k wait pod/ghost -n "$NS" --timeout=120s \
  --for=jsonpath='{.status.containerStatuses[0].state.waiting.reason}'=ImagePullBackOff
k get pod/ghost -n "$NS" -o jsonpath='{.status.containerStatuses[0].state.waiting.message}{"\n"}' >&2
say "done"
