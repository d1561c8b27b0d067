#!/usr/bin/env bash
# Builds ahead what later stages need and the unit build does not make, so
# that they find it fresh. The unit stage runs it as the load beside its
# tests (.ci/busy.sh --load): the cores its burners would only heat build
# this instead. The unit build itself (`cargo test --workspace` for the musl
# target) makes the kascade and the test programs of the corpus, browser,
# e2e and fault stages (e2e/profile.sh).
#   - the e2e harness (e2e/build.sh all: etcd, Kubernetes, kwok, Jaeger,
#     helm, the compose checker; and e2e/build.sh otelcol), which with a
#     warm cache is only looked up and with a cold one is built here, beside
#     the unit tests, instead of at the start of the e2e stage;
#   - the fuzz targets (.ci/fuzz.sh build: cargo-fuzz, pinned, installed
#     when missing; a nightly build of its own, for the host), which the
#     fuzz stage runs.
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$SECONDS
bash e2e/build.sh all
bash e2e/build.sh otelcol
echo "prebuild: e2e harness in $((SECONDS - t0))s"
t1=$SECONDS
env -u CARGO_BUILD_TARGET bash .ci/fuzz.sh build
echo "prebuild: fuzz targets in $((SECONDS - t1))s"
