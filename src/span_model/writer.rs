//! The span writer: a span encoded straight into protobuf as it is built.

use super::*;

/// A span written straight into its protobuf encoding
/// (`opentelemetry.proto.trace.v1.Span`), attributes, events and links
/// appended as they come. Building message structs first cost more than
/// everything else the exporter did: every span's many small strings were
/// allocated, measured and copied twice, then freed.
///
/// Every string value (attributes, span-event attributes, name, status
/// message) is cut to the value cap on a character boundary; a cut value is
/// followed by `<key>.truncated_from` = its original length in bytes.
pub struct SpanBuf {
    buf: Vec<u8>,
    error: Option<String>,
    max_value: usize,
}

/// A finished span, protobuf-encoded.
#[derive(Clone, Debug)]
pub struct EncodedSpan(pub bytes::Bytes);

impl EncodedSpan {
    /// The span as a message (tests, offline tools, JSON output).
    pub fn decode(&self) -> Span {
        use prost::Message as _;
        // Only ever built by SpanBuf: a failure is a bug in the writer.
        Span::decode(self.0.as_ref()).expect("SpanBuf writes valid protobuf")
    }
}

// Field numbers of opentelemetry.proto.trace.v1.Span and its parts.
const SPAN_TRACE_ID: u32 = 1;
const SPAN_SPAN_ID: u32 = 2;
const SPAN_PARENT_SPAN_ID: u32 = 4;
const SPAN_NAME: u32 = 5;
const SPAN_KIND: u32 = 6;
const SPAN_START: u32 = 7;
const SPAN_END: u32 = 8;
const SPAN_ATTRIBUTES: u32 = 9;
const SPAN_EVENTS: u32 = 11;
const SPAN_LINKS: u32 = 13;
const SPAN_STATUS: u32 = 15;
const SPAN_FLAGS: u32 = 16;

/// Sampled, and the parent is known to be local (as the SDK marks it).
fn span_flags() -> u32 {
    TraceFlags::SAMPLED.to_u8() as u32 | SpanFlags::ContextHasIsRemoteMask as u32
}

/// A span buffer's first capacity: object, link and Event spans fit
/// (callgrind: 512 bytes or less); audit spans ask for more.
const CAPACITY: usize = 512;

impl SpanBuf {
    pub(super) fn new(
        trace_id: TraceId,
        span_id: SpanId,
        parent: SpanId,
        name: &str,
        start: SystemTime,
        end: SystemTime,
    ) -> Self {
        Self::with_capacity(trace_id, span_id, parent, name, (start, end), CAPACITY)
    }

    /// [`Self::new`] with room for `capacity` bytes before it grows (an
    /// audit span's attributes and diffs are a few kilobytes).
    pub(super) fn with_capacity(
        trace_id: TraceId,
        span_id: SpanId,
        parent: SpanId,
        name: &str,
        (start, end): (SystemTime, SystemTime),
        capacity: usize,
    ) -> Self {
        Self::build(
            trace_id,
            span_id,
            parent,
            name,
            (start, end),
            max_value_bytes(),
            capacity,
        )
    }

    /// A span with its own cap on values (the tests' small caps).
    #[cfg(test)]
    pub(super) fn with_max_value(
        trace_id: TraceId,
        span_id: SpanId,
        parent: SpanId,
        name: &str,
        times: (SystemTime, SystemTime),
        max_value: usize,
    ) -> Self {
        Self::build(trace_id, span_id, parent, name, times, max_value, CAPACITY)
    }

    fn build(
        trace_id: TraceId,
        span_id: SpanId,
        parent: SpanId,
        name: &str,
        (start, end): (SystemTime, SystemTime),
        max_value: usize,
        capacity: usize,
    ) -> Self {
        let mut buf = Vec::with_capacity(capacity);
        wire::bytes(&mut buf, SPAN_TRACE_ID, &trace_id.to_bytes());
        wire::bytes(&mut buf, SPAN_SPAN_ID, &span_id.to_bytes());
        if parent != SpanId::INVALID {
            wire::bytes(&mut buf, SPAN_PARENT_SPAN_ID, &parent.to_bytes());
        }
        let short_name = truncate_str(name, max_value);
        wire::bytes(&mut buf, SPAN_NAME, short_name.as_bytes());
        wire::varint(&mut buf, SPAN_KIND, span::SpanKind::Internal as u64);
        wire::fixed64(&mut buf, SPAN_START, nanos(start));
        wire::fixed64(&mut buf, SPAN_END, nanos(end));
        let mut s = Self {
            buf,
            error: None,
            max_value,
        };
        if short_name.len() < name.len() {
            VALUES_TRUNCATED.inc();
            s.attr_int(NAME_TRUNCATED_FROM, name.len() as i64);
        }
        s
    }

