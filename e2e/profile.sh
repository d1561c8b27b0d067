# Sourced by the end-to-end scripts (static-kascade.sh, suite.sh, faults.sh,
# scale-out.sh): which build of kascade and of the test programs they run.
#
# KASCADE_STATIC_PROFILE names it:
#   test     (default) the build `cargo test --workspace --target
#            <arch>-unknown-linux-musl` makes, the one the unit suite runs
#            (make unit): CI builds the dependencies once for the unit,
#            corpus, browser, e2e and fault stages, and the binary is still
#            static, as releases ship it. Unoptimised code with overflow
#            checks and debug assertions on; the suites wait by readiness,
#            never by time, so they hold on it (sonic-rs is optimised in every
#            profile: json/depth.rs).
#   release  the optimised build (`cargo build --release`);
#   dist     what releases ship (fat LTO, one codegen unit: slow to build).
# Sets E2E_TARGET (the musl triple; CARGO_BUILD_TARGET is exported with it),
# E2E_CARGO_PROFILE (cargo's flags for the profile) and E2E_OUT (the
# directory cargo writes that profile's programs to).
E2E_PROFILE="${KASCADE_STATIC_PROFILE:-test}"
E2E_TARGET="$(uname -m)-unknown-linux-musl"
CARGO_BUILD_TARGET="$E2E_TARGET"; export CARGO_BUILD_TARGET
case "$E2E_PROFILE" in
  test|dev) E2E_CARGO_PROFILE=(); e2e_profile_dir=debug ;;
  release) E2E_CARGO_PROFILE=(--release); e2e_profile_dir=release ;;
  *[!A-Za-z0-9_-]*|"") echo "KASCADE_STATIC_PROFILE must be a cargo profile name, not '$E2E_PROFILE'" >&2; exit 2 ;;
  *) E2E_CARGO_PROFILE=(--profile "$E2E_PROFILE"); e2e_profile_dir="$E2E_PROFILE" ;;
esac
E2E_OUT="${CARGO_TARGET_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/target}"
[[ "$E2E_OUT" = /* ]] || E2E_OUT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/$E2E_OUT"
E2E_OUT="$E2E_OUT/$E2E_TARGET/$e2e_profile_dir"
