#!/usr/bin/env bash
# The experiment of Ehira et al. 2023 ("Monitoring cascading changes",
# ../shared/reference, section IV) on the real harness: a Deployment with N
# Pods is added, and once every Pod is available, deleted; 10 repetitions for
# each N in 100, 200, 400. kascade collect receives the apiserver's audit
# webhook (and watches the cluster) throughout, as in e2e/suite.sh, while
# kascade's and the kube-apiserver's CPU time and RSS are sampled from /proc.
#
#   e2e/experiments/propagation.sh [--sizes "100 200 400"] [--reps 10] [--out DIR]
#
# Per size, one chunk under `flock /tmp/kascade-e2e.lock` (released between
# sizes so that other e2e runs interleave): a cluster of its own (name `exp`,
# port base 24000, NODES kwok nodes, default 4 as the paper's 4 workers),
# kascade on 127.0.0.1:24990/24991, REPS runs, then everything torn down.
# Written to DIR (default ~/.cache/kascade-e2e/experiments/propagation-<time>):
#   n<N>/r<R>.audit.log.gz  the run's audit log lines (writes in the run's
#                           namespace, unedited), for `kascade analyze`
#   runs.csv                per run: phase times (epoch seconds), audit lines
#   resources.csv           per sample: CPU seconds and RSS of kascade and
#                           the kube-apiserver (SAMPLE_INTERVAL, default 0.5 s)
#   kascade-n<N>.log        kascade's log of the chunk
# e2e/experiments/summarize.py DIR summarises the CSVs; e2e/experiments/analyze.sh
# DIR runs `kascade analyze` over the audit logs.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
E2E_DIR="$ROOT/e2e"
SELF="${BASH_SOURCE[0]}"
LOCK=/tmp/kascade-e2e.lock
NAME=exp
PORT_BASE=24000
KASCADE_LISTEN=127.0.0.1:24990
KASCADE_ADMIN=127.0.0.1:24991
NS=propagation
NODES="${NODES:-4}"
PODS_PER_NODE=110 # e2e/kwok/stages.yaml: allocatable pods of a kwok node
SAMPLE_INTERVAL="${SAMPLE_INTERVAL:-0.5}"
log() { printf '[propagation %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "$*"; exit 1; }
now() { date +%s.%N; }

# One chunk: `propagation.sh --chunk N REPS DIR`, run by the loop below under the lock.
run_chunk() {
  local n="$1" reps="$2" out="$3"
  local run_dir="$E2E_DIR/.run-$NAME"
  # Globals, not locals: the EXIT trap runs after this function returned.
  KPID=""; SAMPLER=""; CHUNK_OUT="$out"; CHUNK_N="$n"; CHUNK_RUN_DIR="$run_dir"
  cleanup_chunk() {
    local rc=$?
    [[ -z "$SAMPLER" ]] || kill "$SAMPLER" 2>/dev/null || true
    if [[ -n "$KPID" ]] && kill -0 "$KPID" 2>/dev/null; then
      kill -TERM "$KPID" 2>/dev/null || true; wait "$KPID" 2>/dev/null || true
    fi
    [[ ! -f "$CHUNK_RUN_DIR/kascade.log" ]] || cp "$CHUNK_RUN_DIR/kascade.log" "$CHUNK_OUT/kascade-n$CHUNK_N.log"
    "$E2E_DIR/cluster.sh" down --name "$NAME" >/dev/null 2>&1 || log "cluster $NAME did not go down cleanly"
    exit $rc
  }
  trap cleanup_chunk EXIT
  "$E2E_DIR/cluster.sh" up --name "$NAME" --port-base "$PORT_BASE" \
    --audit-webhook-url "https://$KASCADE_LISTEN/audit/$NAME"
  # shellcheck source=/dev/null
  source "$run_dir/env"
  local k=("$KUBECTL")
  # The harness has 3 kwok nodes of 110 Pods; the paper's cluster had 4 workers.
  local i
  for ((i = 3; i < NODES; i++)); do
    awk '/^---/ {exit} /^apiVersion/ {p = 1} p' "$E2E_DIR/kwok/nodes.yaml" \
      | sed "s/kwok-node-0/kwok-node-$i/g; s/zone-0/zone-$i/"
    echo ---
  done | "${k[@]}" apply -f - >/dev/null
  "${k[@]}" wait --for=condition=Ready node --all --timeout=60s >/dev/null

  local kascade="${CARGO_TARGET_DIR:-$ROOT/target}/release/kascade"
  ( set -a; source "$ROOT/deploy/config/collect.env"; set +a
    exec "$kascade" collect --listen "$KASCADE_LISTEN" --admin-listen "$KASCADE_ADMIN" --cluster "$NAME" \
      --spool-dir "$run_dir/spool" \
      --webhook-token-file "$AUDIT_WEBHOOK_TOKEN_FILE" \
      --tls-cert-file "$KASCADE_TLS_CERT_FILE" --tls-key-file "$KASCADE_TLS_KEY_FILE" \
      --tls-client-ca-file "$KASCADE_TLS_CLIENT_CA_FILE" \
      --watch-cluster "$NAME=$KASCADE_KUBECONFIG" \
      --otlp-endpoint "$JAEGER_OTLP_GRPC"
  ) >"$run_dir/kascade.log" 2>&1 &
  KPID=$!
  local deadline=$((SECONDS + 60))
  until curl -sf "http://$KASCADE_ADMIN/readyz" >/dev/null; do
    kill -0 "$KPID" 2>/dev/null || die "kascade exited: see $run_dir/kascade.log"
    (( SECONDS < deadline )) || die "kascade not ready after 60s"
    sleep 0.2
  done
  local apid; apid="$(cat "$run_dir/pids/kube-apiserver.pid")"
  log "n=$n: cluster up with $NODES nodes; kascade pid $KPID, kube-apiserver pid $apid"
  "${k[@]}" get namespace "$NS" >/dev/null 2>&1 || "${k[@]}" create namespace "$NS" >/dev/null
  mkdir -p "$out/n$n"
  # Pods take a while per Pod on 2 busy cores; generous, not tight, limits.
  local timeout=$((120 + n))s
  local r
  for ((r = 1; r <= reps; r++)); do
    local dep; dep="$(printf 'prop-n%d-r%02d' "$n" "$r")"
    local offset; offset=$(stat -c %s "$AUDIT_LOG")
    sample "$n" "$r" "$KPID" "$apid" >>"$out/resources.csv" &
    SAMPLER=$!
    local t0 t1 t2 t3
    t0=$(now)
    "${k[@]}" create deployment "$dep" -n "$NS" --image=nginx:1.27 --replicas="$n" >/dev/null
    "${k[@]}" rollout status "deployment/$dep" -n "$NS" --timeout="$timeout" >/dev/null
    "${k[@]}" wait --for=jsonpath='{.status.availableReplicas}'="$n" "deployment/$dep" -n "$NS" --timeout=60s >/dev/null
    t1=$(now)
    t2=$(now)
    # Background propagation (kubectl's default): the Deployment goes at
    # once, the garbage collector deletes its ReplicaSet, then the Pods.
    "${k[@]}" delete deployment "$dep" -n "$NS" --wait --timeout="$timeout" >/dev/null
    "${k[@]}" wait --for=delete replicaset -l "app=$dep" -n "$NS" --timeout="$timeout" >/dev/null
    "${k[@]}" wait --for=delete pod -l "app=$dep" -n "$NS" --timeout="$timeout" >/dev/null
    t3=$(now)
    # A marker write: once it is in the audit log, so is everything before it.
    local marker="kascade-experiment-end-$dep-$RANDOM"
    "${k[@]}" annotate namespace "$NS" "kascade.io/experiment-end=$marker" --overwrite >/dev/null
    deadline=$((SECONDS + 60))
    until tail -c +"$((offset + 1))" "$AUDIT_LOG" | grep -qF "$marker"; do
      (( SECONDS < deadline )) || die "the audit log never showed the end marker of $dep"
      sleep 0.2
    done
    kill "$SAMPLER" 2>/dev/null || true; wait "$SAMPLER" 2>/dev/null || true; SAMPLER=""
    local lines
    lines=$(tail -c +"$((offset + 1))" "$AUDIT_LOG" \
      | python3 "$ROOT/e2e/experiments/slice.py" "$NS" "$marker" "$out/n$n/$(printf 'r%02d' "$r").audit.log.gz")
    printf '%s,%s,%s,%s,%s,%s,%s,%s\n' "$n" "$r" "$dep" "$t0" "$t1" "$t2" "$t3" "$lines" >>"$out/runs.csv"
    log "n=$n run $r/$reps: available after $(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", b - a}')s, deleted after $(awk -v a="$t2" -v b="$t3" 'BEGIN {printf "%.1f", b - a}')s; $lines audit lines"
  done
  # kascade must have taken every event: no failed webhook batch in the apiserver's log.
  if grep -qE 'audit.*(webhook|backend).*(fail|error)' "$run_dir/logs/kube-apiserver.log"; then
    log "WARNING: the apiserver logged audit webhook errors (see $run_dir/logs/kube-apiserver.log)"
    grep -E 'audit.*(webhook|backend).*(fail|error)' "$run_dir/logs/kube-apiserver.log" | tail -n 3 >&2
  fi
}

