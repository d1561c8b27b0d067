#!/usr/bin/env python3
"""Scores kascade's judgements on the corpus of whole-cluster runs.

For each run (e2e/corpus/RUN/audit.log.gz with its truth.yaml):
  explain  `kascade explain --format json --fail-on error` on the whole log
           (a traced run's apiserver traces given as --component-traces).
           A failing run is a hit when its first finding is on one of the
           truth's objects and its title matches the truth's title; a
           healthy run is a false alarm when explain reports any error
           (or --fail-on error exits non-zero).
  ui       each searched object's assembled trace (`kascade trace
           --format otlp-json`) in the five display modes. A healthy run's
           traces hold no span in error; a failing run's searched object is
           in error in every mode (the object span in tracing, tree,
           timeline and grouped; a cascade root in cascade).

Prints one row per run, then precision@1 over the failing runs and the
false-alarm runs among the healthy ones, for explain and the UI. Exits 1
unless precision@1 is 100 % and no healthy run raises a false alarm.

  score.py --kascade BIN [--json OUT] [RUN...]
"""

import argparse
import fnmatch
import gzip
import json
import os
import re
import concurrent.futures
import subprocess
import sys

import yaml

CORPUS = os.path.dirname(os.path.abspath(__file__))
MODES = ["tracing", "tree", "timeline", "grouped", "cascade"]
ERROR = {2, "STATUS_CODE_ERROR"}


def load_truth(run):
    path = os.path.join(CORPUS, run, "truth.yaml")
    with open(path) as f:
        truth = yaml.safe_load(f)
    verdict = truth.get("verdict")
    if verdict not in ("failing", "healthy"):
        sys.exit(f"{path}: verdict must be failing or healthy, not {verdict!r}")
    if verdict == "failing":
        cause = truth.get("cause") or {}
        if not cause.get("objects") or not cause.get("title"):
            sys.exit(f"{path}: a failing run's cause needs objects and title")
    if not truth.get("searched"):
        sys.exit(f"{path}: searched must name at least one object")
    return truth


def runs(selected):
    names = selected or sorted(
        d for d in os.listdir(CORPUS)
        if os.path.isfile(os.path.join(CORPUS, d, "truth.yaml"))
    )
    for name in names:
        if not os.path.isfile(os.path.join(CORPUS, name, "audit.log.gz")):
            sys.exit(f"{name}: no {os.path.join(CORPUS, name, 'audit.log.gz')}")
    return names


def run_logs(run):
    """A run's audit logs: audit.log.gz, then one per further apiserver
    (audit-2.log.gz, …), all given to kascade at once as CI would."""
    d = os.path.join(CORPUS, run)
    rest = sorted(f for f in os.listdir(d)
                  if f.startswith("audit-") and f.endswith(".log.gz"))
    return [os.path.join(d, "audit.log.gz")] + [os.path.join(d, f) for f in rest]


def component_traces(run):
    """A traced run's apiserver traces (runs/RUN.traced), as explain's
    --component-traces; [] for the others."""
    path = os.path.join(CORPUS, run, "apiserver-traces.jsonl.gz")
    return ["--component-traces", path] if os.path.isfile(path) else []


def explain(kascade, logs, extra=()):
    p = subprocess.run(
        [kascade, "explain", *logs, *extra, "--format", "json", "--fail-on", "error"],
        capture_output=True, text=True,
    )
    if p.returncode not in (0, 3):
        sys.exit(f"kascade explain {' '.join(logs)} failed ({p.returncode}): {p.stderr.strip()}")
    return json.loads(p.stdout), p.returncode


def parse_object(text):
    """'deployments ns/name' or 'nodes name' → (resource, namespace, name)."""
    resource, _, rest = text.partition(" ")
    namespace, _, name = rest.rpartition("/")
    return resource, namespace, name


