#!/usr/bin/env bash
# Scale-out: two `kascade collect` replicas sharing a span cache on etcd.
#
#   1. the span cache's tests against a real etcd (tests/span_cache_etcd/,
#      ignored by plain `cargo test`);
#   2. a DEDICATED etcd (never the harness's: the apiserver uses that one) and
#      two replicas; the same real audit batch (e2e/fixtures/deployment) posted
#      to both at once under cluster `scaleout-<epoch>`: in Jaeger every object span and
#      every link span exists exactly once (read with raw_traces=true, since
#      Jaeger's query otherwise hides identical duplicates). A control pair (one
#      replica without etcd) must show duplicates, proving the check can see them;
#   3. etcd killed: another batch (e2e/fixtures/service, cluster
#      `scaleout-<epoch>-outage`) is still accepted (2xx) and exported by both replicas,
#      which log the fallback warning and report kascade_span_cache_fallback 1;
#   4. etcd restarted: the gauge returns to 0, the recovery is logged, and a
#      third batch (e2e/fixtures/config, `...-after`) is exactly-once again.
#
# Needs the env of `e2e/cluster.sh up` (KASCADE_E2E_BIN, KASCADE_E2E_RUN_DIR,
# JAEGER_OTLP_GRPC, JAEGER_QUERY_URL) and a static kascade (KASCADE_BIN,
# default the one e2e/static-kascade.sh builds). e2e/suite.sh runs it; alone:
#
#   e2e/cluster.sh up --name scaleout --port-base 29000
#   source e2e/.run-scaleout/env && e2e/static-kascade.sh
#   e2e/scale-out.sh
#   e2e/cluster.sh down --name scaleout
#
# KASCADE_SCALEOUT_RUST_TESTS=0 skips step 1.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# The build of tests/span_cache_etcd/ (e2e/profile.sh; KASCADE_STATIC_PROFILE).
# shellcheck source=e2e/profile.sh
source "$ROOT/e2e/profile.sh"
started=$SECONDS
log() { printf '[scale-out %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
pass() { log "PASS: $*"; }
fail() { log "FAIL: $*"; exit 1; }

for v in KASCADE_E2E_BIN KASCADE_E2E_RUN_DIR JAEGER_OTLP_GRPC JAEGER_QUERY_URL; do
  [[ -n "${!v:-}" ]] || fail "$v is not set: source the env written by e2e/cluster.sh up"
done
KASCADE_BIN="${KASCADE_BIN:-$E2E_OUT/kascade}"
[[ -x "$KASCADE_BIN" ]] || fail "no kascade binary at $KASCADE_BIN (e2e/static-kascade.sh builds it, or set KASCADE_BIN)"
ETCD_BIN="$KASCADE_E2E_BIN/etcd"
[[ -x "$ETCD_BIN" ]] || fail "no etcd at $ETCD_BIN (e2e/build.sh etcd)"
DIR="$KASCADE_E2E_RUN_DIR/scale-out"
# Span ids are derived from (cluster, object, window): each run posts under
# its own cluster names, so a rerun against the same Jaeger starts clean. The
# replicas export as service kascade-scaleout, so the suite's own searches
# (service kascade, tests/e2e/; the frontend) never see these spans.
RUN="scaleout-$(date +%s)"
rm -rf "$DIR"; mkdir -p "$DIR"

plain() { sed 's/\x1b\[[0-9;]*m//g'; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ETCD_PORT=$(free_port); ETCD_PEER_PORT=$(free_port)
ETCD_URL="http://127.0.0.1:$ETCD_PORT"
declare -A LISTEN ADMIN PID
for r in a b control; do LISTEN[$r]=$(free_port); ADMIN[$r]=$(free_port); PID[$r]=""; done
ETCD_PID=""

cleanup() {
  local rc=$? r
  for r in a b control; do
    if [[ -n "${PID[$r]}" ]] && kill -0 "${PID[$r]}" 2>/dev/null; then
      kill -TERM "${PID[$r]}" 2>/dev/null || true
      wait "${PID[$r]}" 2>/dev/null || true
    fi
  done
  if [[ -n "$ETCD_PID" ]] && kill -0 "$ETCD_PID" 2>/dev/null; then
    kill -TERM "$ETCD_PID" 2>/dev/null || true
    wait "$ETCD_PID" 2>/dev/null || true
  fi
  if [[ $rc -ne 0 ]]; then
    for f in "$DIR"/*.log; do
      [[ -f "$f" ]] || continue
      echo "----- tail of $f -----" >&2; tail -n 20 "$f" >&2
    done
  fi
  log "finished in $((SECONDS - started))s (exit $rc)"
  exit $rc
}
trap cleanup EXIT

# ---------------------------------------------------------------- 1. cargo tests
if [[ "${KASCADE_SCALEOUT_RUST_TESTS:-1}" != 0 ]]; then
  log "span cache tests against a real etcd (tests/span_cache_etcd/)"
  if KASCADE_E2E_BIN="$KASCADE_E2E_BIN" cargo test "${E2E_CARGO_PROFILE[@]}" --locked --test span_cache_etcd -- --ignored \
      >"$DIR/cargo-test.log" 2>&1; then
    grep -E '^test |^test result' "$DIR/cargo-test.log" >&2 || true
    pass "tests/span_cache_etcd/ against etcd $("$ETCD_BIN" --version | sed -n 's/^etcd Version: //p')"
  else
    tail -n 40 "$DIR/cargo-test.log" >&2
    fail "tests/span_cache_etcd/"
  fi
fi

# ---------------------------------------------------------------- helpers
start_etcd() {
  # etcd takes ETCD_* variables as flags; the harness env has ETCD_ENDPOINT.
  local clean=(env) v
  while read -r v; do clean+=(-u "$v"); done < <(compgen -e | grep '^ETCD_' || true)
  "${clean[@]}" "$ETCD_BIN" --name scaleout --data-dir "$DIR/etcd" \
    --listen-client-urls "$ETCD_URL" --advertise-client-urls "$ETCD_URL" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "scaleout=http://127.0.0.1:$ETCD_PEER_PORT" --unsafe-no-fsync --log-level warn \
    >>"$DIR/etcd.log" 2>&1 &
  ETCD_PID=$!
  local deadline=$((SECONDS + 30))
  until curl -sf "$ETCD_URL/health" >/dev/null; do
    kill -0 "$ETCD_PID" 2>/dev/null || fail "the dedicated etcd exited (see $DIR/etcd.log)"
    (( SECONDS < deadline )) || fail "the dedicated etcd is not healthy after 30s"
    sleep 0.2
  done
}

# The harness env exports KASCADE_TLS_* and more, which `collect` reads: the
# replicas get none of it (plain HTTP, every setting from the command line).
CLEAN_ENV=(env)
while read -r v; do CLEAN_ENV+=(-u "$v"); done < <(compgen -e | grep -E '^(KASCADE_|OTEL_)' || true)

# start_replica NAME [extra collect flags...]
start_replica() {
  local r="$1"; shift
  "${CLEAN_ENV[@]}" "$KASCADE_BIN" collect --listen "127.0.0.1:${LISTEN[$r]}" --admin-listen "127.0.0.1:${ADMIN[$r]}" \
    --cluster scaleout --otlp-endpoint "$JAEGER_OTLP_GRPC" --export-batch-timeout 200ms \
    --service-name kascade-scaleout --spool-dir "$DIR/spool-$r" "$@" \
    >"$DIR/replica-$r.log" 2>&1 &
  PID[$r]=$!
}

wait_ready() {
  local r="$1" deadline=$((SECONDS + 30))
  until curl -sf "http://127.0.0.1:${ADMIN[$r]}/readyz" >/dev/null; do
    kill -0 "${PID[$r]}" 2>/dev/null || fail "replica $r exited (see $DIR/replica-$r.log)"
    (( SECONDS < deadline )) || fail "replica $r not ready after 30s"
    sleep 0.2
  done
}

# metric REPLICA NAME: the value of an unlabelled metric (0 when absent).
metric() {
  curl -sf "http://127.0.0.1:${ADMIN[$1]}/metrics" | awk -v m="$2" '$1 == m { v = $2 } END { print (v == "" ? 0 : v) + 0 }'
}

# The webhook body of a fixture: its audit log lines as an audit.k8s.io/v1 EventList.
body() {
  local out="$DIR/body-$1.json"
  { printf '{"kind":"EventList","apiVersion":"audit.k8s.io/v1","metadata":{},"items":['
    paste -sd, "e2e/fixtures/$1/audit.log"
    printf ']}'; } >"$out"
  echo "$out"
}

# post_both FIXTURE CLUSTER REPLICA...: posts the batch to every replica at once;
# fails unless each answers 2xx.
post_both() {
  local fixture="$1" cluster="$2"; shift 2
  local b r code posts=(); b="$(body "$fixture")"
  for r in "$@"; do
    curl -s -o "$DIR/post-$r.out" -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
      --data-binary "@$b" "http://127.0.0.1:${LISTEN[$r]}/audit/$cluster" >"$DIR/post-$r.code" &
    posts+=($!)
  done
  wait "${posts[@]}" || true
  for r in "$@"; do
    code="$(cat "$DIR/post-$r.code")"
    [[ "$code" == 2* ]] || fail "replica $r answered $code to the $fixture batch: $(cat "$DIR/post-$r.out")"
  done
  pass "replicas $* accepted the $fixture batch ($(wc -l <"e2e/fixtures/$fixture/audit.log") events) for cluster $cluster"
}

# expected FIXTURE CLUSTER: what one kascade alone makes of the batch (OTLP/JSON).
expected() {
  local out="$DIR/expected-$2.jsonl"
  "${CLEAN_ENV[@]}" "$KASCADE_BIN" replay --cluster "$2" --output "otlp-json=$out" "e2e/fixtures/$1/audit.log" 2>>"$DIR/replay.log" \
    || fail "kascade replay of $1"
  echo "$out"
}

# check MODE EXPECTED.jsonl: reads every expected raw trace from Jaeger (no
# query-side deduplication) and counts object spans by span id, link spans
# by their link.* tags.
#   once     every expected object/link span is stored exactly once
#   dupes    every one is stored, and every object span twice (the control)
#   present  every one is stored at least once
check() {
  python3 - "$1" "$2" "$JAEGER_QUERY_URL" <<'PY'
import json, sys, time, urllib.error, urllib.request
mode, expected_path, jaeger = sys.argv[1:4]

def kind_of(span):
    for a in span.get("attributes", []):
        if a["key"] == "kascade.span":
            return a["value"].get("stringValue")

# A link span's id hashes its start (the write that found the link), which
# depends on which replica reserved it first: a link is known by its trace
# and its link.* tags.
def key_of(kind, span):
    if kind == "link":
        tags = sorted(
            (a["key"], a["value"].get("stringValue", ""))
            for a in span.get("attributes", [])
            if a["key"].startswith("link.")
        )
        return (kind, span["traceId"].lower(), tuple(tags))
    return (kind, span["traceId"].lower(), span["spanId"].lower())

# An object span sent before the object's uid was known (its window's first
# write had none) is sent again with it: a copy is a duplicate only if it
# also matches in carrying the uid. (Whether the first send had the uid
# depends on which worker reached the object first.)
def has_uid(span):
    return any(a["key"] == "uid" for a in span.get("attributes", []))

expected, traces = set(), set()
for line in open(expected_path):
    for rs in json.loads(line)["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for s in ss["spans"]:
                k = kind_of(s)
                if k in ("object", "link"):
                    expected.add(key_of(k, s))
                    traces.add(s["traceId"].lower())

def stored():
    counts, sends = {}, {}
    for tid in sorted(traces):
        try:
            with urllib.request.urlopen(f"{jaeger}/api/v3/traces/{tid}?raw_traces=true", timeout=10) as r:
                d = json.load(r)
        except urllib.error.HTTPError as e:
            if e.code == 404:
                continue
            raise
        for rs in d.get("result", {}).get("resourceSpans", []):
            for ss in rs.get("scopeSpans", []):
                for s in ss.get("spans", []):
                    k = kind_of(s)
                    if k in ("object", "link"):
                        key = key_of(k, s)
                        counts[key] = counts.get(key, 0) + 1
                        send = key + (has_uid(s),)
                        sends[send] = sends.get(send, 0) + 1
    return counts, sends

n_obj = sum(1 for e in expected if e[0] == "object")
n_link = len(expected) - n_obj
deadline = time.time() + 90
while True:
    counts, sends = stored()
    missing = [e for e in expected if counts.get(e, 0) == 0]
    dupes = {e: c for e, c in counts.items() if c > 1}
    obj_dupes = [e for e in dupes if e[0] == "object"]
    done = not missing and (mode != "dupes" or len(obj_dupes) == n_obj)
    if done or time.time() > deadline:
        break
    time.sleep(1)
if missing:
    print(f"{len(missing)} of {len(expected)} expected spans never reached Jaeger, e.g. {missing[:3]}")
    sys.exit(1)
if mode == "once":
    time.sleep(3)  # both replicas have exported by now; look once more for late copies
    counts, sends = stored()
    dupes = {e: c for e, c in sends.items() if c > 1}
    if dupes:
        print(f"{len(dupes)} spans stored more than once, e.g. {list(dupes.items())[:3]}")
        sys.exit(1)
    print(f"{n_obj} object spans and {n_link} link spans in {len(traces)} traces, each exactly once")
elif mode == "dupes":
    if len(obj_dupes) < n_obj:
        print(f"only {len(obj_dupes)} of {n_obj} object spans stored twice although the control replicas do not share a cache")
        sys.exit(1)
    print(f"all {n_obj} object spans stored twice, as expected without a shared cache: the check sees duplicates")
else:
    print(f"all {n_obj} object spans and {n_link} link spans stored (duplicates allowed: {len(dupes)})")
PY
}

# ---------------------------------------------------------------- 2. exactly once
log "dedicated etcd on $ETCD_URL"
start_etcd
# A killed etcd refuses connections: retried for 2 s (not the default 10 s)
# before the replicas fall back, to keep the outage phase short.
ETCD_FLAGS=(--etcd-endpoints "$ETCD_URL" --etcd-timeout 500ms --etcd-retry-for 2s --etcd-probe-interval 1s)
start_replica a "${ETCD_FLAGS[@]}"
start_replica b "${ETCD_FLAGS[@]}"
start_replica control
for r in a b control; do wait_ready "$r"; done
log "replicas a (:${LISTEN[a]}), b (:${LISTEN[b]}) share etcd; control (:${LISTEN[control]}) does not"
t0=$SECONDS
for r in a b; do
  deadline=$((SECONDS + 10))
  until grep -q "span cache shared with other replicas through etcd" "$DIR/replica-$r.log"; do
    (( SECONDS < deadline )) || fail "replica $r did not log that its span cache is shared"
    sleep 0.2
  done
done

post_both deployment "$RUN" a b
exp="$(expected deployment "$RUN")"
out="$(check once "$exp")" || fail "exactly once: $out"
pass "two replicas fed the same batch: $out"
keys=$(curl -sf -X POST "$ETCD_URL/v3/kv/range" \
  -d "{\"key\":\"$(printf '/kascade/spans/' | base64)\",\"range_end\":\"$(printf '/kascade/spans0' | base64)\",\"count_only\":true}" \
  | python3 -c 'import json,sys; print(json.load(sys.stdin).get("count", 0))')
log "etcd holds $keys span cache keys under /kascade/spans/"
[[ "$keys" -gt 0 ]] || fail "no key under /kascade/spans/ in etcd"

post_both deployment "$RUN-control" a control
exp="$(expected deployment "$RUN-control")"
out="$(check dupes "$exp")" || fail "control: $out"
pass "control (one replica without etcd): $out"
log "exactly-once phase took $((SECONDS - t0))s"

# ---------------------------------------------------------------- 3. etcd killed
t0=$SECONDS
exported_before_a=$(metric a 'kascade_spans_exported_total{output="otlp"}')
exported_before_b=$(metric b 'kascade_spans_exported_total{output="otlp"}')
log "killing the dedicated etcd (pid $ETCD_PID)"
kill -KILL "$ETCD_PID"; wait "$ETCD_PID" 2>/dev/null || true; ETCD_PID=""
post_both service "$RUN-outage" a b
exp="$(expected service "$RUN-outage")"
out="$(check present "$exp")" || fail "export during the outage: $out"
pass "during the outage: $out"
for r in a b; do
  deadline=$((SECONDS + 10))
  until [[ "$(metric "$r" kascade_span_cache_fallback)" == 1 ]]; do
    (( SECONDS < deadline )) || fail "replica $r does not report kascade_span_cache_fallback 1"
    sleep 0.2
  done
  line="$(grep -m1 'FALLING BACK' "$DIR/replica-$r.log" | plain | cut -c1-300)" || fail "replica $r logged no fallback warning"
  [[ "$(grep -c 'FALLING BACK' "$DIR/replica-$r.log")" == 1 ]] || fail "replica $r warned more than once"
  local_res=$(metric "$r" kascade_span_cache_local_reservations_total)
  errors=$(curl -sf "http://127.0.0.1:${ADMIN[$r]}/metrics" | awk '$1 ~ /^kascade_span_cache_etcd_errors_total/ { s += $2 } END { print s + 0 }')
  (( local_res > 0 && errors > 0 )) || fail "replica $r: local reservations $local_res, etcd errors $errors"
  pass "replica $r falls back: kascade_span_cache_fallback 1, $local_res local reservations, $errors etcd errors, logged once: $line"
done
(( $(metric a 'kascade_spans_exported_total{output="otlp"}') > exported_before_a )) || fail "replica a exported nothing during the outage"
(( $(metric b 'kascade_spans_exported_total{output="otlp"}') > exported_before_b )) || fail "replica b exported nothing during the outage"
pass "both replicas exported spans while etcd was down"
log "outage phase took $((SECONDS - t0))s"

# ---------------------------------------------------------------- 4. etcd back
t0=$SECONDS
log "restarting the dedicated etcd"
start_etcd
for r in a b; do
  deadline=$((SECONDS + 20))
  until [[ "$(metric "$r" kascade_span_cache_fallback)" == 0 ]]; do
    (( SECONDS < deadline )) || fail "replica $r still falls back 20s after etcd returned"
    sleep 0.2
  done
  grep -q 'reachable again' "$DIR/replica-$r.log" || fail "replica $r did not log the recovery"
  pass "replica $r recovered after $((SECONDS - t0))s: $(grep -m1 'reachable again' "$DIR/replica-$r.log" | plain | cut -c1-300)"
done
post_both config "$RUN-after" a b
exp="$(expected config "$RUN-after")"
out="$(check once "$exp")" || fail "exactly once after the recovery: $out"
pass "after the recovery: $out"
log "recovery phase took $((SECONDS - t0))s"
pass "scale-out: exactly one object span per (object, window) across replicas; etcd outage survived"
