#!/usr/bin/env bash
# fuzz.sh [build|run]: the cargo-fuzz targets of fuzz/ (docs/testing.md,
# "Fuzzing"), each run for a bounded time; a crash fails.
#   build  installs cargo-fuzz (pinned) when missing and builds every
#          target once, optimised, without sanitizer or debug assertions,
#          in a build directory kept between checkouts (KASCADE_FUZZ_CACHE,
#          default ~/.cache/kascade-fuzz: the dependencies are built once,
#          kascade's own crates for each checkout), then links the targets
#          into ${CARGO_TARGET_DIR:-target}/fuzz/bin;
#   run    builds what is not built yet, seeds the corpora (fuzz/seed.py),
#          then runs every target for FUZZ_SECONDS (default 30), FUZZ_JOBS
#          (default 2) at a time; FUZZ_TARGETS="a b" runs only those.
# No argument: both. (`make test` runs them holding
# ${CARGO_TARGET_DIR:-target}/fuzz/build.lock: the unit stage's busy.sh
# counts the fuzz stage as its load and starts its CPU burners only when
# the lock is released; see the Makefile.)
# Needs the nightly toolchain (rustup toolchain install nightly). A crashing
# input is kept in fuzz/artifacts/<target>/ and the commands that reproduce
# it are printed, with the panic it causes.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
# The unit stage's musl target is not the fuzzer's (nor cargo-fuzz's).
unset CARGO_BUILD_TARGET
CARGO_FUZZ_VERSION=0.13.1
seconds="${FUZZ_SECONDS:-30}"
jobs="${FUZZ_JOBS:-2}"
[[ "$seconds" =~ ^[1-9][0-9]*$ ]] || { echo "fuzz.sh: FUZZ_SECONDS must be a number of seconds, not '$seconds'" >&2; exit 2; }
[[ "$jobs" =~ ^[1-9][0-9]*$ ]] || { echo "fuzz.sh: FUZZ_JOBS must be a number, not '$jobs'" >&2; exit 2; }
target="${CARGO_TARGET_DIR:-target}"
[[ "$target" = /* ]] || target="$root/$target"
fuzz_dir="$target/fuzz"
# The built dependencies are most of the build (alone on the 2-core
# machine: 530 s from nothing, 188 s with them kept; jemalloc's C alone
# takes 80 s): kept, like the e2e harness, outside the checkout.
cache="${KASCADE_FUZZ_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kascade-fuzz}"
# Past this size (old dependency versions, another nightly), it starts over.
cache_max_gib="${KASCADE_FUZZ_CACHE_MAX_GIB:-10}"
# The same options at every build, so that `cargo fuzz run` with them
# finds the targets built.
build_opts=(-s none --codegen-units 16 --target-dir "$cache")
log() { echo "fuzz: $*" >&2; }

tools() {
  if ! rustup run nightly rustc --version >/dev/null 2>&1; then
    log "no nightly toolchain (cargo fuzz needs one): rustup toolchain install nightly"
    exit 2
  fi
  local have
  have="$(cargo fuzz --version 2>/dev/null || true)"
  if [[ "$have" != "cargo-fuzz $CARGO_FUZZ_VERSION" ]]; then
    log "installing cargo-fuzz $CARGO_FUZZ_VERSION${have:+ (found $have)}"
    cargo install --locked cargo-fuzz --version "$CARGO_FUZZ_VERSION" >&2
  fi
}

host="$(rustc +nightly -vV 2>/dev/null | sed -n 's/^host: //p')"
# The checkout's own copies of the targets, which the next checkout's build
# cannot replace under a run.
bin_dir="$fuzz_dir/bin"
# Every [[bin]] of fuzz/Cargo.toml.
mapfile -t all_targets < <(sed -n 's/^name = "\(.*\)"$/\1/p' fuzz/Cargo.toml | grep -v '^kascade-fuzz$')

# Empties the cache but for the lock its builder holds.
start_over() { find "$cache" -mindepth 1 -maxdepth 1 ! -name lock -exec rm -rf {} +; }

build() {
  local t0=$SECONDS t
  mkdir -p "$cache" "$bin_dir"
  (
    # One build at a time in the shared directory (another checkout's CI).
    flock 8
    tools
    local size_gib
    size_gib=$(du -s --block-size=1G "$cache" | cut -f1)
    if ((size_gib > cache_max_gib)); then
      log "$cache holds ${size_gib} GiB (over KASCADE_FUZZ_CACHE_MAX_GIB=$cache_max_gib): starting it over"
      start_over
    fi
    # kascade's crates are built anew for each checkout (their path is part
    # of what cargo names them by): the last checkout's (2 GB with the
    # targets) are removed first, so the directory does not grow with each.
    local last
    last="$(cat "$cache/checkout" 2>/dev/null || true)"
    if [[ -n "$last" && "$last" != "$root" ]] \
      && ! (cd fuzz && cargo +nightly clean -p kascade -p kascade-cpid -p kascade-fuzz \
        --release --target "$host" --target-dir "$cache"); then
      log "could not remove the crates of $last from $cache: starting it over"
      start_over
    fi
    echo "$root" >"$cache/checkout"
    (cd fuzz && cargo +nightly fuzz build "${build_opts[@]}")
    for t in "${all_targets[@]}"; do
      ln -f "$cache/$host/release/$t" "$bin_dir/$t" 2>/dev/null || cp -f "$cache/$host/release/$t" "$bin_dir/$t"
    done
  ) 8>"$cache/lock"
  log "built ${#all_targets[@]} targets in $((SECONDS - t0))s (${all_targets[*]})"
}

# Runs one target for $seconds; its output goes to $fuzz_dir/logs/<target>.log.
run_one() {
  local t="$1" out="$fuzz_dir/logs/$1.log" rc=0
  # The targets that write files (audit_lines, spool_files) make a directory
  # per process, which libFuzzer's exit leaves behind: under this TMPDIR,
  # removed here, rather than in /tmp for good.
  local tmp="$fuzz_dir/tmp/$t"
  mkdir -p "fuzz/artifacts/$t" "fuzz/corpus/$t" "$tmp"
  # -close_fd_mask=3: what the product prints (warnings on damaged input)
  # is not the fuzzer's report; a crash is run again below to show it.
  # -timeout: an input taking 30 s is a hang, reported as a crash.
  TMPDIR="$tmp" "$bin_dir/$t" "fuzz/corpus/$t" -max_total_time="$seconds" -timeout=30 \
    -close_fd_mask=3 -print_final_stats=1 -artifact_prefix="fuzz/artifacts/$t/" >"$out" 2>&1 || rc=$?
  rm -rf "$tmp"
  return "$rc"
}

report() {
  local t="$1" rc="$2" out="$fuzz_dir/logs/$1.log"
  local runs speed corpus
  runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$out" | tail -1)"
  speed="$(sed -n 's/^stat::average_exec_per_sec: *//p' "$out" | tail -1)"
  corpus="$(grep -o 'corp: [0-9]*' "$out" | tail -1 | cut -d' ' -f2)"
  if ((rc == 0)); then
    log "$t: ok, ${runs:-?} runs (${speed:-?}/s), corpus ${corpus:-?} inputs"
    return 0
  fi
  local artifact
  artifact="$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$out" | tail -1)"
  log "$t FAILED (exit $rc); the end of its output ($out):"
  tail -n 30 "$out" >&2
  if [[ -n "$artifact" && -f "$artifact" ]]; then
    log "$t: the input is kept in $artifact; reproduce it with"
    log "  $bin_dir/$t $artifact"
    log "  (or: cd fuzz && cargo +nightly fuzz run ${build_opts[*]} $t ../$artifact)"
    if (($(stat -c %s "$artifact") <= 65536)); then
      log "$t: the input, base64: $(base64 -w0 "$artifact")"
    fi
    log "$t: what it does run once more (the panic):"
    mkdir -p "$fuzz_dir/tmp/$t"
    TMPDIR="$fuzz_dir/tmp/$t" timeout 120 "$bin_dir/$t" "$artifact" 2>&1 | grep -v "^INFO:" | head -n 40 >&2 || true
    rm -rf "$fuzz_dir/tmp/$t"
  fi
  return 1
}

