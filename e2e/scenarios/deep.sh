#!/usr/bin/env bash
# Values nested as deep as the apiserver accepts (Go's decoder allows 10,000
# levels), written as any user allowed to annotate an object or to write a
# custom resource can: a ConfigMap annotated with a copy of an object nested
# 10,000 levels (a string to the apiserver, JSON to whoever reads the copy),
# and a custom resource nested to the apiserver's limit. The collector must
# stay up and show both writes, the part too deep to read as a marker.
source "$(dirname "$0")/lib.sh"
NS=deep-demo
DEPTH=10000
fresh_namespace "$NS"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT

say "configmap deep-cm annotated with a copy nested $DEPTH levels"
k create configmap deep-cm -n "$NS" --from-literal=mode=plain >/dev/null
copy="$(python3 -c "D=$DEPTH; print('{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"data\":' + '['*D + ']'*D + '}')")"
k annotate configmap deep-cm -n "$NS" "example.com/copy=$copy" >/dev/null

say "custom resource deepthings/deep whose spec nests 9,000 levels"
k apply -f - >/dev/null <<'YAML'
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: deepthings.e2e.kascade.io
spec:
  group: e2e.kascade.io
  scope: Namespaced
  names: {plural: deepthings, singular: deepthing, kind: DeepThing}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, x-kubernetes-preserve-unknown-fields: true}
YAML
k wait --for condition=Established crd/deepthings.e2e.kascade.io --timeout=60s >/dev/null
python3 - "$NS" >"$tmp/deep.json" <<'PY'
import sys
# 9,000 levels: the apiserver stores up to ~9,990 under spec.tree (9,997 it
# refuses, "exceeded max depth"), but from ~9,990 it can no longer list the
# resource (its watch cache fails to decode it) nor delete the namespace.
ns, depth = sys.argv[1], 9000
head = '{"apiVersion":"e2e.kascade.io/v1","kind":"DeepThing","metadata":{"name":"deep","namespace":"%s"},"spec":{"tree":' % ns
print(head + '{"a":' * depth + '1' + '}' * depth + '}}')
PY
# Posted as it is: kubectl would parse the object itself first.
k create --raw "/apis/e2e.kascade.io/v1/namespaces/$NS/deepthings" -f "$tmp/deep.json" >/dev/null
say "both written"