def trace(kascade, logs, obj, mode):
    resource, namespace, name = parse_object(obj)
    p = subprocess.run(
        [kascade, "trace", *logs, "--resource", resource, "--namespace", namespace,
         "--name", name, "--format", "otlp-json", "--mode", mode],
        capture_output=True, text=True,
    )
    if p.returncode != 0:
        # A trace that cannot be assembled fails the check, and says why.
        return {"error": p.stderr.strip().splitlines()[-1] if p.stderr.strip() else f"exit {p.returncode}"}
    return json.loads(p.stdout)


def spans(doc):
    for rs in doc.get("resourceSpans") or []:
        for ss in rs.get("scopeSpans") or []:
            yield from ss.get("spans") or []


def attr(span, key):
    for kv in span.get("attributes") or []:
        if kv.get("key") == key:
            v = kv.get("value") or {}
            return v.get("stringValue")
    return None


def in_error(span):
    return (span.get("status") or {}).get("code") in ERROR


def object_span_in_error(doc, obj, mode):
    resource, namespace, name = parse_object(obj)
    if mode == "cascade":
        # A cascade root (under the top span when there are several).
        top = {s["spanId"] for s in spans(doc) if not s.get("parentSpanId")}
        return any(in_error(s) and (not s.get("parentSpanId") or s["parentSpanId"] in top)
                   for s in spans(doc))
    if mode == "timeline":
        # One span for the tree's root object, its entries and those of the
        # objects below it as spans under it: the root carries the problem.
        return any(in_error(s) and not s.get("parentSpanId") for s in spans(doc))
    for s in spans(doc):
        if (attr(s, "resource"), attr(s, "namespace") or "", attr(s, "name")) == (
                resource, namespace, name):
            return in_error(s)
    return False


# Searched objects given by a glob: at most this many of the matches.
MAX_MATCHES = 3


def objects_in(logs):
    """Every object the logs' writes name, as "resource ns/name" (a create
    refused before it had a name: its generateName, or "(unnamed)", as
    kascade names it)."""
    found = set()
    for log in logs:
        with gzip.open(log, "rt") as f:
            for line in f:
                e = json.loads(line)
                ref = e.get("objectRef") or {}
                if e.get("verb") in ("get", "list", "watch") or not ref.get("resource"):
                    continue
                name = ref.get("name") or ((e.get("responseObject") or {}).get("metadata") or {}).get("name")
                if not name and e.get("verb") == "create":
                    meta = (e.get("requestObject") or {}).get("metadata") or {}
                    name = meta.get("generateName") or "(unnamed)"
                if not name:
                    continue
                ns = "" if ref["resource"] == "namespaces" and not ref.get("apiGroup") else ref.get("namespace", "")
                found.add(f"{ref['resource']} {ns}/{name}" if ns else f"{ref['resource']} {name}")
    return found


def searched_objects(logs, truth):
    out = []
    known = None
    for pattern in truth["searched"]:
        if not any(c in pattern for c in "*?["):
            out.append(pattern)
            continue
        if known is None:
            known = objects_in(logs)
        matches = sorted(o for o in known if fnmatch.fnmatchcase(o, pattern))
        if not matches:
            sys.exit(f"{logs[0]}: searched {pattern!r} matches no object of the log")
        out.extend(matches[:MAX_MATCHES])
    return out


def ui_marks(kascade, logs, truth):
    """(ok, why): a healthy run's traces hold no error; a failing run's
    searched objects are in error in every mode."""
    healthy = truth["verdict"] == "healthy"
    for obj in searched_objects(logs, truth):
        for mode in MODES:
            doc = trace(kascade, logs, obj, mode)
            if "error" in doc:
                return False, f"{obj} {mode}: kascade trace failed: {doc['error']}"
            if healthy:
                bad = [s["name"] for s in spans(doc) if in_error(s)]
                if bad:
                    return False, f"{obj} {mode}: {len(bad)} spans in error, first {bad[0][:80]!r}"
            elif not object_span_in_error(doc, obj, mode):
                return False, f"{obj} {mode}: not in error"
    return True, ""


