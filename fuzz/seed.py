#!/usr/bin/env python3
"""Seed corpora for the fuzz targets from what the real control plane wrote
(e2e/fixtures) and the shipped rules: fuzz/corpus/<target>/ (not committed;
libFuzzer adds what it finds there). Run from anywhere: python3 fuzz/seed.py"""

import hashlib
import json
import pathlib

root = pathlib.Path(__file__).resolve().parent.parent
fixtures = root / "e2e" / "fixtures"
corpus = root / "fuzz" / "corpus"


def put(target, data: bytes):
    d = corpus / target
    d.mkdir(parents=True, exist_ok=True)
    (d / hashlib.sha1(data).hexdigest()).write_bytes(data)


def event_list(lines):
    return ('{"kind":"EventList","apiVersion":"audit.k8s.io/v1","metadata":{},"items":[%s]}'
            % ",".join(lines)).encode()


for log in sorted(fixtures.glob("*/audit.log")):
    lines = [l for l in log.read_text().splitlines() if l.strip()]
    # Batches as the webhook receives them.
    for i in range(0, len(lines), 8):
        put("event_list", event_list(lines[i:i + 8]))
    # Consecutive states of each object, old NUL new, as the processor diffs them.
    last = {}
    for line in lines:
        ev = json.loads(line)
        obj = ev.get("responseObject")
        ref = ev.get("objectRef") or {}
        if not isinstance(obj, dict) or "metadata" not in obj:
            continue
        key = (ref.get("apiGroup"), ref.get("resource"), ref.get("namespace"),
               obj["metadata"].get("name"))
        if key in last:
            put("diff", json.dumps(last[key]).encode() + b"\0" + json.dumps(obj).encode())
        last[key] = obj

for stream in sorted(fixtures.glob("*/watch/*.jsonl")):
    prev = {}
    for line in stream.read_text().splitlines():
        obj = json.loads(line)["object"]
        key = (obj["metadata"].get("namespace"), obj["metadata"]["name"])
        if key in prev:
            put("diff", json.dumps(prev[key]).encode() + b"\0" + json.dumps(obj).encode())
        prev[key] = obj

for rules in sorted((root / "rules").glob("*.yaml")):
    put("rules", rules.read_bytes())

# Assembled ids: the magic byte in place (libFuzzer finds the check byte),
# then a window width and a hex raw trace id as Jaeger prints it.
for windows in (1, 3, 255):
    for code in (0x00, 0x13, 0x32):
        seed = bytes(8) + (29_916_666).to_bytes(4, "big") + bytes([windows, code]) + b"k\0"
        put("trace_id", seed + (1800).to_bytes(8, "big") + b"6c3c5e1a9f0b2d4700000000690ea600")

for target in sorted(p.name for p in corpus.iterdir()):
    print(target, len(list((corpus / target).iterdir())), "seeds")
