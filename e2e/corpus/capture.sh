#!/usr/bin/env bash
# Captures corpus runs: for each RUN (default: every e2e/corpus/runs/*.sh),
# one after another,
#   1. a fresh control plane (e2e/cluster.sh up --name corpus-RUN),
#   2. the run's script e2e/corpus/runs/RUN.sh (its workloads, waited for),
#   3. a settle of CORPUS_SETTLE seconds (default 15: timers, retries and
#      periodic activity after the workload are in the log too),
#   4. a marker write (an annotation of namespace default) awaited in the
#      audit log, so that every event before it is there,
#   5. the whole audit log, from the cluster's start, reads and start-up
#      included, unedited (up to its last complete line), gzip -9'd to
#      e2e/corpus/RUN/audit.log.gz; then the run's helper processes are
#      stopped and the cluster torn down (also on failure).
#
#   e2e/corpus/capture.sh [RUN...]
#
# A failed run keeps its previous capture; the others go on; the exit status
# is 1 if any failed. Port bases: CORPUS_PORT_BASE (default 30000; the
# cluster takes N+79..N+888, a run's own helpers N+900..N+999).
# shellcheck disable=SC2317 # functions run by trap
set -euo pipefail
CORPUS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
E2E_DIR="$(cd "$CORPUS_DIR/.." && pwd)"
PORT_BASE="${CORPUS_PORT_BASE:-30000}"
SETTLE="${CORPUS_SETTLE:-15}"
log() { printf '[corpus %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# --one RUN: a single capture (a process of its own, so that errexit holds
# and its EXIT trap tears its cluster down).
if [[ "${1:-}" == --one ]]; then
  RUN="$2"
  NAME="corpus-$RUN"
  RUN_DIR="$E2E_DIR/.run-$NAME"
  OUT="$CORPUS_DIR/$RUN"
  WORK="$RUN_DIR/corpus"
  stop_helpers() {
    local pid
    [[ -f "$WORK/pids" ]] || return 0
    while read -r pid; do
      kill -TERM "$pid" 2>/dev/null || true
    done <"$WORK/pids"
    while read -r pid; do
      local deadline=$((SECONDS + 10))
      while kill -0 "$pid" 2>/dev/null && (( SECONDS < deadline )); do sleep 0.2; done
      kill -KILL "$pid" 2>/dev/null || true
    done <"$WORK/pids"
    rm -f "$WORK/pids"
  }
  teardown() {
    local rc=$?
    stop_helpers
    "$E2E_DIR/cluster.sh" down --name "$NAME" >/dev/null 2>&1 \
      || log "run $RUN: teardown of cluster $NAME FAILED (see e2e/cluster.sh down --name $NAME)"
    rm -f "$OUT/audit.log.gz.tmp"
    exit "$rc"
  }
  trap teardown EXIT
  trap 'exit 130' INT TERM
  # A cluster left by an interrupted capture.
  "$E2E_DIR/cluster.sh" down --name "$NAME" >/dev/null 2>&1 || true
  up_log="$(mktemp)"
  # No kascade listens on port 9: the apiserver logs the audit webhook's failures, harmlessly.
  # A run may log under a policy of its own (runs/RUN.audit-policy.yaml)
  # and bring its cluster up with more arguments (runs/RUN.up-args, e.g.
  # --second-apiserver).
  up_args=()
  [[ ! -f "$CORPUS_DIR/runs/$RUN.audit-policy.yaml" ]] \
    || up_args=(--audit-policy "$CORPUS_DIR/runs/$RUN.audit-policy.yaml")
  if [[ -f "$CORPUS_DIR/runs/$RUN.up-args" ]]; then
    read -r -a more <"$CORPUS_DIR/runs/$RUN.up-args"
    up_args+=("${more[@]}")
  fi
  # A traced run (runs/RUN.traced) has the apiserver trace every request
  # into the cluster's own Jaeger (its OTLP gRPC port, port base + 317);
  # the others trace nothing (never into a kascade that happens to listen).
  TRACED=""
  if [[ -f "$CORPUS_DIR/runs/$RUN.traced" ]]; then
    TRACED=1
    up_args+=(--tracing-endpoint "127.0.0.1:$((PORT_BASE + 317))")
  else
    up_args+=(--tracing-endpoint none)
  fi
  "$E2E_DIR/cluster.sh" up --name "$NAME" --port-base "$PORT_BASE" "${up_args[@]}" \
    --audit-webhook-url "http://127.0.0.1:9/audit/$NAME" 2>"$up_log" \
    || { cat "$up_log" >&2; rm -f "$up_log"; log "run $RUN FAILED: the cluster did not come up"; exit 1; }
  rm -f "$up_log"
  mkdir -p "$WORK"
  # shellcheck source=/dev/null
  source "$RUN_DIR/env"
  if ! KASCADE_E2E_ENV="$RUN_DIR/env" CORPUS_RUN="$RUN" CORPUS_PORT_BASE="$PORT_BASE" CORPUS_WORK="$WORK" \
      "$CORPUS_DIR/runs/$RUN.sh"; then
    log "run $RUN FAILED: runs/$RUN.sh did not complete (its messages above say what did not happen)"
    exit 1
  fi
  # The settle: the only bare sleep, so that what happens after the workload
  # (controllers' retries and resyncs, backoffs, kwok's stages) is in the log.
  log "run $RUN: settling ${SETTLE}s"
  sleep "$SETTLE"
  marker="kascade-corpus-end-$RUN-$RANDOM$RANDOM"
  "$KUBECTL" annotate namespace default "kascade.io/corpus-end=$marker" --overwrite >/dev/null
  deadline=$((SECONDS + 30))
  until grep -qF "$marker" "$AUDIT_LOG"; do
    (( SECONDS < deadline )) || { log "run $RUN FAILED: the audit log never showed the end marker"; exit 1; }
    sleep 0.2
  done
  # Up to the last complete line: the apiserver is still writing.
  size="$(python3 -c '
import sys
with open(sys.argv[1], "rb") as f:
    data = f.read()
print(data.rfind(b"\n") + 1)' "$AUDIT_LOG")"
  mkdir -p "$OUT"
  head -c "$size" "$AUDIT_LOG" | gzip -9 -n >"$OUT/audit.log.gz.tmp"
  mv "$OUT/audit.log.gz.tmp" "$OUT/audit.log.gz"
  # A second apiserver's log, up to its last complete line now (its writes
  # before the marker are in; the marker went through the first).
  rm -f "$OUT"/audit-2.log.gz
  if [[ -n "${AUDIT_LOG_2:-}" ]]; then
    python3 -c '
import sys
with open(sys.argv[1], "rb") as f:
    data = f.read()
sys.stdout.buffer.write(data[:data.rfind(b"\n") + 1])' "$AUDIT_LOG_2" | gzip -9 -n >"$OUT/audit-2.log.gz"
    log "run $RUN: second apiserver: $(zcat "$OUT/audit-2.log.gz" | wc -l) audit events"
  fi
  log "run $RUN: $(wc -l < <(head -c "$size" "$AUDIT_LOG")) audit events, $size bytes, $(stat -c %s "$OUT/audit.log.gz") bytes gzip'd"
  rm -f "$OUT/apiserver-traces.jsonl.gz"
  if [[ -n "$TRACED" ]]; then
    # The apiserver exports in batches (every 5 s): the marker's trace in
    # the store means every earlier request's is too.
    marker_id="$(zcat "$OUT/audit.log.gz" | grep -F "$marker" | tail -1 | python3 -c 'import json,sys; print(json.loads(sys.stdin.readline())["auditID"])')"
    query="$JAEGER_QUERY_URL/api/traces?service=apiserver&lookback=6h&limit=1&tags=%7B%22audit-id%22%3A%22$marker_id%22%7D"
    deadline=$((SECONDS + 60))
    until curl -sf "$query" | grep -q traceID; do
      (( SECONDS < deadline )) || { log "run $RUN FAILED: the end marker's trace never reached the cluster's Jaeger"; exit 1; }
      sleep 0.5
    done
    zcat "$OUT/audit.log.gz" >"$WORK/audit.log"
    python3 "$E2E_DIR/tools/capture-component-traces.py" "$WORK/audit.log" '*' "$JAEGER_QUERY_URL" "$WORK"
    gzip -9 -n <"$WORK/apiserver-traces.jsonl" >"$OUT/apiserver-traces.jsonl.gz"
    log "run $RUN: $(wc -l <"$WORK/apiserver-traces.jsonl") apiserver traces, $(stat -c %s "$OUT/apiserver-traces.jsonl.gz") bytes gzip'd"
  fi
  exit 0
fi

ALL_RUNS=()
for f in "$CORPUS_DIR"/runs/*.sh; do
  [[ "$(basename "$f")" == lib.sh ]] || ALL_RUNS+=("$(basename "$f" .sh)")
done
RUNS=("$@")
[[ ${#RUNS[@]} -gt 0 ]] || RUNS=("${ALL_RUNS[@]}")
for run in "${RUNS[@]}"; do
  [[ "$run" =~ ^[a-z0-9][a-z0-9-]*$ && -f "$CORPUS_DIR/runs/$run.sh" ]] \
    || { log "no run '$run' (want one of: ${ALL_RUNS[*]})"; exit 2; }
done

started=$SECONDS
failed=()
summary=()
for run in "${RUNS[@]}"; do
  t0=$SECONDS
  log "== run $run"
  if "${BASH_SOURCE[0]}" --one "$run"; then
    summary+=("$(printf '%-28s %4ss  %7s bytes gz' "$run" "$((SECONDS - t0))" "$(stat -c %s "$CORPUS_DIR/$run/audit.log.gz")")")
  else
    failed+=("$run")
    summary+=("$(printf '%-28s %4ss  FAILED' "$run" "$((SECONDS - t0))")")
  fi
  log "== run $run: $((SECONDS - t0))s"
done
log "captured ${#RUNS[@]} runs in $((SECONDS - started))s:"
printf '  %s\n' "${summary[@]}" >&2
if (( ${#failed[@]} )); then
  log "FAILED runs: ${failed[*]}"
  exit 1
fi
