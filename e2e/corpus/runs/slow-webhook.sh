#!/usr/bin/env bash
# A slow validating webhook and one failing open, with the apiserver's own
# traces (runs/slow-webhook.traced): e2e/scenarios/slow-webhook.sh
# (slow-demo/web: each Pod create waits ~800 ms for slow-policy.example.com;
# failing-policy.example.com answers 500 under failurePolicy Ignore) while
# the Deployment rollout of e2e/scenarios/deployment.sh (default/hello)
# runs beside it, untouched by either webhook.
source "$(dirname "$0")/lib.sh"
together slow-webhook scenario slow-webhook
together deployment scenario deployment
join
