//! Generated code of the Jaeger remote storage API v2 (see build.rs), and
//! the one message type it uses that is not generated: [`TracesMessage`].
#![allow(clippy::all, missing_docs)]
tonic::include_proto!("jaeger.storage.v2");

pub use traces_message::TracesMessage;

mod traces_message {
    #![warn(clippy::all)]

    use bytes::{Buf, BufMut, Bytes};
    use opentelemetry_proto::tonic::trace::v1::TracesData;
    use prost::encoding::{DecodeContext, WireType};
    use prost::{DecodeError, Message};

    /// `opentelemetry.proto.trace.v1.TracesData`, the message `GetTraces`
    /// and `FindTraces` stream: decoded as read from the raw Jaeger, or
    /// already encoded as the frontend serves a cached trace. A warm answer
    /// then copies bytes instead of cloning and encoding every span again
    /// (≈ 70 ms a request for a 1,000-Pod trace: `cargo bench --bench
    /// assemble -- stream_cached`).
    #[derive(Clone, Debug, PartialEq)]
    pub enum TracesMessage {
        Decoded(TracesData),
        /// The encoded fields of a `TracesData` (no length prefix).
        Encoded(Bytes),
    }

    impl Default for TracesMessage {
        fn default() -> Self {
            Self::Decoded(TracesData::default())
        }
    }

    impl TracesMessage {
        /// The message as `TracesData`, decoding it when it is bytes.
        pub fn into_decoded(self) -> Result<TracesData, DecodeError> {
            match self {
                Self::Decoded(d) => Ok(d),
                Self::Encoded(b) => TracesData::decode(b),
            }
        }
    }

    impl Message for TracesMessage {
        fn encode_raw(&self, buf: &mut impl BufMut) {
            match self {
                Self::Decoded(d) => d.encode_raw(buf),
                Self::Encoded(b) => buf.put_slice(b),
            }
        }

        fn merge_field(
            &mut self,
            tag: u32,
            wire_type: WireType,
            buf: &mut impl Buf,
            ctx: DecodeContext,
        ) -> Result<(), DecodeError> {
            if let Self::Encoded(b) = self {
                *self = Self::Decoded(TracesData::decode(b.clone())?);
            }
            match self {
                Self::Decoded(d) => d.merge_field(tag, wire_type, buf, ctx),
                Self::Encoded(_) => unreachable!("decoded above"),
            }
        }

        fn encoded_len(&self) -> usize {
            match self {
                Self::Decoded(d) => d.encoded_len(),
                Self::Encoded(b) => b.len(),
            }
        }

        fn clear(&mut self) {
            *self = Self::default();
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;
        use crate::frontend::offline::store_from_audit_lines;

        /// The deployment fixture's trace, as the frontend streams it.
        async fn fixture_traces() -> TracesData {
            use crate::frontend::raw::{TimeRange, from_nanos};
            use crate::frontend::{Frontend, SearchQuery};
            let path = concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/e2e/fixtures/deployment/audit.log"
            );
            let lines = std::fs::read_to_string(path).unwrap();
            let (store, errors) = store_from_audit_lines(
                lines.lines().map(str::to_string).collect::<Vec<_>>(),
                "test",
                std::sync::Arc::new(crate::app::load_rules(None).unwrap()),
                &Default::default(),
                Default::default(),
                crate::aggregate::redact::Redactor::new(None),
            )
            .await;
            assert!(errors.is_empty(), "{errors:?}");
            let (a, b) = store.time_span().unwrap();
            let f = Frontend::new(std::sync::Arc::new(store), Default::default());
            let found = f
                .search(&SearchQuery {
                    mode: crate::frontend::display::Mode::Tracing,
                    scope: crate::frontend::assemble::Scope::Full,
                    tags: vec![
                        ("resource".into(), "deployments".into()),
                        ("name".into(), "hello".into()),
                    ],
                    range: TimeRange::new(from_nanos(a), from_nanos(b)),
                    limit: 1,
                })
                .await
                .unwrap();
            TracesData {
                resource_spans: found[0].resource_spans.clone(),
            }
        }

        #[tokio::test]
        async fn encoded_messages_go_on_the_wire_as_the_message_they_were_encoded_from() {
            let data = fixture_traces().await;
            assert!(data.resource_spans.len() > 1);
            let decoded = TracesMessage::Decoded(data.clone());
            let encoded = TracesMessage::Encoded(Bytes::from(data.encode_to_vec()));
            assert_eq!(encoded.encoded_len(), decoded.encoded_len());
            assert_eq!(encoded.encode_to_vec(), decoded.encode_to_vec());
            // Read back, either is the same TracesData.
            let read = TracesMessage::decode(encoded.encode_to_vec().as_slice()).unwrap();
            assert_eq!(read, decoded);
            assert_eq!(encoded.clone().into_decoded().unwrap(), data);
            // Fields merged into an encoded message land after its own.
            let mut merged = encoded;
            merged.merge(data.encode_to_vec().as_slice()).unwrap();
            let twice = merged.into_decoded().unwrap();
            assert_eq!(twice.resource_spans.len(), 2 * data.resource_spans.len());
            assert_eq!(
                twice.resource_spans[..data.resource_spans.len()],
                data.resource_spans
            );
        }
    }
}
