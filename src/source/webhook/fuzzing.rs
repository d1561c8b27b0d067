//! The webhook's body paths without a server, for the fuzz targets
//! (fuzz/); built only by `cargo fuzz` (`--cfg fuzzing`). An error is the
//! HTTP status answered and its message.

use super::*;

/// An audit batch (EventList, JSON array or lines), inflated within
/// `limit` (`--max-body-bytes`) when `gzip`, then decoded.
pub fn audit_batch(
    limit: usize,
    gzip: bool,
    data: &[u8],
) -> Result<super::super::audit::DecodedBatch, (u16, String)> {
    let encoding = if gzip {
        BodyEncoding::Gzip
    } else {
        BodyEncoding::Identity
    };
    let inflated = decompress(limit, encoding, data).map_err(|(s, m)| (s.as_u16(), m))?;
    super::super::exports::decode_body(&inflated).map_err(|m| (400, m))
}

/// An OTLP logs export as `POST /v1/logs` (protobuf, or JSON when
/// `json`) or as gRPC `LogsService/Export` (`grpc`) receives it, with
/// `Content-Encoding`/`grpc-encoding: gzip` when `gzip`: its audit
/// lines and the records that hold none.
pub fn otlp_logs(
    limit: usize,
    grpc: bool,
    json: bool,
    gzip: bool,
    data: &[u8],
) -> Result<(Bytes, Vec<String>), (u16, String)> {
    let format = match (grpc, json) {
        (true, _) => otlp_logs::Format::Grpc,
        (false, true) => otlp_logs::Format::Json,
        (false, false) => otlp_logs::Format::Protobuf,
    };
    let encoding = if gzip {
        BodyEncoding::Gzip
    } else {
        BodyEncoding::Identity
    };
    otlp_logs::records_to_lines(limit, format, encoding, data).map_err(|(s, m)| (s.as_u16(), m))
}