# sample N R KASCADE_PID APISERVER_PID: CSV rows every SAMPLE_INTERVAL until killed.
sample() {
  local n="$1" r="$2" kpid="$3" apid="$4" tck; tck=$(getconf CLK_TCK)
  local t kstat astat krss arss
  while :; do
    t=$(now)
    kstat="$(cat "/proc/$kpid/stat" 2>/dev/null)" || return 0
    astat="$(cat "/proc/$apid/stat" 2>/dev/null)" || return 0
    krss=$(awk '/^VmRSS/ {print $2}' "/proc/$kpid/status")
    arss=$(awk '/^VmRSS/ {print $2}' "/proc/$apid/status")
    # utime and stime are fields 14 and 15; fields after the ") " of comm start at 3.
    kstat="${kstat##*) }"; astat="${astat##*) }"
    awk -v n="$n" -v r="$r" -v t="$t" -v tck="$tck" -v ks="$kstat" -v as="$astat" -v kr="$krss" -v ar="$arss" 'BEGIN {
      split(ks, k, " "); split(as, a, " ")
      printf "%s,%s,%s,%.2f,%s,%.2f,%s\n", n, r, t, (k[12] + k[13]) / tck, kr, (a[12] + a[13]) / tck, ar }'
    sleep "$SAMPLE_INTERVAL"
  done
}

