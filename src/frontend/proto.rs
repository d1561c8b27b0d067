//! Generated code of the Jaeger remote storage API v2 (see build.rs), and
//! the one message type it uses that is not generated: [`TracesMessage`].
#![allow(clippy::all, missing_docs)]
tonic::include_proto!("jaeger.storage.v2");

pub use request_codec::RequestCodec;
pub use traces_message::TracesMessage;

mod request_codec {
    #![warn(clippy::all)]
    //! The generated services' codec: prost's, but a message that does not
    //! decode (not protobuf, a string not UTF-8) is the caller's error,
    //! `InvalidArgument`, where prost's codec says `Internal`.

    use tonic::Status;
    use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
    use tonic_prost::{ProstCodec, ProstDecoder};

    /// See the module docs (`build.rs` names it as the codec).
    #[derive(Debug, Clone, Default)]
    pub struct RequestCodec<T, U>(ProstCodec<T, U>);

    impl<T, U> Codec for RequestCodec<T, U>
    where
        T: prost::Message + Send + 'static,
        U: prost::Message + Default + Send + 'static,
    {
        type Encode = T;
        type Decode = U;
        type Encoder = <ProstCodec<T, U> as Codec>::Encoder;
        type Decoder = RequestDecoder<U>;

        fn encoder(&mut self) -> Self::Encoder {
            self.0.encoder()
        }

        fn decoder(&mut self) -> Self::Decoder {
            RequestDecoder(self.0.decoder())
        }
    }

    /// Decodes as prost does, refusing what does not decode as `InvalidArgument`.
    #[derive(Debug)]
    pub struct RequestDecoder<U>(ProstDecoder<U>);

    impl<U: prost::Message + Default> Decoder for RequestDecoder<U> {
        type Item = U;
        type Error = Status;

        fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
            self.0.decode(buf).map_err(|e| {
                Status::invalid_argument(format!("the message does not decode: {}", e.message()))
            })
        }

        fn buffer_settings(&self) -> BufferSettings {
            self.0.buffer_settings()
        }
    }
}

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
