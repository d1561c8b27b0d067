#!/usr/bin/env bash
# Builds ahead what the e2e and fault stages run, so that they find it fresh.
# The unit stage runs it as the load beside its tests (.ci/busy.sh --load):
# the cores its burners would only heat build this instead.
#   - kascade as a release ships it, static (musl): e2e/static-kascade.sh,
#     which also checks that it is static and that it runs;
#   - the release-profile test programs: tests/e2e.rs and
#     tests/span_cache_etcd.rs (e2e/suite.sh, e2e/scale-out.sh), the
#     config_roller example, the fault suite's load generator (benches/
#     fault_load.rs; the bench profile builds the same as the release one).
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$SECONDS
bash e2e/static-kascade.sh
echo "prebuild: static kascade in $((SECONDS - t0))s"
t1=$SECONDS
cargo build --release --locked --example config_roller
cargo test --release --locked --no-run --test e2e --test span_cache_etcd
cargo bench --locked --no-run --bench fault_load
echo "prebuild: release test programs in $((SECONDS - t1))s"
