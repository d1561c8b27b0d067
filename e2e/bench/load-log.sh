# The bench audit log shared by e2e/bench/analyze.sh, e2e/bench/explain.sh and
# e2e/bench/instructions.sh: the deployment fixture (its Event writes left
# out, as the load generator sends it) copied into namespaces bench-0…
# Sourced, not run; needs ROOT.
#   write_load_log PATH COPIES SPACING_MS
#     writes it unless PATH already has content. SPACING_MS 0: every copy at
#     the fixture's times, one after the other; N: copy i happens i × N ms
#     after the first, and the log is in time order (stageTimestamp; ties in
#     copy order), the copies overlapping as e2e/bench/collect.sh sends them.
#     BENCH_OMIT_MANAGED_FIELDS=1: the objects without metadata.managedFields,
#     as an apiserver whose policy sets omitManagedFields logs them.
write_load_log() {
  [[ ! -s "$1" ]] || return 0
  python3 - "$ROOT/e2e/fixtures/deployment/audit.log" "$2" "$3" "${BENCH_OMIT_MANAGED_FIELDS:-0}" >"$1" <<'PY'
import datetime, heapq, json, sys
FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"
lines = [l for l in open(sys.argv[1]) if l.strip()]
template = [json.loads(l) for l in lines]
template = [e for e in template if (e.get("objectRef") or {}).get("resource") != "events"]
if sys.argv[4] == "1":
    # k8s.io/apiserver's copyWithoutManagedFields: the objects, and a list's items.
    for e in template:
        for key in ("requestObject", "responseObject"):
            o = e.get(key)
            if not isinstance(o, dict):
                continue
            for x in [o] + [i for i in (o.get("items") or []) if isinstance(i, dict)]:
                if isinstance(x.get("metadata"), dict):
                    x["metadata"].pop("managedFields", None)
copies, spacing = int(sys.argv[2]), datetime.timedelta(milliseconds=float(sys.argv[3]))
stage = lambda e: datetime.datetime.strptime(e["stageTimestamp"], FORMAT)
if spacing:
    # Each copy is the fixture shifted, so each copy's stream is in time order
    # once the fixture is (a stable sort: ties keep the fixture's order), and
    # merging the copies' streams gives the whole log in order without
    # holding it in memory.
    template.sort(key=stage)
# Each fixture event as compact text (the namespace is replaced in it) and
# its stage time, once for all copies.
texts = [json.dumps(e, separators=(",", ":")) for e in template]
stages = [stage(e) for e in template]
def copy(i):
    ns = f"bench-{i}"
    for pos, l in enumerate(texts):
        l = l.replace('"namespace":"default"', f'"namespace":"{ns}"').replace("/namespaces/default/", f"/namespaces/{ns}/")
        e = json.loads(l)
        e["auditID"] = f'{e["auditID"]}-{i}'
        if spacing:
            for key in ("requestReceivedTimestamp", "stageTimestamp"):
                e[key] = (datetime.datetime.strptime(e[key], FORMAT) + spacing * i).strftime(FORMAT)
        yield (stages[pos] + spacing * i, i, pos), e
events = heapq.merge(*(copy(i) for i in range(copies))) if spacing else (x for i in range(copies) for x in copy(i))
out = sys.stdout
for _, e in events:
    out.write(json.dumps(e, separators=(",", ":")))
    out.write("\n")
PY
}