if [[ "${1:-}" == --chunk ]]; then
  shift; run_chunk "$@"; exit 0
fi

SIZES="${SIZES:-100 200 400}"
REPS="${REPS:-10}"
OUT="${OUT:-$HOME/.cache/kascade-e2e/experiments/propagation-$(date -u +%Y%m%dT%H%M%SZ)}"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --sizes) SIZES="$2"; shift 2 ;;
    --reps) REPS="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    *) die "unknown argument: $1 (usage: $0 [--sizes \"100 200 400\"] [--reps 10] [--out DIR])" ;;
  esac
done
[[ "$REPS" =~ ^[1-9][0-9]*$ ]] || die "--reps must be a positive number, got '$REPS'"
for n in $SIZES; do
  [[ "$n" =~ ^[1-9][0-9]*$ ]] || die "--sizes must be positive numbers, got '$n'"
  (( n <= NODES * PODS_PER_NODE )) || die "N=$n does not fit on $NODES kwok nodes of $PODS_PER_NODE Pods (set NODES)"
done
[[ "$OUT" != "$ROOT"/* ]] || die "--out $OUT is inside the repository; pick a directory outside it"
mkdir -p "$OUT"
[[ -f "$OUT/runs.csv" ]] || echo "n,rep,deployment,create_start,available,delete_start,deleted,audit_lines" >"$OUT/runs.csv"
[[ -f "$OUT/resources.csv" ]] || echo "n,rep,time,kascade_cpu_s,kascade_rss_kib,apiserver_cpu_s,apiserver_rss_kib" >"$OUT/resources.csv"
export NODES SAMPLE_INTERVAL
"$E2E_DIR/build.sh" all >/dev/null
log "building kascade (release)"
(cd "$ROOT" && cargo build --release --locked --bin kascade 2>&1 | tail -n 1 >&2)
for n in $SIZES; do
  log "n=$n: waiting for $LOCK"
  # -o: the lock is the flock process's alone, never inherited by the cluster.
  flock -o "$LOCK" bash "$SELF" --chunk "$n" "$REPS" "$OUT"
done
log "done: $OUT"
