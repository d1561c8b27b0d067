# The real Jaegers of e2e/bench/read-path.sh and e2e/bench/frontend-memory.sh:
# the harness's raw Jaeger (e2e/jaeger/raw.yaml) with audit logs replayed
# into it, and a dist-profile `kascade frontend` over it with a query Jaeger
# (e2e/jaeger/query.yaml) in front, as the Jaeger UI reaches it.
# Sourced, not run; needs ROOT, BIN (e2e/build.sh's), KASCADE_BIN, RUN and a
# `pids` array the caller kills on exit.

wait_for() { # what url [log]
  local deadline=$((SECONDS + 60))
  until curl -sf "$2" >/dev/null 2>&1; do
    (( SECONDS < deadline )) || { echo "$1 not ready" >&2; [[ -z "${3:-}" ]] || tail -n 20 "$3" >&2; exit 1; }
    sleep 0.2
  done
}

# The raw Jaeger, as the harness runs it: OTLP gRPC on 29417, its query
# HTTP API on 29486, remote storage gRPC on 29471.
start_raw_jaeger() {
  JAEGER_BIND_HOST=127.0.0.1 JAEGER_OTLP_GRPC_PORT=29417 JAEGER_OTLP_HTTP_PORT=29418 \
    JAEGER_QUERY_HTTP_PORT=29486 JAEGER_QUERY_GRPC_PORT=29485 JAEGER_HEALTH_PORT=29433 \
    JAEGER_METRICS_PORT=29488 JAEGER_REMOTE_STORAGE_PORT=29471 \
    "$BIN/jaeger" --config "file:$ROOT/e2e/jaeger/raw.yaml" >"$RUN/jaeger-raw.log" 2>&1 &
  pids+=($!)
  wait_for "raw Jaeger" http://127.0.0.1:29486/api/services "$RUN/jaeger-raw.log"
}

# replay_into_raw_jaeger LOG: the audit log LOG, as the collector exports it.
replay_into_raw_jaeger() {
  "$KASCADE_BIN" replay --cluster bench --otlp-endpoint http://127.0.0.1:29417 --output otlp \
    "$1" >"$RUN/replay.log" 2>&1 || { cat "$RUN/replay.log" >&2; exit 1; }
}

# search_range LOG: "START END" in µs, the log's time from an hour before
# (object spans start with their window, up to --window before the first
# write) to a minute after.
search_range() {
  python3 - "$1" <<'PY'
import datetime, json, sys
ts = [json.loads(l)["stageTimestamp"] for l in open(sys.argv[1]) if l.strip()]
us = lambda s: int(datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp() * 1e6)
print(min(map(us, ts)) - 3_600_000_000, max(map(us, ts)) + 60_000_000)
PY
}

# wait_for_raw_spans TAGS_JSON START END: until the raw Jaeger finds a trace
# of service SERVICE (default kascade) with those tags (the exporter's last
# batch stored), at most 5 minutes.
wait_for_raw_spans() {
  local tags deadline=$((SECONDS + 300))
  tags="$(python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1]))' "$1")"
  until curl -sf "http://127.0.0.1:29486/api/traces?service=${SERVICE:-kascade}&tags=$tags&start=$2&end=$3&limit=5" \
    | python3 -c 'import json,sys; sys.exit(0 if json.load(sys.stdin).get("data") else 1)' 2>/dev/null; do
    (( SECONDS < deadline )) || { echo "no spans with $1 reached the raw Jaeger" >&2; exit 1; }
    sleep 0.5
  done
}

# start_frontend ARGS…: `kascade frontend` with ARGS (gRPC on 29493, HTTP on
# 29494) and a query Jaeger in front of it (its UI API on 29496); sets
# FPID and QPID, both also in pids.
start_frontend() {
  "$KASCADE_BIN" frontend --grpc-listen 127.0.0.1:29493 --http-listen 127.0.0.1:29494 "$@" \
    >"$RUN/frontend.log" 2>&1 &
  FPID=$!
  JAEGER_BIND_HOST=127.0.0.1 JAEGER_QUERY_HTTP_PORT=29496 JAEGER_QUERY_GRPC_PORT=29497 \
    JAEGER_HEALTH_PORT=29498 JAEGER_OTLP_GRPC_PORT=29499 JAEGER_OTLP_HTTP_PORT=29500 \
    KASCADE_FRONTEND_GRPC=127.0.0.1:29493 \
    "$BIN/jaeger" --config "file:$ROOT/e2e/jaeger/query.yaml" >"$RUN/jaeger-query.log" 2>&1 &
  QPID=$!
  pids+=("$FPID" "$QPID")
  wait_for "kascade frontend" http://127.0.0.1:29494/readyz "$RUN/frontend.log"
  wait_for "query Jaeger" http://127.0.0.1:29496/api/services "$RUN/jaeger-query.log"
}

# stop_frontend: the processes start_frontend started.
stop_frontend() {
  [[ -n "${FPID:-}" ]] || return 0
  kill "$QPID" "$FPID" 2>/dev/null || true
  wait "$QPID" "$FPID" 2>/dev/null || true
}
