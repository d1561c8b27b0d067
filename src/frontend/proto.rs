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
    /// (≈ 60 ms a request for a 1,000-Pod trace: `cargo bench --bench
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
}