def first_hit(report, truth):
    findings = [f for f in report.get("findings") or [] if not f.get("background")]
    if not findings:
        return False, "no finding"
    f = findings[0]
    cause = truth["cause"]
    display = f["object"]["display"]
    on_object = any(fnmatch.fnmatchcase(display, g) for g in cause["objects"])
    titled = re.search(cause["title"], f["title"], re.IGNORECASE) is not None
    why = []
    if not on_object:
        why.append(f"on {display}, not {' or '.join(cause['objects'])}")
    if not titled:
        why.append(f"title does not match {cause['title']!r}")
    return on_object and titled, "; ".join(why)


def headline(report):
    findings = [f for f in report.get("findings") or [] if not f.get("background")]
    if not findings:
        return "no problems found"
    f = findings[0]
    return f"{f['severity'].upper()} {f['title']} — on {f['object']['display']}"


def short(s, n):
    return s if len(s) <= n else s[: n - 1] + "…"


def score(kascade, run):
    """One run's row (explain's first finding and the UI marks against its
    truth) and its truth."""
    truth = load_truth(run)
    logs = run_logs(run)
    report, rc = explain(kascade, logs, component_traces(run))
    if truth["verdict"] == "failing":
        ok, why = first_hit(report, truth)
    else:
        errors = report["totals"]["error"]
        ok = errors == 0 and rc == 0
        why = "" if ok else f"{errors} errors, --fail-on error exit {rc}"
    ui_ok, ui_why = ui_marks(kascade, logs, truth)
    return {
        "run": run, "verdict": truth["verdict"], "first": headline(report),
        "truth": truth.get("cause", {}).get("reason", "healthy") if truth["verdict"] == "failing" else "healthy",
        "explain": ok, "explain_why": why, "ui": ui_ok, "ui_why": ui_why,
    }, truth


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kascade", required=True)
    ap.add_argument("--json", help="also write the per-run results here")
    ap.add_argument("runs", nargs="*")
    args = ap.parse_args()
    # Runs are scored on SCORE_JOBS threads (default: the cores), each
    # running kascade; results are printed in the runs' order.
    jobs = int(os.environ.get("SCORE_JOBS") or os.cpu_count() or 1)
    with concurrent.futures.ThreadPoolExecutor(max(1, jobs)) as pool:
        scored = pool.map(lambda run: score(args.kascade, run), runs(args.runs))
        rows = []
        for r, truth in scored:
            rows.append(r)
            ok, ui_ok, why, ui_why = r["explain"], r["ui"], r["explain_why"], r["ui_why"]
            print(f"{r['run']:28} {r['verdict']:8} explain {'✓' if ok else '✗'}  ui {'✓' if ui_ok else '✗'}  "
                  f"{short(r['first'], 110)}", flush=True)
            if truth["verdict"] == "failing":
                print(f"{'':28} {'truth':8} {short(r['truth'], 120)}")
            for w in (why, ui_why):
                if w:
                    print(f"{'':28} {'':8} ✗ {w}")
    failing = [r for r in rows if r["verdict"] == "failing"]
    healthy = [r for r in rows if r["verdict"] == "healthy"]
    hits = sum(r["explain"] for r in failing)
    ui_hits = sum(r["ui"] for r in failing)
    alarms = sum(not r["explain"] for r in healthy)
    ui_alarms = sum(not r["ui"] for r in healthy)
    pct = lambda a, b: f"{100 * a / b:.0f} %" if b else "n/a"
    print()
    print(f"precision@1 over failing runs:  explain {hits}/{len(failing)} ({pct(hits, len(failing))}), "
          f"UI marks {ui_hits}/{len(failing)} ({pct(ui_hits, len(failing))})")
    print(f"false-alarm healthy runs:       explain {alarms}/{len(healthy)}, UI marks {ui_alarms}/{len(healthy)}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    good = hits == len(failing) and ui_hits == len(failing) and alarms == 0 and ui_alarms == 0
    sys.exit(0 if good else 1)


if __name__ == "__main__":
    main()
