# The 1-million-event bench log shared by e2e/bench/analyze.sh and
# e2e/bench/explain.sh: the deployment fixture (its Event writes left out,
# as the load generator sends it) copied into BENCH_NAMESPACES namespaces
# bench-0… (default 7700: 1,031,800 audit events). Sourced, not run; needs ROOT.
#   write_load_log PATH   writes it unless PATH already has content
write_load_log() {
  [[ ! -s "$1" ]] || return 0
  python3 - "$ROOT/e2e/fixtures/deployment/audit.log" "${BENCH_NAMESPACES:-7700}" >"$1" <<'PY'
import json, sys
lines = [l for l in open(sys.argv[1]) if l.strip()]
lines = [l for l in lines if (json.loads(l).get("objectRef") or {}).get("resource") != "events"]
out = sys.stdout
for i in range(int(sys.argv[2])):
    ns = f"bench-{i}"
    for l in lines:
        l = l.replace('"namespace":"default"', f'"namespace":"{ns}"').replace("/namespaces/default/", f"/namespaces/{ns}/")
        e = json.loads(l)
        e["auditID"] = f'{e["auditID"]}-{i}'
        out.write(json.dumps(e, separators=(",", ":")))
        out.write("\n")
PY
}
