#!/usr/bin/env bash
# Builds ahead what the e2e and fault stages run, so that they find it fresh.
# The unit stage runs it as the load beside its tests (.ci/busy.sh --load):
# the cores its burners would only heat build this instead.
#   - kascade static (musl), as the e2e and fault suites run it:
#     e2e/static-kascade.sh with KASCADE_STATIC_BUILD=tests (the binary
#     the release test programs are built beside, so the dependencies are
#     built once for both), which also checks that it is static and runs;
#   - the release-profile test programs, for the same musl target, so that
#     one release build of the dependencies serves all (CARGO_BUILD_TARGET,
#     as e2e/suite.sh and e2e/faults.sh set it): tests/e2e.rs,
#     tests/e2e_shippers.rs, tests/e2e_doctor.rs and
#     tests/span_cache_etcd.rs (e2e/suite.sh, e2e/scale-out.sh), the
#     config_roller example, the fault suite's load generator (benches/
#     fault_load.rs; the bench profile builds the same as the release one);
#   - the e2e harness (e2e/build.sh all: etcd, Kubernetes, kwok, Jaeger,
#     helm, the compose checker; and e2e/build.sh otelcol), which with a warm cache is only looked up
#     and with a cold one is built here, beside the unit tests, instead of
#     at the start of the e2e stage;
#   - the fuzz targets (.ci/fuzz.sh build: cargo-fuzz, pinned, installed
#     when missing; a nightly build of its own), which the fuzz stage runs.
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$SECONDS
KASCADE_STATIC_BUILD=tests bash e2e/static-kascade.sh
echo "prebuild: static kascade in $((SECONDS - t0))s"
t1=$SECONDS
CARGO_BUILD_TARGET="$(uname -m)-unknown-linux-musl"; export CARGO_BUILD_TARGET
cargo build --release --locked --example config_roller
cargo test --release --locked --no-run --test e2e --test e2e_shippers --test e2e_doctor --test span_cache_etcd
cargo bench --locked --no-run --bench fault_load
echo "prebuild: release test programs in $((SECONDS - t1))s"
t2=$SECONDS
bash e2e/build.sh all
bash e2e/build.sh otelcol
echo "prebuild: e2e harness in $((SECONDS - t2))s"
t3=$SECONDS
env -u CARGO_BUILD_TARGET bash .ci/fuzz.sh build
echo "prebuild: fuzz targets in $((SECONDS - t3))s"
