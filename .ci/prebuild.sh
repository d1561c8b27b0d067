#!/usr/bin/env bash
# Builds ahead what later stages need and the unit build does not make, so
# that they find it fresh: the e2e harness (e2e/build.sh all: etcd,
# Kubernetes, kwok, Jaeger, helm, the compose checker; and e2e/build.sh
# otelcol). With a warm cache it is only looked up; with a cold one it is
# built here, beside the unit build and tests (.ci/busy.sh --load), instead
# of at the start of the e2e stage. The unit build itself (`cargo test
# --workspace` for the musl target) makes the kascade and the test programs
# of the corpus, browser, e2e and fault stages (e2e/profile.sh); the fuzz
# targets are built by the fuzz stage, which `make test` starts beside the
# unit stage.
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$SECONDS
bash e2e/build.sh all
bash e2e/build.sh otelcol
echo "prebuild: e2e harness in $((SECONDS - t0))s"
