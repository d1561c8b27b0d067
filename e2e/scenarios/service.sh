#!/usr/bin/env bash
# Service + Deployment: the EndpointSlice follows the pods as they come and go.
source "$(dirname "$0")/lib.sh"
NS=svc-demo
fresh_namespace "$NS"
ready_endpoints() {
  k get endpointslices -n "$NS" -l kubernetes.io/service-name=web \
    -o jsonpath='{range .items[*].endpoints[?(@.conditions.ready==true)]}{.addresses[0]}{"\n"}{end}' | grep -c . || true
}
say "deployment web (2) and service web"
k create deployment web -n "$NS" --image=nginx:1.27 --replicas=2 --port=80
k expose deployment web -n "$NS" --port=80 --target-port=80
k rollout status deployment/web -n "$NS" --timeout=60s
k wait --for=jsonpath='{.metadata.name}' endpointslice -l kubernetes.io/service-name=web -n "$NS" --timeout=30s >/dev/null 2>&1 || true
deadline=$((SECONDS + 60)); until [[ "$(ready_endpoints)" == 2 ]]; do (( SECONDS < deadline )) || { say "EndpointSlice never had 2 ready endpoints"; exit 1; }; sleep 0.5; done
say "scale to 3: the slice gains an endpoint"
k scale deployment/web -n "$NS" --replicas=3
k rollout status deployment/web -n "$NS" --timeout=60s
deadline=$((SECONDS + 60)); until [[ "$(ready_endpoints)" == 3 ]]; do (( SECONDS < deadline )) || { say "EndpointSlice never had 3 ready endpoints"; exit 1; }; sleep 0.5; done
say "scale to 1: the slice loses two"
k scale deployment/web -n "$NS" --replicas=1
deadline=$((SECONDS + 60)); until [[ "$(ready_endpoints)" == 1 ]]; do (( SECONDS < deadline )) || { say "EndpointSlice never shrank to 1"; exit 1; }; sleep 0.5; done
say "done"
