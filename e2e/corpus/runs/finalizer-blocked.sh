#!/usr/bin/env bash
# A finalizer blocking a delete (e2e/scenarios/finalizer-blocked.sh):
# Deployment fin-demo/held carries finalizer kascade.io/hold, which nothing
# removes; deleted, it keeps its deletionTimestamp and stays.
source "$(dirname "$0")/lib.sh"
scenario finalizer-blocked