    pub fn attr(&mut self, key: &str, value: &str) {
        let short = truncate_str(value, self.max_value);
        wire::kv_str(&mut self.buf, SPAN_ATTRIBUTES, key, short);
        if short.len() < value.len() {
            VALUES_TRUNCATED.inc();
            wire::kv_int(
                &mut self.buf,
                SPAN_ATTRIBUTES,
                &truncated_from_key(key),
                value.len() as i64,
            );
        }
    }

    pub fn attr_int(&mut self, key: &str, value: i64) {
        wire::kv_int(&mut self.buf, SPAN_ATTRIBUTES, key, value);
    }

    /// A span event (a diff entry, a snapshot) with string attributes.
    pub fn event(&mut self, name: &str, at: SystemTime, attrs: &[(&str, &str)]) {
        // Written in place, its length computed first: a scratch buffer per
        // span cost an allocation and a copy per event (callgrind), and the
        // span's buffer grows at most once.
        let max_value = self.max_value;
        let attr_len = |(k, v): &(&str, &str)| {
            let short = truncate_str(v, max_value);
            let mut len = wire::kv_str_len(k, short);
            if short.len() < v.len() {
                len += wire::kv_int_len(&truncated_from_key(k), v.len() as i64);
            }
            len
        };
        let len = 9 + wire::framed_len(name.len()) + attrs.iter().map(attr_len).sum::<usize>();
        self.buf.reserve(wire::framed_len(len));
        wire::len_prefix(&mut self.buf, SPAN_EVENTS, len);
        let body = self.buf.len();
        wire::fixed64(&mut self.buf, 1, nanos(at));
        wire::bytes(&mut self.buf, 2, name.as_bytes());
        for (k, v) in attrs {
            let short = truncate_str(v, max_value);
            wire::kv_str(&mut self.buf, 3, k, short);
            if short.len() < v.len() {
                VALUES_TRUNCATED.inc();
                wire::kv_int(&mut self.buf, 3, &truncated_from_key(k), v.len() as i64);
            }
        }
        debug_assert_eq!(self.buf.len() - body, len, "event {name}");
    }

    pub(super) fn link(&mut self, to: &ObjectWindow, attrs: &[(&str, &str)]) {
        self.link_ids(&to.trace_id().to_bytes(), &to.span_id().to_bytes(), attrs);
    }

    /// An OpenTelemetry link to the span `span_id` of trace `trace_id`.
    pub fn link_ids(&mut self, trace_id: &[u8; 16], span_id: &[u8; 8], attrs: &[(&str, &str)]) {
        // Written in place, as events are.
        let len = wire::framed_len(trace_id.len())
            + wire::framed_len(span_id.len())
            + attrs
                .iter()
                .map(|(k, v)| wire::kv_str_len(k, v))
                .sum::<usize>()
            + 5;
        self.buf.reserve(wire::framed_len(len));
        wire::len_prefix(&mut self.buf, SPAN_LINKS, len);
        let body = self.buf.len();
        wire::bytes(&mut self.buf, 1, trace_id);
        wire::bytes(&mut self.buf, 2, span_id);
        for (k, v) in attrs {
            wire::kv_str(&mut self.buf, 4, k, v);
        }
        wire::fixed32(&mut self.buf, 6, span_flags());
        debug_assert_eq!(self.buf.len() - body, len, "link");
    }

    /// Marks the span failed with `message`.
    pub fn set_error(&mut self, message: String) {
        self.error = Some(message);
    }

    pub fn finish(mut self) -> EncodedSpan {
        match self.error.take() {
            Some(message) => {
                let short = truncate_str(&message, self.max_value);
                if short.len() < message.len() {
                    VALUES_TRUNCATED.inc();
                    self.attr_int(STATUS_MESSAGE_TRUNCATED_FROM, message.len() as i64);
                }
                let code = status::StatusCode::Error as u64;
                let message_len = match short.is_empty() {
                    true => 0,
                    false => wire::framed_len(short.len()),
                };
                let len = message_len + 1 + prost::encoding::encoded_len_varint(code);
                wire::len_prefix(&mut self.buf, SPAN_STATUS, len);
                if !short.is_empty() {
                    wire::bytes(&mut self.buf, 2, short.as_bytes());
                }
                wire::varint(&mut self.buf, 3, code);
            }
            None => wire::len_prefix(&mut self.buf, SPAN_STATUS, 0),
        }
        wire::fixed32(&mut self.buf, SPAN_FLAGS, span_flags());
        EncodedSpan(self.buf.into())
    }
}
