"""Summarises an e2e/experiments/propagation.sh output directory as Markdown:
per N, how long adding (until every Pod is available) and deleting (until
every Pod is gone) took, and kascade's CPU and memory beside the
kube-apiserver's over the same runs (from the /proc samples).

    summarize.py DIR
"""
import csv
import statistics
import sys
from collections import defaultdict


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


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: summarize.py DIR")
    out = sys.argv[1]
    runs = read(f"{out}/runs.csv")
    samples = read(f"{out}/resources.csv")

    phases = defaultdict(lambda: {"add": [], "delete": [], "lines": []})
    for run in runs:
        p = phases[int(run["n"])]
        p["add"].append(float(run["available"]) - float(run["create_start"]))
        p["delete"].append(float(run["deleted"]) - float(run["delete_start"]))
        p["lines"].append(int(run["audit_lines"]))

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
    print("| N | runs | add: all Pods available (s) | delete: all Pods gone (s) | audit writes per run |")
    print("|---|---|---|---|---|")
    for n in sorted(phases):
        p = phases[n]
        print(f"| {n} | {len(p['add'])} | {fmt(p['add'])} | {fmt(p['delete'])} | {fmt(p['lines'], 0)} |")
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
