#!/usr/bin/env python3
"""config-roller: a small controller (kubectl underneath, stdlib only) that rolls
a Deployment when its ConfigMap changes, like examples/config_roller.rs without
the CPIDs (or like stakater's Reloader).

    config-roller.py --kubectl PATH --kubeconfig FILE

A Deployment annotated `config-roller.kascade.io/configmap: NAME` gets the
content hash of ConfigMap NAME (same namespace) in its Pod template's
annotation `config-roller.kascade.io/hash` (field manager config-roller), so
every change of the ConfigMap rolls it out. Watches ConfigMaps and Deployments
in every namespace (kubectl get --watch) and reconciles the namespace of each
change. Runs until SIGTERM or SIGINT.
"""
import argparse
import hashlib
import json
import queue
import signal
import subprocess
import sys
import threading
import time

CONFIGMAP = "config-roller.kascade.io/configmap"
HASH = "config-roller.kascade.io/hash"


def log(msg):
    sys.stderr.write(f"[config-roller {time.strftime('%H:%M:%S')}] {msg}\n")
    sys.stderr.flush()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kubectl", default="kubectl")
    p.add_argument("--kubeconfig", required=True)
    a = p.parse_args()
    kubectl = [a.kubectl, "--kubeconfig", a.kubeconfig]
    todo = queue.Queue()
    procs = []
    stopping = threading.Event()

    def watch(resource):
        # kubectl lists, then watches; one line per object seen or changed.
        while not stopping.is_set():
            proc = subprocess.Popen(kubectl + ["get", resource, "--all-namespaces", "--watch",
                                               "-o", "jsonpath={.metadata.namespace}{\"\\n\"}"],
                                    stdout=subprocess.PIPE, text=True)
            procs.append(proc)
            for line in proc.stdout:
                if line.strip():
                    todo.put(line.strip())
            proc.wait()
            if not stopping.is_set():
                log(f"watch of {resource} ended (exit {proc.returncode}); watching again")
                stopping.wait(1)

    def get_json(*args):
        out = subprocess.run(kubectl + ["get", *args, "-o", "json"], capture_output=True, text=True)
        if out.returncode != 0:
            log(f"get {' '.join(args)}: {out.stderr.strip()}")
            return None
        return json.loads(out.stdout)

    def reconcile(ns):
        deps = get_json("deployments", "-n", ns)
        for d in (deps or {}).get("items", []):
            cm_name = (d["metadata"].get("annotations") or {}).get(CONFIGMAP)
            if not cm_name:
                continue
            cm = get_json("configmap", cm_name, "-n", ns)
            if cm is None:
                continue
            content = json.dumps([cm.get("data") or {}, cm.get("binaryData") or {}], sort_keys=True)
            want = hashlib.sha256(content.encode()).hexdigest()[:16]
            tmpl_ann = d["spec"]["template"]["metadata"].get("annotations") or {}
            if tmpl_ann.get(HASH) == want:
                continue
            patch = {"spec": {"template": {"metadata": {"annotations": {HASH: want}}}}}
            out = subprocess.run(kubectl + ["patch", "deployment", d["metadata"]["name"], "-n", ns,
                                            "--type=merge", "--field-manager=config-roller",
                                            "-p", json.dumps(patch)], capture_output=True, text=True)
            if out.returncode == 0:
                log(f"rolled {ns}/{d['metadata']['name']} for configmap {cm_name} (hash {want})")
            else:
                log(f"patch {ns}/{d['metadata']['name']}: {out.stderr.strip()}")

    def stop(signum, _frame):
        log(f"signal {signum}: stopping")
        stopping.set()
        todo.put(None)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    for r in ("configmaps", "deployments"):
        threading.Thread(target=watch, args=(r,), daemon=True).start()
    log("watching configmaps and deployments")
    while True:
        ns = todo.get()
        if ns is None:
            break
        # Coalesce what piled up meanwhile: one reconcile per namespace.
        pending = {ns}
        while True:
            try:
                more = todo.get_nowait()
            except queue.Empty:
                break
            if more is None:
                stopping.set()
                break
            pending.add(more)
        if stopping.is_set():
            break
        for n in sorted(pending):
            reconcile(n)
    for proc in procs:
        proc.terminate()


if __name__ == "__main__":
    main()
