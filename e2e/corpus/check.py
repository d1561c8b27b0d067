#!/usr/bin/env python3
"""Checks each run's truth.yaml against its captured audit log (never against
kascade's output):

    e2e/corpus/check.py [RUN...]      (default: every e2e/corpus/*/truth.yaml)

- the format: verdict, cause (failing runs: objects, title, reason, trigger),
  searched;
- every `objects` and `searched` glob names an object of the log
  ("resource namespace/name", from objectRef, or the object's own metadata
  when objectRef has no name: generateName creates get "prefix*");
- failing runs: the title regex matches a statement the apiserver, a
  controller or the kubelet made about one of the cause objects (a refused
  request's message, an Event's reason or message, a status condition's or
  container state's reason or message; or, stated by no one, a delete pending
  on finalizers), and the trigger is a write of the log;
- healthy runs: each searched workload reached Ready/Complete (Deployment,
  StatefulSet, ReplicaSet: ready replicas = replicas at the observed
  generation; Job: Complete; CronJob: a lastSuccessfulTime; Service: a ready
  endpoint in its EndpointSlice; Pod: Ready) and was still so at the end of
  the log or was deleted after. Warning Events are listed, for a look.
Exit status 1 if any check failed.
"""
import fnmatch
import gzip
import json
import os
import re
import sys

import yaml

CORPUS = os.path.dirname(os.path.abspath(__file__))
WRITES = {"create", "update", "patch", "delete", "deletecollection"}
KIND_PLURAL = {"Endpoints": "endpoints", "Ingress": "ingresses", "NetworkPolicy": "networkpolicies",
               "PodDisruptionBudget": "poddisruptionbudgets", "StorageClass": "storageclasses"}


def plural(kind):
    return KIND_PLURAL.get(kind) or kind.lower() + "s"


def key(resource, ns, name):
    return f"{resource} {ns}/{name}" if ns else f"{resource} {name}"


def obj_of(ev):
    """The object an event's write left (responseObject), if it is one."""
    o = ev.get("responseObject")
    if isinstance(o, dict) and o.get("kind") not in (None, "Status") and "metadata" in o:
        return o
    return None


def ev_key(ev):
    ref = ev.get("objectRef") or {}
    res = ref.get("resource")
    if not res:
        return None
    name = ref.get("name")
    if not name:
        for o in (obj_of(ev), ev.get("requestObject")):
            meta = (o or {}).get("metadata") if isinstance(o, dict) else None
            if meta and (meta.get("name") or meta.get("generateName")):
                name = meta.get("name") or meta["generateName"] + "*"
                break
    ns = None if res == "namespaces" else ref.get("namespace")
    return key(res, ns, name or "")


def statements(ev):
    """(object key, text) the apiserver, a controller or a kubelet stated."""
    out = []
    rs = ev.get("responseStatus") or {}
    k = ev_key(ev)
    if (rs.get("code") or 0) >= 400 and ev.get("verb") in WRITES:
        out.append((k, f"HTTP {rs['code']} {rs.get('reason', '')}: {rs.get('message', '')}"))
    o = obj_of(ev)
    meta = (o or {}).get("metadata") or {}
    if ev.get("verb") in WRITES and meta.get("deletionTimestamp") and meta.get("finalizers"):
        # No one states this one: a delete waiting on finalizers.
        out.append((k, f"deletion pending on finalizers: {', '.join(meta['finalizers'])}"))
    ref = ev.get("objectRef") or {}
    if ref.get("resource") == "events" and ev.get("verb") in ("create", "patch", "update"):
        o = ev.get("requestObject") or {}
        inv = o.get("involvedObject") or o.get("regarding")
        if inv:
            ek = key(plural(inv.get("kind", "")), inv.get("namespace"), inv.get("name"))
            out.append((ek, f"{o.get('type', '')} {o.get('reason', '')}: {o.get('message') or o.get('note') or ''}"))
    elif ev.get("verb") in WRITES and ref.get("resource") != "events":
        # Status reasons and messages (conditions, container states).
        def walk(x):
            if isinstance(x, dict):
                r, m = x.get("reason"), x.get("message")
                if isinstance(r, str) or isinstance(m, str):
                    out.append((k, f"{x.get('type', '')} {r or ''}: {m or ''}"))
                for v in x.values():
                    walk(v)
            elif isinstance(x, list):
                for v in x:
                    walk(v)
        walk((ev.get("requestObject") or {}).get("status"))
    return out


def ready(resource, o):
    s, spec, meta = o.get("status") or {}, o.get("spec") or {}, o.get("metadata") or {}
    conds = {c.get("type"): c.get("status") for c in s.get("conditions") or []}
    if resource in ("deployments", "statefulsets", "replicasets"):
        want = spec.get("replicas", 1)
        gen_ok = s.get("observedGeneration", meta.get("generation")) == meta.get("generation")
        upd = s.get("updatedReplicas", want) if resource == "deployments" else want
        return want > 0 and s.get("readyReplicas", 0) == want and upd == want and gen_ok
    if resource == "jobs":
        return conds.get("Complete") == "True"
    if resource == "cronjobs":
        return bool(s.get("lastSuccessfulTime"))
    if resource == "pods":
        return conds.get("Ready") == "True"
    if resource == "endpointslices":
        return any((e.get("conditions") or {}).get("ready") for e in o.get("endpoints") or [])
    return True


