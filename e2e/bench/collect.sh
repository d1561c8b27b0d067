#!/usr/bin/env bash
# Load benchmark of `kascade collect`: a real OTLP receiver (Jaeger v2 with a
# discarding pipeline), kascade (release build), and the load generator
# benches/collect_load.rs posting real audit batches. Prints the numbers
# README.md reports. BENCH_COPIES / BENCH_SENDERS tune the load; KASCADE_BIN
# runs another kascade binary (paired runs of two builds on the same load);
# LOAD_BIN runs an already built load generator (`cargo bench --no-run`'s
# benches/collect_load) instead of building it.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
BIN="$("$ROOT/e2e/build.sh" all | sed -n 's/^KASCADE_E2E_BIN=//p')"
KASCADE_BIN="${KASCADE_BIN:-$ROOT/target/release/kascade}"
[[ "$KASCADE_BIN" != "$ROOT/target/release/kascade" ]] || cargo build --release --locked --bin kascade >&2
[[ -n "${LOAD_BIN:-}" ]] || cargo bench --locked --bench collect_load --no-run >&2
RUN="$(mktemp -d)"
pids=()
# kascade first: on SIGTERM it exports what it accepted, which needs the receiver.
cleanup() {
  if [[ -n "${KPID:-}" ]]; then kill "$KPID" 2>/dev/null || true; wait "$KPID" 2>/dev/null || true; fi
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$RUN"
}
trap cleanup EXIT
JAEGER_OTLP_GRPC_PORT=29317 JAEGER_HEALTH_PORT=29133 \
  "$BIN/jaeger" --config "file:$ROOT/e2e/jaeger/sink.yaml" >"$RUN/jaeger.log" 2>&1 &
pids+=($!)
"$KASCADE_BIN" collect --listen 127.0.0.1:29090 --admin-listen 127.0.0.1:29091 \
  --otlp-endpoint http://127.0.0.1:29317 --spool-dir "$RUN/spool" ${KASCADE_BENCH_ARGS:-} >"$RUN/kascade.log" 2>&1 &
KPID=$!; pids+=($KPID)
deadline=$((SECONDS + 30))
until curl -sf http://127.0.0.1:29133/status >/dev/null 2>&1 || curl -sf http://127.0.0.1:29133/ >/dev/null 2>&1; do
  (( SECONDS < deadline )) || { echo "Jaeger sink not ready" >&2; cat "$RUN/jaeger.log" >&2; exit 1; }; sleep 0.2
done
until curl -sf http://127.0.0.1:29091/readyz >/dev/null; do
  (( SECONDS < deadline )) || { echo "kascade not ready" >&2; cat "$RUN/kascade.log" >&2; exit 1; }; sleep 0.2
done
if [[ -n "${LOAD_BIN:-}" ]]; then
  KASCADE_URL=http://127.0.0.1:29090 KASCADE_ADMIN_URL=http://127.0.0.1:29091 KASCADE_PID=$KPID "$LOAD_BIN" --bench
else
  KASCADE_URL=http://127.0.0.1:29090 KASCADE_ADMIN_URL=http://127.0.0.1:29091 KASCADE_PID=$KPID \
    cargo bench --locked --bench collect_load
fi
# With --etcd-endpoints in KASCADE_BENCH_ARGS: the shared span cache's etcd
# round trips, by op (divide by the events above for requests per event).
curl -sf http://127.0.0.1:29091/metrics | grep -E '^kascade_span_cache_etcd_(requests|errors)_total' || true
grep -E "WARN|ERROR" "$RUN/kascade.log" | head -5 >&2 || true
