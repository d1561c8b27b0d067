#!/usr/bin/env python3
"""The collector's limits probed as an attacker would, against a running
`kascade collect` (e2e/faults.sh, scenario `limits`):

1. a body of 20,000 '[' (the decode recursed until the stack overflowed):
   answered 400, the process alive;
2. 600 idle connections to the webhook: /healthz still answers;
3. 80 concurrent 30 MiB bodies: requests beyond --max-intake-bytes are
   answered 429 before their bodies are sent, and the process's peak RSS
   stays under the bound README documents.

Usage: limits.py WEBHOOK_URL ADMIN_URL PID RSS_BOUND_MIB
Prints one line `key=value ...`; exits 1 when a check fails.
"""
import http.client
import os
import socket
import sys
import threading
import time
import urllib.parse
import urllib.request

webhook, admin, pid, bound_mib = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
host, port = urllib.parse.urlparse(webhook).hostname, urllib.parse.urlparse(webhook).port
failures = []


def alive():
    try:
        os.kill(pid, 0)
        return True
    except OSError:
        return False


def healthz(timeout=5):
    try:
        with urllib.request.urlopen(admin + "/healthz", timeout=timeout) as r:
            return r.status == 200
    except OSError:
        return False


def post(body, timeout=60):
    c = http.client.HTTPConnection(host, port, timeout=timeout)
    c.request("POST", "/audit", body=body, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    text = r.read().decode(errors="replace")
    c.close()
    return r.status, text


# 1. Nothing but brackets.
status, text = post(b"[" * 20000 + b"]" * 20000)
if status != 400:
    failures.append(f"brackets body answered {status}: {text.strip()}")
time.sleep(0.5)
if not alive() or not healthz():
    failures.append("the collector did not survive the brackets body")

# 2. Idle connections.
idle = []
for _ in range(600):
    s = socket.create_connection((host, port))
    idle.append(s)
start = time.monotonic()
ok = healthz()
healthz_seconds = time.monotonic() - start
if not ok:
    failures.append("/healthz did not answer with 600 idle webhook connections")
for s in idle:
    s.close()

# 3. Concurrent maximal bodies: an EventList padded with whitespace to 30 MiB.
size = 30 << 20
head = b'{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[]'
body = head + b" " * (size - len(head) - 1) + b"}"
answers = []
lock = threading.Lock()


def send():
    s = socket.create_connection((host, port))
    s.settimeout(120)
    s.sendall(
        b"POST /audit HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
    )
    # A refusal comes before the body: look for it before sending.
    s.setblocking(False)
    early = b""
    time.sleep(0.2)
    try:
        early = s.recv(4096)
    except BlockingIOError:
        pass
    s.setblocking(True)
    if early.startswith(b"HTTP/1.1 429"):
        with lock:
            answers.append(("429-unread", early))
        s.close()
        return
    try:
        s.sendall(body)
        reply = early + s.recv(4096)
    except OSError as e:
        reply = f"error {e}".encode()
    with lock:
        answers.append((reply.split(b" ")[1].decode() if reply.startswith(b"HTTP/") else "error", reply))
    s.close()


threads = [threading.Thread(target=send) for _ in range(80)]
for t in threads:
    t.start()
for t in threads:
    t.join()
refused_unread = sum(1 for a, _ in answers if a == "429-unread")
ok200 = sum(1 for a, _ in answers if a == "200")
peak_kib = 0
with open(f"/proc/{pid}/status") as f:
    for line in f:
        if line.startswith("VmHWM:"):
            peak_kib = int(line.split()[1])
peak_mib = peak_kib // 1024
if refused_unread == 0:
    failures.append("no 30 MiB body was refused before it was read")
if ok200 == 0:
    failures.append("no 30 MiB body was accepted")
if peak_mib > bound_mib:
    failures.append(f"peak RSS {peak_mib} MiB is over the bound {bound_mib} MiB")
if not alive() or not healthz():
    failures.append("the collector did not survive the concurrent bodies")

print(
    f"brackets={status} healthz_with_600_idle={healthz_seconds:.2f}s bodies_accepted={ok200} "
    f"bodies_refused_unread={refused_unread} other={len(answers) - ok200 - refused_unread} "
    f"peak_rss_mib={peak_mib} bound_mib={bound_mib}"
)
for f in failures:
    print("FAIL:", f, file=sys.stderr)
sys.exit(1 if failures else 0)
