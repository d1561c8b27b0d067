#!/usr/bin/env python3
"""Seed corpora for the fuzz targets from what the real control plane wrote
(e2e/fixtures) and the shipped rules: fuzz/corpus/<target>/ (not committed;
libFuzzer adds what it finds there). Run from anywhere: python3 fuzz/seed.py

The raw_spans seeds are the spans kascade makes of the fixtures, as the raw
Jaeger answers them: a kascade binary writes them (`kascade replay --output
otlp-json=...`), the one in $KASCADE, else target/{release,debug}/kascade
(under $CARGO_TARGET_DIR when set); without one, raw_spans is not seeded."""

import gzip
import hashlib
import json
import os
import pathlib
import subprocess
import tempfile
import uuid

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
    # Audit log files as the offline commands read them: three lines each
    # (of the lines under 8 KiB: large objects would slow the target down),
    # some gzipped (the target also reads each input as a .gz).
    small = [l for l in lines if len(l) < 8192]
    for n, i in enumerate(range(0, len(small), 3)):
        text = "\n".join(small[i:i + 3]).encode() + b"\n"
        put("audit_lines", gzip.compress(text, mtime=0) if n % 4 == 3 else text)
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

# Mergelog batches as instrumented controllers send them, and the forms a
# CPID arrives in (the target also reads each input as one).
def cpid(n):
    return str(uuid.UUID(int=(0x6b0e_2a00 << 96) | n, version=4))


def mergelog(new, sources, controller="config-roller", time="2026-11-24T05:00:00.123456Z"):
    m = {"cpid": cpid(new), "sources": [cpid(s) for s in sources], "time": time}
    if controller:
        m["controller"] = controller
    return m


for batch in (
    [mergelog(1, [2, 3])],
    [mergelog(1, [2, 3]), mergelog(4, [1, 5, 6], controller="")],
    [mergelog(7, [8], time="2026-11-24T05:00:00Z")],
    [],
):
    put("mergelogs", json.dumps({"mergelogs": batch}).encode())
put("mergelogs", cpid(9).encode())
put("mergelogs", b"00-%s-00f067aa0ba902b7-01" % uuid.UUID(cpid(10)).hex.encode())


def kascade_binary():
    if os.environ.get("KASCADE"):
        return pathlib.Path(os.environ["KASCADE"])
    target = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", root / "target"))
    for profile in ("release", "debug"):
        if (target / profile / "kascade").is_file():
            return target / profile / "kascade"
    return None


def protobuf(msg, schema):
    """A message of OTLP/JSON (`TracesData` and below) as protobuf."""
    def varint(n):
        n &= (1 << 64) - 1
        out = bytearray()
        while True:
            b = n & 0x7F
            n >>= 7
            out.append(b | (0x80 if n else 0))
            if not n:
                return bytes(out)

    def field(num, wire, payload):
        return varint(num << 3 | wire) + payload

    out = b""
    for key, value in msg.items():
        if key not in schema:
            continue
        num, kind = schema[key]
        for v in value if isinstance(value, list) else [value]:
            if isinstance(kind, dict):
                body = protobuf(v, kind)
                out += field(num, 2, varint(len(body)) + body)
            elif kind == "string":
                b = v.encode()
                out += field(num, 2, varint(len(b)) + b)
            elif kind == "hex":
                b = bytes.fromhex(v)
                out += field(num, 2, varint(len(b)) + b)
            elif kind == "varint":
                out += field(num, 0, varint(int(v)))
            elif kind == "fixed64":
                out += field(num, 1, int(v).to_bytes(8, "little"))
            elif kind == "fixed32":
                out += field(num, 5, int(v).to_bytes(4, "little"))
            elif kind == "bool":
                out += field(num, 0, varint(int(bool(v))))
            elif kind == "double":
                import struct
                out += field(num, 1, struct.pack("<d", float(v)))
    return out


# opentelemetry/proto/{common,resource,trace}/v1 field numbers.
ANY = {}
KEY_VALUE = {"key": (1, "string"), "value": (2, ANY)}
ANY.update({"stringValue": (1, "string"), "boolValue": (2, "bool"), "intValue": (3, "varint"),
            "doubleValue": (4, "double"), "arrayValue": (5, {"values": (1, ANY)}),
            "kvlistValue": (6, {"values": (1, KEY_VALUE)})})
