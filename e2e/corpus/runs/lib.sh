# Shared by the corpus runs (e2e/corpus/runs/*.sh), which e2e/corpus/capture.sh
# starts against a fresh cluster with KASCADE_E2E_ENV, CORPUS_RUN,
# CORPUS_PORT_BASE and CORPUS_WORK set. Gives the scenarios' helpers (k,
# fresh_namespace) and:
#   scenario NAME          runs e2e/scenarios/NAME.sh against this cluster
#   together LABEL CMD...  starts CMD in the background; join waits for all
#   join                   fails (naming which) if any of them failed
#   wait_until SECS DESCRIPTION CMD...   polls CMD (0.5 s) until it succeeds
#   wait_event SECS NS REASON [KIND [NAME]]   until such an Event exists
#   keep_running PID       a helper process the run started (webhook,
#                          controller): capture.sh stops it after the log is taken
#   fail MESSAGE           names the run and exits 1
# shellcheck shell=bash
: "${KASCADE_E2E_ENV:?run me through e2e/corpus/capture.sh}" "${CORPUS_RUN:?}" "${CORPUS_WORK:?}" "${CORPUS_PORT_BASE:?}"
CORPUS_RUNS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
E2E_DIR="$(cd "$CORPUS_RUNS_DIR/../.." && pwd)"
# shellcheck source=../../scenarios/lib.sh
source "$E2E_DIR/scenarios/lib.sh"
say() { printf '[run %s %s] %s\n' "$CORPUS_RUN" "$(date +%H:%M:%S)" "$*" >&2; }
fail() { say "FAILED: $*"; exit 1; }

scenario() {
  say "scenario $1"
  "$E2E_DIR/scenarios/$1.sh" || fail "scenario $1 exited $?"
}

_bg_pids=(); _bg_labels=()
together() {
  local label="$1"; shift
  "$@" &
  _bg_pids+=("$!"); _bg_labels+=("$label")
}
join() {
  local i rc=0
  for i in "${!_bg_pids[@]}"; do
    if ! wait "${_bg_pids[$i]}"; then say "FAILED: ${_bg_labels[$i]} (run in parallel)"; rc=1; fi
  done
  _bg_pids=(); _bg_labels=()
  (( rc == 0 )) || fail "a parallel part failed"
}

wait_until() {
  local secs="$1" what="$2"; shift 2
  local deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    (( SECONDS < deadline )) || fail "no $what after ${secs}s"
    sleep 0.5
  done
  say "$what: ok"
}

_has_event() {
  local ns="$1" reason="$2" kind="${3:-}" name="${4:-}" sel
  sel="reason=$reason"
  [[ -z "$kind" ]] || sel+=",involvedObject.kind=$kind"
  [[ -z "$name" ]] || sel+=",involvedObject.name=$name"
  k get events -n "$ns" --field-selector "$sel" -o name 2>/dev/null | grep -q .
}
wait_event() {
  local secs="$1"; shift
  wait_until "$secs" "$2 Event${3:+ on a $3}${4:+ $4} in namespace $1" _has_event "$@"
}

keep_running() { echo "$1" >>"$CORPUS_WORK/pids"; }

# audit_has PYTHON_EXPR: some audit event (ev, a dict) of the log so far
# satisfies the expression, e.g. 'ev["verb"] == "create" and code(ev) == 403'.
audit_has() {
  python3 - "$AUDIT_LOG" "$1" <<'PY'
import json, sys
def code(ev): return (ev.get("responseStatus") or {}).get("code")
def ref(ev): return ev.get("objectRef") or {}
expr = compile(sys.argv[2], "expr", "eval")
with open(sys.argv[1]) as f:
    for line in f:
        try: ev = json.loads(line)
        except ValueError: continue
        if eval(expr): sys.exit(0)
sys.exit(1)
PY
}

# sa_kubeconfig NS SA FILE: a kubeconfig acting as service account NS/SA
# (a token from the TokenRequest API, one hour).
sa_kubeconfig() {
  local ns="$1" sa="$2" file="$3" token
  token="$(k create token "$sa" -n "$ns" --duration=1h)"
  # shellcheck source=../../pki.sh
  source "$E2E_DIR/pki.sh"
  pki_kubeconfig "$file" "$CLUSTER_NAME" "$APISERVER_URL" "$KASCADE_E2E_RUN_DIR/pki/ca.crt" "$ns-$sa" "$token"
}