run() {
  local targets=("${all_targets[@]}")
  [[ -z "${FUZZ_TARGETS:-}" ]] || read -ra targets <<<"$FUZZ_TARGETS"
  local t
  for t in "${targets[@]}"; do
    [[ " ${all_targets[*]} " == *" $t "* ]] || { log "no target $t (fuzz/Cargo.toml has: ${all_targets[*]})"; exit 2; }
  done
  # Built already (`fuzz.sh build`), this only finds it fresh.
  build
  python3 fuzz/seed.py | sed 's/^/fuzz: corpus: /' >&2
  mkdir -p "$fuzz_dir/logs"
  log "running ${#targets[@]} targets for ${seconds}s each, $jobs at a time"
  local t0=$SECONDS failed=() pid rc
  declare -A running=()
  reap() {
    wait -n -p pid "${!running[@]}" && rc=0 || rc=$?
    report "${running[$pid]}" "$rc" || failed+=("${running[$pid]}")
    unset "running[$pid]"
  }
  for t in "${targets[@]}"; do
    while ((${#running[@]} >= jobs)); do reap; done
    run_one "$t" &
    running[$!]="$t"
  done
  while ((${#running[@]} > 0)); do reap; done
  log "ran ${#targets[@]} targets in $((SECONDS - t0))s"
  if ((${#failed[@]} > 0)); then
    log "crashed: ${failed[*]} (keep each input as a unit test beside the code it crashed)"
    exit 1
  fi
}

case "${1:-all}" in
  build) build ;;
  run) run ;;
  all) run ;;
  *) echo "usage: fuzz.sh [build|run]" >&2; exit 2 ;;
esac
