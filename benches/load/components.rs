//! kube-apiserver's own traces for the load, as an apiserver tracing every
//! request (`samplingRatePerMillion: 1000000`) would export them beside its
//! audit events: one request trace per audit event of the stream.
//!
//! The traces are derived from the captured ones of two whole-cluster runs
//! (`e2e/corpus/traced-healthy`, `e2e/corpus/slow-webhook`: real
//! kube-apiserver v1.36 traces, OTLP/JSON, one request a line), reused
//! cyclically: each event gets a captured trace of a write of its verb and
//! resource (its subresource too when one was captured), with a fresh trace
//! id, fresh span ids (parent links kept), the event's audit ID on every
//! `audit-id` tag and its times moved to the event's. Encoded as OTLP
//! protobuf, up to 512 spans a request (the OpenTelemetry Go SDK's batch
//! size), one `ResourceSpans` per trace.
#![allow(dead_code)]

use std::io::Read;
use std::time::UNIX_EPOCH;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::trace::v1::ResourceSpans;
use prost::Message;
use serde_json::Value;

use super::Stream;

const CAPTURED: [&str; 2] = [
    "e2e/corpus/traced-healthy/apiserver-traces.jsonl.gz",
    "e2e/corpus/slow-webhook/apiserver-traces.jsonl.gz",
];
/// Spans in one export request at most (the Go SDK's `MaxExportBatchSize`).
pub const MAX_SPANS_PER_REQUEST: usize = 512;

/// One captured request trace: as captured, and a working copy whose ids,
/// times and audit IDs are overwritten for each use (no allocation per use).
#[derive(Clone)]
struct Captured {
    pristine: Vec<ResourceSpans>,
    work: Vec<ResourceSpans>,
    /// The earliest span start, ns since the epoch.
    start: u64,
    spans: usize,
}

/// Clone one per sender: each has its working copies.
#[derive(Clone)]
pub struct ComponentTraces {
    captured: Vec<Captured>,
    /// Per template of the load, the captured traces of its kind of write.
    by_template: Vec<Vec<usize>>,
    /// Per template, its audit ID up to the copy number.
    audit_id_prefix: Vec<String>,
    /// Traces per request (whole traces, at most MAX_SPANS_PER_REQUEST spans).
    pub traces_per_request: usize,
    seed: u64,
}

/// The (HTTP method, resource, subresource) of a request trace: its
/// handler span's `verb`, `resource` and `subresource` tags.
fn kind_of(rs: &[ResourceSpans]) -> Option<(String, String, String)> {
    for span in rs
        .iter()
        .flat_map(|r| &r.scope_spans)
        .flat_map(|s| &s.spans)
    {
        let tag = |key: &str| {
            span.attributes
                .iter()
                .find(|kv| kv.key == key)
                .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
                    Any::StringValue(s) => Some(s.clone()),
                    _ => None,
                })
        };
        if let Some(verb) = tag("verb") {
            return Some((
                verb,
                tag("resource").unwrap_or_default(),
                tag("subresource").unwrap_or_default(),
            ));
        }
    }
    None
}