ATTRS = (KEY_VALUE, "droppedAttributesCount")
SPAN = {
    "traceId": (1, "hex"), "spanId": (2, "hex"), "traceState": (3, "string"),
    "parentSpanId": (4, "hex"), "flags": (16, "fixed32"), "name": (5, "string"),
    "kind": (6, "varint"), "startTimeUnixNano": (7, "fixed64"),
    "endTimeUnixNano": (8, "fixed64"), "attributes": (9, KEY_VALUE),
    "droppedAttributesCount": (10, "varint"),
    "events": (11, {"timeUnixNano": (1, "fixed64"), "name": (2, "string"),
                    "attributes": (3, KEY_VALUE), "droppedAttributesCount": (4, "varint")}),
    "droppedEventsCount": (12, "varint"),
    "links": (13, {"traceId": (1, "hex"), "spanId": (2, "hex"), "traceState": (3, "string"),
                   "attributes": (4, KEY_VALUE), "droppedAttributesCount": (5, "varint"),
                   "flags": (6, "fixed32")}),
    "droppedLinksCount": (14, "varint"),
    "status": (15, {"message": (2, "string"), "code": (3, "varint")}),
}
TRACES_DATA = {"resourceSpans": (1, {
    "resource": (1, {"attributes": (1, KEY_VALUE), "droppedAttributesCount": (2, "varint")}),
    "scopeSpans": (2, {"scope": (1, {"name": (1, "string"), "version": (2, "string"),
                                     "attributes": (3, KEY_VALUE),
                                     "droppedAttributesCount": (4, "varint")}),
                       "spans": (2, SPAN), "schemaUrl": (3, "string")}),
    "schemaUrl": (3, "string"),
})}


