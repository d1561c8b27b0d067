#!/usr/bin/env bash
# Healthy: Job job-demo/pi (3 completions, 2 at a time) completes
# (e2e/scenarios/job.sh).
source "$(dirname "$0")/lib.sh"
scenario job