def check_run(run):
    problems, notes = [], []
    d = os.path.join(CORPUS, run)
    try:
        truth = yaml.safe_load(open(os.path.join(d, "truth.yaml")))
    except OSError as e:
        return [f"no truth.yaml: {e}"], notes
    events = []
    # audit.log.gz, then one log per further apiserver (audit-2.log.gz, …).
    logs = ["audit.log.gz"] + sorted(
        f for f in os.listdir(d) if f.startswith("audit-") and f.endswith(".log.gz"))
    for log in logs:
        with gzip.open(os.path.join(d, log), "rt") as f:
            for line in f:
                events.append(json.loads(line))
    keys = {ev_key(ev) for ev in events} - {None}

    verdict = truth.get("verdict")
    if verdict not in ("failing", "healthy"):
        problems.append(f"verdict {verdict!r}: want failing or healthy")
    searched = truth.get("searched") or []
    if not searched:
        problems.append("no searched objects")
    for g in searched:
        if not any(fnmatch.fnmatchcase(k, g) for k in keys):
            problems.append(f"searched {g!r}: no such object in the log")

    if verdict == "failing":
        cause = truth.get("cause") or {}
        for field in ("objects", "title", "reason", "trigger"):
            if field not in cause:
                problems.append(f"cause.{field} missing")
        objs = cause.get("objects") or []
        for g in objs:
            if not any(fnmatch.fnmatchcase(k, g) for k in keys):
                problems.append(f"cause object {g!r}: no such object in the log")
        try:
            title = re.compile(cause.get("title") or "", re.I)
        except re.error as e:
            problems.append(f"title regex: {e}")
            title = None
        if title is not None and cause.get("title"):
            hits = [(k, t) for ev in events for k, t in statements(ev)
                    if k and any(fnmatch.fnmatchcase(k, g) for g in objs) and title.search(t)]
            if hits:
                notes.append(f"title matches {len(hits)} statements, first: {hits[0][0]}: {hits[0][1][:160]}")
            else:
                problems.append(f"title {cause['title']!r} matches no statement about {objs}")
        trig = cause.get("trigger")
        if trig is not None:
            parts = trig.split(" ")
            if len(parts) != 4:
                problems.append(f"trigger {trig!r}: want 'USER VERB RESOURCE NAMESPACE/NAME'")
            else:
                user, verb, res, obj = parts
                hit = [ev for ev in events if ev.get("verb") == verb and (ev.get("user") or {}).get("username") == user
                       and fnmatch.fnmatchcase(ev_key(ev) or "", f"{res} {obj}")]
                if hit:
                    notes.append(f"trigger at {hit[0].get('stageTimestamp')} (HTTP {hit[0].get('responseStatus', {}).get('code')})")
                else:
                    problems.append(f"trigger {trig!r}: no such write in the log")
    elif verdict == "healthy":
        if truth.get("cause"):
            problems.append("a healthy run has a cause")
        for g in searched:
            res = g.split(" ", 1)[0]
            state = {}  # key -> "ready" | "not ready" | "ready, then deleted"
            for ev in events:
                k = ev_key(ev)
                if ev.get("verb") not in WRITES or (ev.get("responseStatus") or {}).get("code", 0) >= 300:
                    continue
                if res == "services":
                    o = obj_of(ev)
                    if (ev.get("objectRef") or {}).get("resource") != "endpointslices" or not o:
                        continue
                    svc = (o["metadata"].get("labels") or {}).get("kubernetes.io/service-name")
                    k = key("services", o["metadata"].get("namespace"), svc)
                    if not fnmatch.fnmatchcase(k, g):
                        continue
                    state[k] = "ready" if ready("endpointslices", o) else ("not ready" if state.get(k) != "ready" else "ready")
                    # A slice may shrink: the last write decides, but once ready stays reported.
                    continue
                if not k or not fnmatch.fnmatchcase(k, g):
                    continue
                o = obj_of(ev)
                if ev.get("verb") == "delete":
                    if state.get(k) in ("ready", "ready, then deleted"):
                        state[k] = "ready, then deleted"
                    continue
                if o is not None and not (o.get("metadata") or {}).get("deletionTimestamp"):
                    state[k] = "ready" if ready(res, o) else "not ready"
            if not state:
                problems.append(f"searched {g!r}: no write left its state")
            for k, st in sorted(state.items()):
                if st == "not ready":
                    problems.append(f"{k}: not Ready/Complete at the end of the log")
                else:
                    notes.append(f"{k}: {st}")
    warnings = {}
    for ev in events:
        if (ev.get("objectRef") or {}).get("resource") == "events" and ev.get("verb") == "create":
            o = ev.get("requestObject") or {}
            if o.get("type") == "Warning":
                inv = o.get("involvedObject") or o.get("regarding") or {}
                w = f"{o.get('reason')} on {plural(inv.get('kind', ''))} {inv.get('namespace')}/{inv.get('name')}"
                warnings[w] = warnings.get(w, 0) + 1
    if warnings:
        notes.append("Warning Events: " + "; ".join(f"{w} (x{n})" for w, n in sorted(warnings.items())[:8])
                     + (" ..." if len(warnings) > 8 else ""))
    return problems, notes


def main():
    runs = sys.argv[1:] or sorted(r for r in os.listdir(CORPUS) if os.path.isfile(os.path.join(CORPUS, r, "audit.log.gz")))
    bad = 0
    for run in runs:
        problems, notes = check_run(run)
        print(f"{'FAIL' if problems else 'ok  '} {run}")
        for p in problems:
            print(f"     ! {p}")
        for n in notes:
            print(f"       {n}")
        bad += bool(problems)
    print(f"{len(runs) - bad}/{len(runs)} runs check out")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
