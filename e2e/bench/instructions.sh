#!/usr/bin/env bash
# Instructions per audit event, counted by valgrind's callgrind (exact and
# repeatable on a noisy machine, unlike time): `kascade replay` with one
# worker over the deployment fixture copied into BENCH_NAMESPACES namespaces
# (default 150 ≈ 20,100 audit events; Events left out, as the load generator
# does). Prints one line: instructions, events, instructions per event.
#   KASCADE_BIN   the binary to measure (default: a dist-profile build of this tree)
#   BENCH_NAMESPACES  copies of the fixture
#   BENCH_COPY_SPACING_MS  0 (default): every copy at the fixture's times, one
#                 after the other; N: copy i happens i × N ms after the first
#                 and the log is in time order, the copies overlapping (as
#                 e2e/bench/collect.sh sends them)
#   BENCH_OMIT_MANAGED_FIELDS  1: the objects without metadata.managedFields,
#                 as an audit policy with omitManagedFields: true logs them
#   BENCH_OUTPUT  otlp-json (default: spans written as OTLP/JSON to a file) or
#                 otlp (the collector's protobuf writer, exported over gRPC to
#                 the harness's Jaeger with a discarding pipeline; spans are
#                 then not counted)
#   CALLGRIND_OUT keep callgrind's profile there (for callgrind_annotate)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
KASCADE_BIN="${KASCADE_BIN:-$ROOT/target/dist/kascade}"
[[ "$KASCADE_BIN" != "$ROOT/target/dist/kascade" ]] || (cd "$ROOT" && cargo build --profile dist --locked --bin kascade >&2)
command -v valgrind >/dev/null || { echo "valgrind is needed (apt-get install valgrind)" >&2; exit 1; }
RUN="$(mktemp -d)"
trap 'rm -rf "$RUN"' EXIT
# shellcheck source=/dev/null
source "$ROOT/e2e/bench/load-log.sh"
write_load_log "$RUN/load.log" "${BENCH_NAMESPACES:-150}" "${BENCH_COPY_SPACING_MS:-0}"
events=$(wc -l <"$RUN/load.log")
output=(--output "otlp-json=$RUN/out.json")
if [[ "${BENCH_OUTPUT:-otlp-json}" == otlp ]]; then
  BIN="$("$ROOT/e2e/build.sh" all | sed -n 's/^KASCADE_E2E_BIN=//p')"
  # A sink already there is another run's: this run's would not start, and
  # would export to that one until it ends (its retries then counted here).
  if curl -sf http://127.0.0.1:29433/status >/dev/null 2>&1; then
    echo "port 29433 answers already (another instructions.sh with BENCH_OUTPUT=otlp?): one run at a time" >&2
    exit 1
  fi
  JAEGER_OTLP_GRPC_PORT=29417 JAEGER_HEALTH_PORT=29433 \
    "$BIN/jaeger" --config "file:$ROOT/e2e/jaeger/sink.yaml" >"$RUN/jaeger.log" 2>&1 &
  JPID=$!
  trap 'kill $JPID 2>/dev/null || true; wait $JPID 2>/dev/null || true; rm -rf "$RUN"' EXIT
  deadline=$((SECONDS + 30))
  until curl -sf http://127.0.0.1:29433/status >/dev/null 2>&1; do
    (( SECONDS < deadline )) || { echo "Jaeger sink not ready" >&2; cat "$RUN/jaeger.log" >&2; exit 1; }; sleep 0.2
  done
  output=(--output otlp --otlp-endpoint http://127.0.0.1:29417)
fi
valgrind --tool=callgrind --callgrind-out-file="$RUN/callgrind.out" \
  "$KASCADE_BIN" replay --workers 1 "${output[@]}" "$RUN/load.log" \
  >"$RUN/replay.log" 2>"$RUN/valgrind.log" || { cat "$RUN/valgrind.log" "$RUN/replay.log" >&2; exit 1; }
[[ -z "${CALLGRIND_OUT:-}" ]] || cp "$RUN/callgrind.out" "$CALLGRIND_OUT"
instructions=$(sed -n 's/^summary: //p' "$RUN/callgrind.out")
spans=-
[[ ! -f "$RUN/out.json" ]] || spans=$(python3 -c "import json,sys; print(sum(len(ss['spans']) for l in open(sys.argv[1]) if l.strip() for rs in json.loads(l)['resourceSpans'] for ss in rs['scopeSpans']))" "$RUN/out.json")
echo "instructions=$instructions events=$events spans=$spans per_event=$((instructions / events))"
