#!/usr/bin/env bash
# Healthy: Service svc-demo/web and its Deployment; the EndpointSlice follows
# the Pods from 2 to 3 to 1 ready endpoints (e2e/scenarios/service.sh).
source "$(dirname "$0")/lib.sh"
scenario service