/// The HTTP method an audit verb's request has.
fn method(verb: &str) -> &'static [&'static str] {
    match verb {
        "create" => &["POST"],
        "update" => &["PUT"],
        "patch" => &["PATCH", "APPLY"],
        "delete" => &["DELETE"],
        _ => &[],
    }
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn xor_into(out: &mut Vec<u8>, from: &[u8], key: &[u8]) {
    out.clear();
    out.extend(from.iter().zip(key.iter().cycle()).map(|(a, b)| a ^ b));
}

impl ComponentTraces {
    /// The captured traces, matched to the load's templates (`texts`: the
    /// audit events with their placeholders, as `load::templates` makes them).
    pub fn new(texts: &[String]) -> Self {
        let mut captured = Vec::new();
        for file in CAPTURED {
            let path = format!("{}/{file}", env!("CARGO_MANIFEST_DIR"));
            let mut text = String::new();
            flate2::read::GzDecoder::new(std::fs::File::open(&path).expect("captured traces"))
                .read_to_string(&mut text)
                .expect("gzip");
            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                let req: ExportTraceServiceRequest =
                    serde_json::from_str(line).expect("OTLP/JSON TracesData");
                let spans: Vec<_> = req
                    .resource_spans
                    .iter()
                    .flat_map(|r| &r.scope_spans)
                    .flat_map(|s| &s.spans)
                    .collect();
                let start = spans
                    .iter()
                    .map(|s| s.start_time_unix_nano)
                    .min()
                    .unwrap_or(0);
                let n = spans.len();
                captured.push(Captured {
                    work: req.resource_spans.clone(),
                    pristine: req.resource_spans,
                    start,
                    spans: n,
                });
            }
        }
        let kinds: Vec<_> = captured.iter().map(|c| kind_of(&c.pristine)).collect();
        let mut by_template = Vec::new();
        let mut audit_id_prefix = Vec::new();
        for t in texts {
            let ev: Value = serde_json::from_str(t).expect("templates are JSON");
            let verb = ev["verb"].as_str().unwrap_or("");
            let resource = ev["objectRef"]["resource"].as_str().unwrap_or("");
            let sub = ev["objectRef"]["subresource"].as_str().unwrap_or("");
            let of = |exact_sub: bool| -> Vec<usize> {
                (0..captured.len())
                    .filter(|&i| {
                        kinds[i].as_ref().is_some_and(|(m, r, s)| {
                            method(verb).contains(&m.as_str())
                                && r == resource
                                && (!exact_sub || s == sub)
                        })
                    })
                    .collect()
            };
            let mut matched = of(true);
            if matched.is_empty() {
                matched = of(false);
            }
            if matched.is_empty() {
                matched = (0..captured.len()).collect();
            }
            by_template.push(matched);
            let id = ev["auditID"].as_str().expect("auditID");
            let cut = id
                .find("__KASCADE_BENCH_ID__")
                .expect("an audit ID placeholder");
            audit_id_prefix.push(id[..cut].to_string());
        }
        let most = captured.iter().map(|c| c.spans).max().unwrap_or(1).max(1);
        let seed = std::time::SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos() as u64;
        ComponentTraces {
            captured,
            by_template,
            audit_id_prefix,
            traces_per_request: (MAX_SPANS_PER_REQUEST / most).max(1),
            seed,
        }
    }

    /// The `ExportTraceServiceRequest` (protobuf) of events `range`'s request
    /// traces, with the number of spans in it.
    pub fn request(&mut self, stream: &Stream, range: std::ops::Range<usize>) -> (Vec<u8>, usize) {
        use std::fmt::Write;
        let mut body = Vec::with_capacity(range.len() * 4096);
        let mut spans = 0;
        let mut audit_id = String::new();
        for i in range {
            let (copy, k) = stream.event(i);
            let choices = &self.by_template[k];
            let c = &mut self.captured[choices[copy % choices.len()]];
            audit_id.clear();
            write!(audit_id, "{}{copy}", self.audit_id_prefix[k]).unwrap();
            let at = stream
                .received_at(i)
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos() as i64;
            let shift = at - c.start as i64;
            let moved = |t: u64| if t == 0 { 0 } else { (t as i64 + shift) as u64 };
            let trace_key = [
                splitmix(self.seed ^ i as u64).to_le_bytes(),
                splitmix(!self.seed ^ i as u64).to_le_bytes(),
            ]
            .concat();
            let span_key = splitmix(self.seed.rotate_left(17) ^ i as u64).to_le_bytes();
            for (work, pristine) in c.work.iter_mut().zip(&c.pristine) {
                for (ws, ps) in work.scope_spans.iter_mut().zip(&pristine.scope_spans) {
                    for (w, p) in ws.spans.iter_mut().zip(&ps.spans) {
                        xor_into(&mut w.trace_id, &p.trace_id, &trace_key);
                        xor_into(&mut w.span_id, &p.span_id, &span_key);
                        xor_into(&mut w.parent_span_id, &p.parent_span_id, &span_key);
                        w.start_time_unix_nano = moved(p.start_time_unix_nano);
                        w.end_time_unix_nano = moved(p.end_time_unix_nano);
                        for (we, pe) in w.events.iter_mut().zip(&p.events) {
                            we.time_unix_nano = moved(pe.time_unix_nano);
                        }
                        for kv in w.attributes.iter_mut().filter(|kv| kv.key == "audit-id") {
                            if let Some(Any::StringValue(s)) =
                                kv.value.as_mut().and_then(|v| v.value.as_mut())
                            {
                                s.clear();
                                s.push_str(&audit_id);
                            }
                        }
                    }
                }
                // ExportTraceServiceRequest.resource_spans is field 1.
                body.push(0x0a);
                work.encode_length_delimited(&mut body).unwrap();
            }
            spans += c.spans;
        }
        (body, spans)
    }
}