def raw_traces(data):
    """Each raw trace of an OTLP/JSON export alone, as a TracesData."""
    traces = {}
    for rs in data["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for span in ss["spans"]:
                traces.setdefault(span["traceId"], []).append(span)
    rs = data["resourceSpans"][0]
    for spans in traces.values():
        yield {"resourceSpans": [{"resource": rs.get("resource", {}), "scopeSpans": [
            {"scope": rs["scopeSpans"][0].get("scope", {}), "spans": spans}]}]}


# The UI's searches (FindTracesRequest): tags, a scope, a time range.
QUERY = {"query": (1, {
    "serviceName": (1, "string"), "operationName": (2, "string"), "attributes": (3, KEY_VALUE),
    "startTimeMin": (4, {"seconds": (1, "varint"), "nanos": (2, "varint")}),
    "startTimeMax": (5, {"seconds": (1, "varint"), "nanos": (2, "varint")}),
    "searchDepth": (8, "varint"),
})}


def tag(k, v):
    return {"key": k, "value": {"stringValue": v}}


for query in (
    {"serviceName": "tracing", "operationName": "fixture",
     "attributes": [tag("resource", "deployments"), tag("namespace", "default"), tag("name", "hello")],
     "startTimeMin": {"seconds": 1795305600}, "startTimeMax": {"seconds": 1795309200, "nanos": 5},
     "searchDepth": 20},
    {"serviceName": "cascade", "attributes": [tag("group", "apps"), tag("scope", "ancestors"),
                                               tag("siblings", "all")]},
    {"attributes": [tag("cpid", cpid(11))], "startTimeMin": {"seconds": 1795305600}},
):
    put("query", protobuf({"query": query}, QUERY))

kascade = kascade_binary()
if kascade is None:
    print("raw_spans: no kascade binary (KASCADE=..., or cargo build --release): not seeded")
else:
    with tempfile.TemporaryDirectory() as tmp:
        # A set key: the same seeds every time (a random one marks redacted
        # values differently at each run).
        key = pathlib.Path(tmp) / "key"
        key.write_bytes(b"kascade fuzz seeds, not a secret")
        for scenario in ("service", "config", "cpid-annotated"):
            out = pathlib.Path(tmp) / f"{scenario}.json"
            subprocess.run([str(kascade), "replay", "--cluster", "fixture",
                            "--redaction-key-file", str(key), "--output",
                            f"otlp-json={out}", str(fixtures / scenario / "audit.log")],
                           check=True, capture_output=True)
            for line in out.read_text().splitlines():
                for n, trace in enumerate(raw_traces(json.loads(line))):
                    # As /api/v3/traces/{id} answers (JSON) and as GetTraces
                    # streams it (protobuf); the JSON ones are fewer.
                    if n % 3 == 0:
                        put("raw_spans", json.dumps({"result": trace}).encode())
                    put("raw_spans", protobuf(trace, TRACES_DATA))

for rules in sorted((root / "rules").glob("*.yaml")):
    put("rules", rules.read_bytes())

# Assembled ids: the magic byte in place (libFuzzer finds the check byte),
# then a window width and a hex raw trace id as Jaeger prints it.
for windows in (1, 3, 255):
    for code in (0x00, 0x13, 0x32):
        seed = bytes(8) + (29_916_666).to_bytes(4, "big") + bytes([windows, code]) + b"k\0"
        put("trace_id", seed + (1800).to_bytes(8, "big") + b"6c3c5e1a9f0b2d4700000000690ea600")

# webhook_bodies: fixture batches as each webhook path receives them; the
# first byte picks the path (audit batch, OTLP protobuf, OTLP/JSON, gRPC)
# and gzip (fuzz/fuzz_targets/webhook_bodies.rs).
LOGS_REQUEST = {"resourceLogs": (1, {"scopeLogs": (2, {"logRecords": (2, {"body": (5, ANY)})})})}
for log in sorted(fixtures.glob("*/audit.log"))[:8]:
    lines = [l for l in log.read_text().splitlines() if l.strip()][:6]
    logs = {"resourceLogs": [{"scopeLogs": [{"logRecords": [{"body": {"stringValue": l}} for l in lines]}]}]}
    pb = protobuf(logs, LOGS_REQUEST)
    forms = {0: event_list(lines), 1: pb, 2: json.dumps(logs).encode()}
    for path, body in forms.items():
        put("webhook_bodies", bytes([path << 1]) + body)
        put("webhook_bodies", bytes([path << 1 | 1]) + gzip.compress(body))
    put("webhook_bodies", bytes([3 << 1]) + b"\0" + len(pb).to_bytes(4, "big") + pb)
    z = gzip.compress(pb)
    put("webhook_bodies", bytes([3 << 1 | 1]) + b"\1" + len(z).to_bytes(4, "big") + z)

# admission_reviews: the AdmissionReviews the real apiserver sent the
# recording webhook (e2e/fixtures/admission/*/admission.jsonl).
for reviews in sorted(fixtures.glob("admission/*/admission.jsonl")):
    for l in reviews.read_text().splitlines()[:40]:
        put("admission_reviews", l.encode())

# watch_objects: watch stream lines as the apiserver sent them (fixtures'
# watch/), and a list page of their objects.
for resource in sorted(fixtures.glob("*/watch/*.jsonl"))[:12]:
    lines = [l for l in resource.read_text().splitlines() if l.strip()][:4]
    for l in lines:
        put("watch_objects", l.encode())
    items = [json.loads(l)["object"] for l in lines]
    put("watch_objects", json.dumps({"kind": "List", "apiVersion": "v1",
                                     "metadata": {"resourceVersion": "1"}, "items": items}).encode())

for target in sorted(p.name for p in corpus.iterdir()):
    print(target, len(list((corpus / target).iterdir())), "inputs")


# spool_files: a spool segment of fixture batches as the webhook spools
# them (see src/source/spool/record.rs), behind a journal of exported links
# (src/pipeline/sent_links.rs); the first byte counts the journal's records.
def spool_record(seq, cluster, body):
    import struct
    import zlib
    c = cluster.encode()
    payload_head = struct.pack("<H", len(c)) + c + b"\0"
    rest = struct.pack("<Q", seq) + payload_head + body
    crc = zlib.crc32(rest) & 0xffffffff
    return struct.pack("<III", 0x4b53504c, len(payload_head) + len(body), crc) + rest


def journal_record(window, digest, key):
    import struct
    import zlib
    body = struct.pack("<Q", window) + digest.to_bytes(16, "little") + struct.pack("<Q", key)
    return body + struct.pack("<I", zlib.crc32(body) & 0xffffffff)


for n, log in enumerate(sorted(fixtures.glob("*/audit.log"))[:6]):
    lines = [l for l in log.read_text().splitlines() if l.strip()]
    segment = b"".join(spool_record(i + 1, "fuzz", event_list(lines[i * 4:i * 4 + 4]))
                       for i in range(min(3, len(lines) // 4)))
    journal = b"".join(journal_record(1800 * (n + 1), 7 * k + n, k) for k in range(1 + n))
    put("spool_files", bytes([1 + n]) + journal + segment)
