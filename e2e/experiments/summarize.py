"""Summarises an e2e/experiments/propagation.sh output directory as Markdown:
per N, how long adding and deleting took, read from the runs' audit logs
(the Deployment's create to the last Pod's status write, the Deployment's
delete to the last Pod delete) and from the script's clock (until kubectl
saw every Pod available / gone), the rates at which the replicaset-controller
created and the garbage collector deleted Pods, and kascade's CPU and memory
beside the kube-apiserver's over the same runs (from the /proc samples).

    summarize.py DIR
"""
import csv
import gzip
import json
import os
import statistics
import sys
from collections import defaultdict
from datetime import datetime


def read(path):
    try:
        with open(path, newline="") as f:
            return list(csv.DictReader(f))
    except OSError as err:
        sys.exit(f"{path}: {err}")


def fmt(values, digits=1):
    """mean (min–max) of VALUES."""
    if not values:
        return "–"
    mean = statistics.mean(values)
    return f"{mean:.{digits}f} ({min(values):.{digits}f}–{max(values):.{digits}f})"


def when(stamp):
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def audit_phases(path):
    """Add and delete durations and Pod create/delete rates of one run's audit log."""
    events = []
    with gzip.open(path, "rt") as f:
        for number, line in enumerate(f, 1):
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError as err:
                sys.exit(f"{path}:{number}: not JSON: {err}")
    ok = [e for e in events if e.get("responseStatus", {}).get("code", 0) < 400]

    def times(verb, resource, subresource="", user="", stamp="requestReceivedTimestamp"):
        return sorted(
            when(e[stamp]) for e in ok
            if e["verb"] == verb and e["objectRef"].get("resource") == resource
            and e["objectRef"].get("subresource", "") == subresource and user in e["user"]["username"])

    try:
        created = times("create", "deployments")[0]
        deleted = times("delete", "deployments")[0]
    except IndexError:
        sys.exit(f"{path}: no create or delete of the Deployment")
    ready = [t for t in times("patch", "pods", "status", stamp="stageTimestamp") if t < deleted]
    creates = times("create", "pods", user="replicaset-controller")
    gc_deletes = times("delete", "pods", user="garbage-collector")
    gone = times("delete", "pods", stamp="stageTimestamp")
    if not (ready and creates and gc_deletes and gone):
        sys.exit(f"{path}: Pod creates, status writes or deletes missing")
    quarter = max(len(gc_deletes) // 4, 2)
    rs_created = times("create", "replicasets", stamp="stageTimestamp")
    rs_deleted = times("delete", "replicasets", stamp="stageTimestamp")
    if not (rs_created and rs_deleted):
        sys.exit(f"{path}: no create or delete of the ReplicaSet")

    def rate(ts):
        return (len(ts) - 1) / (ts[-1] - ts[0]) if len(ts) > 1 and ts[-1] > ts[0] else float("nan")

    return {
        "audit_add": ready[-1] - created,
        "audit_delete": gone[-1] - deleted,
        "create_rate": rate(creates),
        "delete_rate": rate(gc_deletes),
        "delete_rate_first": rate(gc_deletes[:quarter]),
        "delete_rate_last": rate(gc_deletes[-quarter:]),
        # The paper's Figs. 5 and 6: Pod creates (deletes) by the second
        # since the ReplicaSet's create (delete) completed.
        "create_slots": slots(creates, rs_created[0]),
        "delete_slots": slots(gc_deletes, rs_deleted[0]),
    }


def slots(times, since):
    counts = defaultdict(int)
    for t in times:
        counts[max(int(t - since), 0)] += 1
    return counts


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: summarize.py DIR")
    out = sys.argv[1]
    runs = read(f"{out}/runs.csv")
    samples = read(f"{out}/resources.csv")

    phases = defaultdict(lambda: defaultdict(list))
    for run in runs:
        n, rep = int(run["n"]), int(run["rep"])
        p = phases[n]
        p["add"].append(float(run["available"]) - float(run["create_start"]))
        p["delete"].append(float(run["deleted"]) - float(run["delete_start"]))
        p["lines"].append(int(run["audit_lines"]))
        log = os.path.join(out, f"n{n}", f"r{rep:02d}.audit.log.gz")
        if os.path.exists(log):
            for key, value in audit_phases(log).items():
                p[key].append(value)

    by_run = defaultdict(list)
    for s in samples:
        by_run[(int(s["n"]), int(s["rep"]))].append(s)
    usage = defaultdict(lambda: defaultdict(list))
    for (n, _), rows in sorted(by_run.items()):
        if len(rows) < 2:
            continue
        first, last = rows[0], rows[-1]
        seconds = float(last["time"]) - float(first["time"])
        k_cpu = float(last["kascade_cpu_s"]) - float(first["kascade_cpu_s"])
        a_cpu = float(last["apiserver_cpu_s"]) - float(first["apiserver_cpu_s"])
        k_rss = [int(r["kascade_rss_kib"]) / 1024 for r in rows]
        a_rss = [int(r["apiserver_rss_kib"]) / 1024 for r in rows]
        u = usage[n]
        u["k_cpu"].append(k_cpu)
        u["a_cpu"].append(a_cpu)
        u["k_pct"].append(100 * k_cpu / seconds)
        u["a_pct"].append(100 * a_cpu / seconds)
        u["cpu_ratio"].append(100 * k_cpu / a_cpu if a_cpu else 0.0)
        u["k_rss"].append(statistics.mean(k_rss))
        u["a_rss"].append(statistics.mean(a_rss))
        u["k_peak"].append(max(k_rss))
        u["a_peak"].append(max(a_rss))
        u["rss_ratio"].append(100 * statistics.mean(k_rss) / statistics.mean(a_rss))

    print("Per N: mean (min–max) over the runs.\n")
    print("| N | runs | add, audit log (s) | delete, audit log (s) | add, kubectl (s) | delete, kubectl (s) | "
          "Pods created per s | Pods deleted per s | deleted per s, first / last quarter | audit writes per run |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for n in sorted(phases):
        p = phases[n]
        print(f"| {n} | {len(p['add'])} | {fmt(p['audit_add'])} | {fmt(p['audit_delete'])} | {fmt(p['add'])} | "
              f"{fmt(p['delete'])} | {fmt(p['create_rate'])} | {fmt(p['delete_rate'])} | "
              f"{fmt(p['delete_rate_first'])} / {fmt(p['delete_rate_last'])} | {fmt(p['lines'], 0)} |")
    for key, what in (("create_slots", "Pods created by the replicaset-controller, by second since the ReplicaSet's create"),
                      ("delete_slots", "Pods deleted by the garbage collector, by second since the ReplicaSet's delete")):
        sizes = [n for n in sorted(phases) if phases[n][key]]
        if not sizes:
            continue
        last = max(max(c) for n in sizes for c in phases[n][key] if c)
        print(f"\n{what} (mean per run):\n")
        print("| second | " + " | ".join(f"N={n}" for n in sizes) + " |")
        print("|---|" + "---|" * len(sizes))
        for second in range(last + 1):
            cells = [f"{statistics.mean(c.get(second, 0) for c in phases[n][key]):.1f}" for n in sizes]
            print(f"| {second}–{second + 1} | " + " | ".join(cells) + " |")
    print()
    print("| N | kascade CPU (s per run) | apiserver CPU (s per run) | kascade / apiserver CPU | "
          "kascade CPU (% of a core) | apiserver CPU (% of a core) | kascade RSS mean (MiB) | "
          "apiserver RSS mean (MiB) | kascade / apiserver RSS | kascade RSS peak (MiB) | apiserver RSS peak (MiB) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for n in sorted(usage):
        u = usage[n]
        print(f"| {n} | {fmt(u['k_cpu'])} | {fmt(u['a_cpu'])} | {fmt(u['cpu_ratio'], 0)} % | "
              f"{fmt(u['k_pct'], 0)} | {fmt(u['a_pct'], 0)} | {fmt(u['k_rss'], 0)} | {fmt(u['a_rss'], 0)} | "
              f"{fmt(u['rss_ratio'], 0)} % | {fmt(u['k_peak'], 0)} | {fmt(u['a_peak'], 0)} |")


if __name__ == "__main__":
    main()
