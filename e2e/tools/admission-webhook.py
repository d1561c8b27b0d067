#!/usr/bin/env python3
"""A small HTTPS validating admission webhook (AdmissionReview v1), stdlib only.

    admission-webhook.py --listen 127.0.0.1:30900 --cert tls.crt --key tls.key \
        [--deny-label KEY=VALUE] [--message TEXT] [--delay-ms N] [--status CODE] \
        [--record FILE]

POST /validate (any path but /healthz) answers an AdmissionReview:
  - denies (allowed: false, status 403 with --message) every object whose
    labels have KEY=VALUE (--deny-label; repeatable); allows everything else;
  - --delay-ms N: waits N ms before answering (a slow webhook: with N above
    the webhook's timeoutSeconds the apiserver gives up on it);
  - --status CODE: answers every review with HTTP CODE and no review (e.g.
    500: a failing webhook; failurePolicy decides what the apiserver does).
  - --record FILE: appends each review received, as sent, to FILE (one JSON
    line each; e2e/fixtures.sh captures what a validating webhook sees).
GET /healthz answers 200 "ok" (no delay, no --status), for readiness checks.
Each review is logged to stderr, one line each. Stops on SIGTERM or SIGINT.
"""
import argparse
import json
import signal
import ssl
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--listen", default="127.0.0.1:8443", help="HOST:PORT")
    p.add_argument("--cert", required=True, help="serving certificate (PEM)")
    p.add_argument("--key", required=True, help="its private key (PEM)")
    p.add_argument("--deny-label", action="append", default=[], metavar="KEY=VALUE",
                   help="deny objects with this label (repeatable)")
    p.add_argument("--message", default="denied by policy", help="the denial's message")
    p.add_argument("--delay-ms", type=int, default=0, help="wait this long before each answer")
    p.add_argument("--status", type=int, default=0, help="answer with this HTTP status and no review")
    p.add_argument("--record", help="append each review received to this file, one JSON line each")
    a = p.parse_args()
    a.deny = []
    for kv in a.deny_label:
        if "=" not in kv:
            p.error(f"--deny-label {kv!r}: want KEY=VALUE")
        a.deny.append(tuple(kv.split("=", 1)))
    return a


ARGS = parse_args()
RECORD_LOCK = threading.Lock()


def log(msg):
    sys.stderr.write(f"[admission-webhook {time.strftime('%H:%M:%S')}] {msg}\n")
    sys.stderr.flush()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # the reviews are logged by review()
        pass

    def send(self, code, body, ctype="application/json"):
        data = body.encode() if isinstance(body, str) else body
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/healthz":
            self.send(200, "ok", "text/plain")
        else:
            self.send(404, "not found", "text/plain")

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        try:
            review = json.loads(raw)
            req = review["request"]
        except (ValueError, KeyError, TypeError) as e:
            log(f"bad review: {e}")
            self.send(400, json.dumps({"error": "not an AdmissionReview"}))
            return
        if ARGS.record:
            with RECORD_LOCK, open(ARGS.record, "a") as f:
                f.write(json.dumps(review, separators=(",", ":")) + "\n")
        if ARGS.delay_ms:
            time.sleep(ARGS.delay_ms / 1000)
        obj = req.get("object") or req.get("oldObject") or {}
        meta = obj.get("metadata") or {}
        what = "{} {} {}/{}".format(req.get("operation"), (req.get("resource") or {}).get("resource"),
                                    req.get("namespace", ""), meta.get("name") or meta.get("generateName", "") + "*")
        if ARGS.status:
            log(f"{what}: answering HTTP {ARGS.status}")
            self.send(ARGS.status, json.dumps({"error": f"webhook failing with {ARGS.status}"}))
            return
        labels = meta.get("labels") or {}
        hit = [f"{k}={v}" for k, v in ARGS.deny if labels.get(k) == v]
        response = {"uid": req.get("uid"), "allowed": not hit}
        if hit:
            response["status"] = {"code": 403, "reason": "Forbidden",
                                  "message": f"{ARGS.message} (label {', '.join(hit)})"}
        log(f"{what}: {'denied' if hit else 'allowed'}")
        self.send(200, json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                                   "response": response}))


def main():
    host, port = ARGS.listen.rsplit(":", 1)
    server = ThreadingHTTPServer((host, int(port)), Handler)
    server.daemon_threads = True
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(ARGS.cert, ARGS.key)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)

    def stop(signum, _frame):
        log(f"signal {signum}: stopping")
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    log(f"listening on https://{ARGS.listen} (deny {ARGS.deny_label or 'nothing'}, "
        f"delay {ARGS.delay_ms} ms, status {ARGS.status or 'review'})")
    server.serve_forever()
    server.server_close()


if __name__ == "__main__":
    main()
