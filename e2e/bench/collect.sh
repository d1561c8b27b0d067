#!/usr/bin/env bash
# Load benchmark of `kascade collect`: a real OTLP receiver (Jaeger v2 with a
# discarding pipeline), kascade (dist profile), and the load generator
# benches/collect_load.rs posting real audit batches. Prints the numbers
# docs/benchmarks.md reports. BENCH_COPIES / BENCH_SENDERS tune the load,
# BENCH_COPY_SPACING_MS how far apart in time the copies happen (default 5:
# they overlap, sent in time order; 0: the same times, one after the other);
# BENCH_OMIT_MANAGED_FIELDS=1 sends the objects without
# metadata.managedFields (an audit policy with omitManagedFields: true);
# KASCADE_BIN runs another kascade binary (paired runs of two builds on the
# same load);
# LOAD_BIN runs an already built load generator (`cargo bench --no-run`'s
# benches/collect_load) instead of building it. BENCH_ETCD=1 starts the
# harness's etcd and gives every replica the shared span cache on it;
# BENCH_REPLICAS=N (default 1) runs N replicas, the load spread over them
# batch by batch as a load balancer would.
# BENCH_COMPONENT_TRACES=1 gives each replica --component-traces-listen
# (port + 2) and a bearer token (--webhook-token-file, sent on both ports),
# and the load generator also sends kube-apiserver's request traces, one per
# audit event (derived from the captured ones of e2e/corpus/traced-healthy
# and e2e/corpus/slow-webhook: see benches/load/components.rs);
# BENCH_COMPONENT_TRACES=0 is the other half of such a pair: the same
# kascade configuration, the apiserver's tracing off (nothing sent to the
# component port). BENCH_COMPONENT_SENDERS (default 2) exporters send them.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
BIN="$("$ROOT/e2e/build.sh" all | sed -n 's/^KASCADE_E2E_BIN=//p')"
KASCADE_BIN="${KASCADE_BIN:-$ROOT/target/dist/kascade}"
[[ "$KASCADE_BIN" != "$ROOT/target/dist/kascade" ]] || cargo build --profile dist --locked --bin kascade >&2
[[ -n "${LOAD_BIN:-}" ]] || cargo bench --locked --bench collect_load --no-run >&2
RUN="$(mktemp -d)"
pids=()
# kascade first: on SIGTERM it exports what it accepted, which needs the receiver.
KPIDS=()
cleanup() {
  for k in "${KPIDS[@]}"; do kill "$k" 2>/dev/null || true; wait "$k" 2>/dev/null || true; done
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$RUN"
}
trap cleanup EXIT
JAEGER_OTLP_GRPC_PORT=29317 JAEGER_HEALTH_PORT=29133 \
  "$BIN/jaeger" --config "file:$ROOT/e2e/jaeger/sink.yaml" >"$RUN/jaeger.log" 2>&1 &
pids+=($!)
etcd_args=()
if [[ "${BENCH_ETCD:-0}" == 1 ]]; then
  "$BIN/etcd" --name bench --data-dir "$RUN/etcd" --listen-client-urls http://127.0.0.1:29379 \
    --advertise-client-urls http://127.0.0.1:29379 --listen-peer-urls http://127.0.0.1:29380 \
    --initial-advertise-peer-urls http://127.0.0.1:29380 --initial-cluster bench=http://127.0.0.1:29380 \
    >"$RUN/etcd.log" 2>&1 &
  pids+=($!)
  etcd_args=(--etcd-endpoints http://127.0.0.1:29379)
fi
component_traces="${BENCH_COMPONENT_TRACES:-}"
[[ -z "$component_traces" || "$component_traces" == 0 || "$component_traces" == 1 ]] \
  || { echo "BENCH_COMPONENT_TRACES must be 0 or 1, not $component_traces" >&2; exit 2; }
token_args=()
if [[ -n "$component_traces" ]]; then
  export KASCADE_TOKEN="bench-$RANDOM$RANDOM"
  printf '%s' "$KASCADE_TOKEN" >"$RUN/token"
  token_args=(--webhook-token-file "$RUN/token")
fi
urls=(); admins=(); component_urls=()
for ((r = 0; r < ${BENCH_REPLICAS:-1}; r++)); do
  port=$((29090 + 10 * r))
  component_args=()
  if [[ -n "$component_traces" ]]; then
    component_args=(--component-traces-listen "127.0.0.1:$((port + 2))")
    component_urls+=("http://127.0.0.1:$((port + 2))")
  fi
  "$KASCADE_BIN" collect --listen "127.0.0.1:$port" --admin-listen "127.0.0.1:$((port + 1))" \
    --otlp-endpoint http://127.0.0.1:29317 --spool-dir "$RUN/spool-$r" "${etcd_args[@]}" \
    "${token_args[@]}" "${component_args[@]}" ${KASCADE_BENCH_ARGS:-} \
    >"$RUN/kascade-$r.log" 2>&1 &
  KPIDS+=($!); pids+=($!)
  urls+=("http://127.0.0.1:$port"); admins+=("http://127.0.0.1:$((port + 1))")
done
deadline=$((SECONDS + 30))
until curl -sf http://127.0.0.1:29133/status >/dev/null 2>&1 || curl -sf http://127.0.0.1:29133/ >/dev/null 2>&1; do
  (( SECONDS < deadline )) || { echo "Jaeger sink not ready" >&2; cat "$RUN/jaeger.log" >&2; exit 1; }; sleep 0.2
done
for r in "${!admins[@]}"; do
  until curl -sf "${admins[$r]}/readyz" >/dev/null; do
    (( SECONDS < deadline )) || { echo "kascade $r not ready" >&2; cat "$RUN"/etcd.log "$RUN/kascade-$r.log" >&2 2>/dev/null; exit 1; }; sleep 0.2
  done
done
join() { local IFS=,; echo "$*"; }
export KASCADE_URL="$(join "${urls[@]}")" KASCADE_ADMIN_URL="$(join "${admins[@]}")" KASCADE_PID="$(join "${KPIDS[@]}")"
export KASCADE_COMPONENT_URL="$(join "${component_urls[@]}")" BENCH_COMPONENT_TRACES="${component_traces:-0}"
if [[ -n "${LOAD_BIN:-}" ]]; then
  "$LOAD_BIN" --bench
else
  cargo bench --locked --bench collect_load
fi
# With etcd: the shared span cache's etcd round trips, by op and replica
# (divide by the events above for requests per event). Always: cascades
# still open and those dropped at the bound (the log's warning names only
# the first of each minute).
for r in "${!admins[@]}"; do
  curl -sf "${admins[$r]}/metrics" | grep -E '^kascade_(span_cache_etcd_(requests|errors)_total|cascades_(open|evicted_total)|component_(spans_total|trace_requests_refused_total))' | sed "s/^/replica $r: /" || true
  # The token over plain HTTP is warned about once at start: not a finding.
  grep -E "WARN|ERROR" "$RUN/kascade-$r.log" | grep -v -e 'without --tls-cert-file' | head -5 >&2 || true
done
