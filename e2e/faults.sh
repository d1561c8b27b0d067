#!/usr/bin/env bash
# The fault suite: kascade under overload, a Jaeger outage, kill -9 with a
# restart, oversized objects, a slow then vanished etcd with two replicas,
# its limits probed as an attacker would (e2e/faults/limits.py), and a
# burst of 200 searches at the read side (e2e/faults/searches.py).
# Real parts: kascade (the static build, e2e/static-kascade.sh),
# Jaeger v2 with persistent (badger) storage so an outage loses nothing
# stored before it, etcd from the harness.
# The load (benches/fault_load.rs) behaves as the apiserver's webhook backend:
# a refused batch or a broken connection is sent again until answered 200.
# After each scenario kascade drains (its spool is empty: everything it
# accepted is exported) and every event answered 200 is looked up in Jaeger.
#
#   e2e/faults.sh                      # all scenarios; prints the table docs/testing.md shows
#   FAULT_SCENARIOS="kill9 outage" e2e/faults.sh
#   FAULT_OUTAGE_SECONDS=60 (default)  FAULT_COPIES=150 (deployment fixture copies per scenario)
#   FAULT_KEEP=1                       # keep the logs and spools (path printed at the end)
#
# Exit status 1 if any scenario lost an accepted event.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
log() { printf '[faults %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

BIN="$("$ROOT/e2e/build.sh" all | sed -n 's/^KASCADE_E2E_BIN=//p')"
# kascade static (musl), checked to run: by default the unit suite's build
# (e2e/profile.sh), as e2e/suite.sh.
# shellcheck source=e2e/profile.sh
source "$ROOT/e2e/profile.sh"
KASCADE="$("$ROOT/e2e/static-kascade.sh" | sed -n 's/^KASCADE=//p')"
# The load generator (benches/fault_load.rs, harness = false) of the same
# build: `cargo test --bench` runs its main with the arguments after `--`.
LOAD=(cargo test "${E2E_CARGO_PROFILE[@]}" --locked --bench fault_load)
"${LOAD[@]}" --no-run >&2 2>/dev/null
SCENARIOS="${FAULT_SCENARIOS:-overload outage kill9 oversized etcd limits searches}"
OUTAGE="${FAULT_OUTAGE_SECONDS:-60}"
COPIES="${FAULT_COPIES:-150}"
RUN="$(mktemp -d)"
SERVICE=kascade-faults

export JAEGER_BIND_HOST=127.0.0.1 JAEGER_OTLP_GRPC_PORT=31317 JAEGER_OTLP_HTTP_PORT=31318 \
  JAEGER_QUERY_HTTP_PORT=31686 JAEGER_QUERY_GRPC_PORT=31685 JAEGER_HEALTH_PORT=31133 \
  JAEGER_METRICS_PORT=31888 JAEGER_BADGER_DIR="$RUN/badger"
JAEGER_URL="http://127.0.0.1:$JAEGER_QUERY_HTTP_PORT"
ETCD_URL=http://127.0.0.1:31379
declare -A KPID=() ADMIN=() WEBHOOK=()
JPID=""; EPID=""; LOADPID=""; FPID=""; QPID=""

cleanup() {
  local rc=$?
  for n in "${!KPID[@]}"; do kill -9 "${KPID[$n]}" 2>/dev/null || true; done
  for p in $LOADPID $JPID $EPID $FPID $QPID; do kill -CONT "$p" 2>/dev/null || true; kill "$p" 2>/dev/null || true; done
  # One that ignores TERM for 30 s (a Jaeger stuck flushing its store) is
  # killed: the next run needs its ports.
  local deadline=$((SECONDS + 30)) p
  for p in $LOADPID $JPID $EPID $FPID $QPID; do
    while kill -0 "$p" 2>/dev/null && (( SECONDS < deadline )); do sleep 0.2; done
    kill -9 "$p" 2>/dev/null || true
  done
  wait 2>/dev/null || true
  if [[ $rc -ne 0 ]]; then
    for f in "$RUN"/*.log; do [[ -f "$f" ]] && { echo "----- tail of $(basename "$f") -----" >&2; tail -n 15 "$f" >&2; }; done
  fi
  if [[ -n "${FAULT_KEEP:-}" ]]; then log "kept $RUN"; else rm -rf "$RUN"; fi
  exit $rc
}
trap cleanup EXIT

wait_until() { # DESCRIPTION SECONDS COMMAND...
  local what="$1" limit="$2"; shift 2
  local deadline=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    (( SECONDS < deadline )) || { log "gave up waiting for $what after ${limit}s"; return 1; }
    sleep 0.2
  done
}

start_jaeger() {
  "$BIN/jaeger" --config "file:$ROOT/e2e/jaeger/faults.yaml" >>"$RUN/jaeger.log" 2>&1 &
  JPID=$!
  wait_until "Jaeger" 60 curl -sf "$JAEGER_URL/api/services"
}
stop_jaeger() { kill -TERM "$JPID"; wait "$JPID" 2>/dev/null || true; JPID=""; }

# start_kascade NAME WEBHOOK_PORT ADMIN_PORT [collect flags...]; the spool
# directory belongs to NAME, so a restart replays what the killed one left.
start_kascade() {
  local n="$1" wp="$2" ap="$3"; shift 3
  env -u KASCADE_SPOOL_DIR "$KASCADE" collect --listen "127.0.0.1:$wp" --admin-listen "127.0.0.1:$ap" \
    --cluster faults --otlp-endpoint "http://127.0.0.1:$JAEGER_OTLP_GRPC_PORT" --service-name "$SERVICE" \
    --export-batch-timeout 200ms --spool-dir "$RUN/spool-$n" "$@" >>"$RUN/kascade-$n.log" 2>&1 &
  KPID[$n]=$!; ADMIN[$n]="http://127.0.0.1:$ap"; WEBHOOK[$n]="http://127.0.0.1:$wp"
  wait_until "kascade $n" 60 curl -sf "${ADMIN[$n]}/readyz"
}
stop_kascade() { kill -TERM "${KPID[$1]}"; wait "${KPID[$1]}" 2>/dev/null || true; unset "KPID[$1]"; }
metric() { curl -sf "${ADMIN[$1]}/metrics" | awk -v m="$2" '$1==m {print $2}'; }
spool_empty() { [[ "$(metric "$1" kascade_spool_bytes)" == 0 ]]; }
accepted_lines() { [[ -f "$1" ]] && wc -l <"$1" || echo 0; }
at_least() { (( $(accepted_lines "$1") >= $2 )); }

# load SCENARIO URLS [extra env...] (in the background; LOADPID)
load() {
  local s="$1" urls="$2"; shift 2
  env KASCADE_URLS="$urls" FAULT_NS="f-$s-" FAULT_ACCEPTED="$RUN/accepted-$s.tsv" BENCH_COPIES="$COPIES" "$@" \
    "${LOAD[@]}" -- load >"$RUN/load-$s.out" 2>>"$RUN/load-$s.log" &
  LOADPID=$!
}
finish_load() { wait "$LOADPID"; LOADPID=""; }

# Jaeger has written everything it received: its receiver's accepted spans
# equal its storage exporter's sent + failed ones.
jaeger_settled() {
  curl -sf "http://127.0.0.1:$JAEGER_METRICS_PORT/metrics" | awk '
    /^otelcol_receiver_accepted_spans_total/ { a += $NF }
    /^otelcol_exporter_sent_spans_total/ || /^otelcol_exporter_send_failed_spans_total/ { s += $NF }
    END { exit !(a > 0 && a == s) }'
}

declare -a ROWS=()
failed=0
# verify SCENARIO NOTE [MAX_DUPLICATES audit/object/link [REFERENCE MAX_DIFFERING]]:
# drained replicas, then every accepted event looked up; duplicates over the
# bound fail, and so do more than MAX_DIFFERING stored audit spans whose name,
# status or attributes differ from REFERENCE's (an uninterrupted run's
# OTLP/JSON).
verify() {
  local s="$1" note="$2" max="${3:-}" reference="${4:-}" differing="${5:-0}" n out rc=0
  for n in "${!KPID[@]}"; do
    wait_until "kascade $n to export everything it accepted" 600 spool_empty "$n"
  done
  wait_until "Jaeger to store what it received" 120 jaeger_settled
  out="$(FAULT_ACCEPTED="$RUN/accepted-$s.tsv" JAEGER_QUERY_URL="$JAEGER_URL" FAULT_SERVICE="$SERVICE" \
    FAULT_MAX_DUPLICATES="$max" FAULT_REFERENCE="$reference" FAULT_MAX_DIFFERING="$differing" \
    "${LOAD[@]}" -- verify 2>>"$RUN/verify-$s.log")" || rc=$?
  local refused; refused="$(sed -n 's/.*refused=\([0-9]*\).*/\1/p' "$RUN/load-$s.out" 2>/dev/null | head -1)"
  local answered stored lost orphans duplicates
  answered="$(sed -n 's/.*answered200=\([0-9]*\).*/\1/p' <<<"$out")"
  duplicates="$(sed -n 's/.*duplicate_spans=\([0-9/]*\).*/\1/p' <<<"$out")"
  stored="$(sed -n 's/.*stored=\([0-9]*\).*/\1/p' <<<"$out")"
  lost="$(sed -n 's/.*missing=\([0-9]*\).*/\1/p' <<<"$out")"
  orphans="$(sed -n 's/.*traces_without_object_span=\([0-9]*\).*/\1/p' <<<"$out")"
  local differing; differing="$(sed -n 's/.*attributes_differ=\([0-9/]*\).*/\1/p' <<<"$out")"
  [[ -n "$differing" ]] && note="$note; write spans differing from an uninterrupted run's: $differing"
  ROWS+=("| $s | ${answered:-?} | ${stored:-?} | ${lost:-?} | ${orphans:-?} | ${duplicates:-?} | ${refused:-0} | $note |")
  log "$s: $out"
  if [[ $rc -ne 0 ]]; then failed=1; cat "$RUN/verify-$s.log" >&2; fi
}

start_jaeger

for s in $SCENARIOS; do
  case "$s" in
  overload)
    log "overload: a queue of 400 events, one worker, no admission wait, 8 senders"
    start_kascade a 31090 31091 --queue-size 400 --workers 1 --admission-wait 0s
    load overload "${WEBHOOK[a]}" BENCH_SENDERS=8
    finish_load
    verify overload "load far above what one worker processes: refusals, then retries" 0/0/0
    stop_kascade a
    ;;
  outage)
    log "outage: Jaeger stopped for ${OUTAGE}s in the middle of the load"
    start_kascade a 31090 31091
    load outage "${WEBHOOK[a]}" BENCH_SENDERS=2
    wait_until "the first accepted batches" 120 at_least "$RUN/accepted-outage.tsv" 2000
    stop_jaeger
    sleep "$OUTAGE" # the fault itself: Jaeger is gone this long
    start_jaeger
    finish_load
    verify outage "Jaeger down ${OUTAGE}s (persistent storage, restarted)" 0/0/0
    stop_kascade a
    ;;
  kill9)
    log "kill9: kascade killed with SIGKILL in the middle of the load, then restarted"
    start_kascade a 31090 31091
    # One sender: the order of the answers is the order kascade processed
    # the batches in, which the uninterrupted run below repeats.
    load kill9 "${WEBHOOK[a]}" BENCH_SENDERS=1 FAULT_BODIES="$RUN/bodies-kill9.jsonl"
    wait_until "the first accepted batches" 120 at_least "$RUN/accepted-kill9.tsv" 2000
    kill -9 "${KPID[a]}"; wait "${KPID[a]}" 2>/dev/null || true
    start_kascade a 31090 31091
    finish_load
    replayed="$(metric a kascade_spool_replayed_batches_total)"
    context="$(metric a kascade_spool_context_batches_total)"
    # The same batches, in the same order, to a collector nobody kills.
    start_kascade r 31092 31093 --output "otlp-json=$RUN/reference-kill9.jsonl"
    env KASCADE_URLS="${WEBHOOK[r]}" FAULT_BODIES="$RUN/bodies-kill9.jsonl" FAULT_ACCEPTED=/dev/null \
      "${LOAD[@]}" -- resend >>"$RUN/load-kill9.out" 2>>"$RUN/load-kill9.log"
    wait_until "the uninterrupted collector to export everything" 600 spool_empty r
    stop_kascade r
    # No span twice: a link the killed process may have sent goes out again
    # as it was (the journal written ahead of export), which the store keeps
    # once. Every write's span as the uninterrupted run's, none differing:
    # the restart read the exported batches again (context) before the
    # replayed ones, and a write's look-ahead ends with its batch, however
    # the batches arrived.
    verify kill9 "SIGKILL mid-load, restart read ${context:-0} exported batches as context and replayed ${replayed:-0}" \
      0/0/0 "$RUN/reference-kill9.jsonl" 0
    stop_kascade a
    ;;
  oversized)
    log "oversized: three 1.5 MB ConfigMap updates and 50 small creates in one batch"
    start_kascade a 31090 31091
    env KASCADE_URLS="${WEBHOOK[a]}" FAULT_NS="f-oversized-" FAULT_ACCEPTED="$RUN/accepted-oversized.tsv" \
      "${LOAD[@]}" -- oversized >"$RUN/load-oversized.out" 2>>"$RUN/load-oversized.log"
    verify oversized "one batch over Jaeger's 4 MiB request limit" 0/0/0
    stop_kascade a
    ;;
  etcd)
    log "etcd: two replicas share a span cache on etcd; etcd paused 3s, one replica killed -9 and restarted, then etcd killed"
    "$BIN/etcd" --name faults --data-dir "$RUN/etcd" --listen-client-urls "$ETCD_URL" --advertise-client-urls "$ETCD_URL" \
      --listen-peer-urls http://127.0.0.1:31380 --initial-advertise-peer-urls http://127.0.0.1:31380 \
      --initial-cluster faults=http://127.0.0.1:31380 >>"$RUN/etcd.log" 2>&1 &
    EPID=$!
    wait_until "etcd" 60 curl -sf "$ETCD_URL/health"
    start_kascade a 31090 31091 --etcd-endpoints "$ETCD_URL"
    start_kascade b 31092 31093 --etcd-endpoints "$ETCD_URL"
    load etcd "${WEBHOOK[a]},${WEBHOOK[b]}" BENCH_SENDERS=4
    wait_until "the first accepted batches" 120 at_least "$RUN/accepted-etcd.tsv" 2000
    kill -STOP "$EPID"; sleep 3; kill -CONT "$EPID" # the fault: etcd does not answer for 3 s
    wait_until "more accepted batches" 120 at_least "$RUN/accepted-etcd.tsv" 4000
    # A replica dies between reserving object windows in etcd and exporting
    # their spans; its restart replays the spool and emits them again.
    kill -9 "${KPID[a]}"; wait "${KPID[a]}" 2>/dev/null || true
    start_kascade a 31090 31091 --etcd-endpoints "$ETCD_URL"
    wait_until "more accepted batches" 120 at_least "$RUN/accepted-etcd.tsv" 6000
    kill -9 "$EPID"; wait "$EPID" 2>/dev/null || true; EPID=""
    finish_load
    replayed="$(metric a kascade_spool_replayed_batches_total)"
    # Without etcd both replicas decide alone: the links of objects written
    # through both while it is gone go out from each (measured 8,901-9,262;
    # 20,160-20,885 before links went out once per process).
    verify etcd "two replicas; etcd paused 3 s; replica a killed -9 and restarted (replayed ${replayed:-0} batches); etcd killed" 0/0/15000
    stop_kascade a; stop_kascade b
    ;;
  searches)
    # The read side under a burst: the load's Deployments stored in the raw
    # Jaeger, then kascade frontend over it (its HTTP API) behind a Jaeger
    # query tier (the UI's API, e2e/jaeger/query.yaml), as deployed.
    log "searches: 200 searches at once (100 identical, 100 different) through the Jaeger query tier to kascade frontend"
    start_kascade a 31090 31091
    load searches "${WEBHOOK[a]}" BENCH_SENDERS=2 BENCH_COPIES=110 # 101 namespaces are searched
    finish_load
    verify searches "the spans the burst of searches reads"
    stop_kascade a
    "$KASCADE" frontend --grpc-listen 127.0.0.1:31094 --http-listen 127.0.0.1:31095 \
      --jaeger-url "$JAEGER_URL" --raw-service "$SERVICE" --default-cluster faults >>"$RUN/frontend.log" 2>&1 &
    FPID=$!
    JAEGER_BIND_HOST=127.0.0.1 JAEGER_QUERY_HTTP_PORT=31096 JAEGER_QUERY_GRPC_PORT=31097 JAEGER_HEALTH_PORT=31098 \
      JAEGER_OTLP_GRPC_PORT=31099 KASCADE_FRONTEND_GRPC=127.0.0.1:31094 \
      "$BIN/jaeger" --config "file:$ROOT/e2e/jaeger/query.yaml" >>"$RUN/jaeger-query.log" 2>&1 &
    QPID=$!
    wait_until "kascade frontend" 60 curl -sf http://127.0.0.1:31095/readyz
    wait_until "the Jaeger query tier" 60 curl -sf http://127.0.0.1:31096/api/services
    rc=0
    out="$(python3 "$ROOT/e2e/faults/searches.py" http://127.0.0.1:31096 http://127.0.0.1:31095 "$FPID" \
      "$RUN/accepted-searches.tsv" 2>>"$RUN/searches.log")" || rc=$?
    log "searches: $out"
    ROWS+=("| searches | - | - | - | - | - | - | $out |")
    if [[ $rc -ne 0 ]]; then failed=1; cat "$RUN/searches.log" >&2; fi
    kill "$QPID" "$FPID" 2>/dev/null || true; wait "$QPID" "$FPID" 2>/dev/null || true; QPID=""; FPID=""
    ;;
  limits)
    # The bound docs/configuration.md states for --max-intake-bytes at its default (512 MiB
    # of bodies, plus per decoding batch its copy and decoded events) and
    # the process's own ≈ 200 MiB.
    log "limits: a body of 20,000 '[', 600 idle connections, 80 concurrent 30 MiB bodies"
    start_kascade a 31090 31091
    rc=0
    out="$(python3 "$ROOT/e2e/faults/limits.py" "${WEBHOOK[a]}" "${ADMIN[a]}" "${KPID[a]}" 1536 2>>"$RUN/limits.log")" || rc=$?
    log "limits: $out"
    ROWS+=("| limits | - | - | - | - | - | - | $out |")
    if [[ $rc -ne 0 ]]; then failed=1; cat "$RUN/limits.log" >&2; fi
    stop_kascade a
    ;;
  *) log "unknown scenario $s"; exit 2 ;;
  esac
done

echo "| scenario | answered 200 | stored in Jaeger | lost | windows without object span | duplicate write/object/link spans | refused (retried) | fault |"
echo "|---|---|---|---|---|---|---|---|"
printf '%s\n' "${ROWS[@]}"
exit $failed
