//! A request body as OTLP sends it: its encoding from `Content-Type`, gzip undone with the
//! same bound as the body itself, so a small compressed body cannot grow without limit.

use std::io::Read;

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Protobuf,
    Json,
}

/// Why a request is refused, as the answer says it.
#[derive(Debug)]
pub struct Refused {
    status: StatusCode,
    reason: String,
}

impl Refused {
    pub fn bad(reason: String) -> Refused {
        Refused {
            status: StatusCode::BAD_REQUEST,
            reason,
        }
    }
}

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        (self.status, self.reason).into_response()
    }
}

/// The body's encoding and bytes, gunzipped when it says so.
pub fn read(headers: &HeaderMap, body: Bytes, max: usize) -> Result<(Encoding, Vec<u8>), Refused> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let media = content_type.split(';').next().unwrap_or("").trim();
    let encoding = match media {
        "application/x-protobuf" | "application/protobuf" => Encoding::Protobuf,
        "application/json" => Encoding::Json,
        other => {
            return Err(Refused {
                status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
                reason: format!(
                    "content type {other:?}: OTLP over HTTP is application/x-protobuf or application/json"
                ),
            });
        }
    };
    let coding = headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("identity")
        .trim()
        .to_ascii_lowercase();
    let bytes = match coding.as_str() {
        "identity" | "" => body.to_vec(),
        "gzip" => {
            let mut out = Vec::new();
            let mut reader = flate2::read::GzDecoder::new(&body[..]).take(max as u64 + 1);
            reader
                .read_to_end(&mut out)
                .map_err(|e| Refused::bad(format!("the gzip body does not decompress: {e}")))?;
            if out.len() > max {
                return Err(Refused {
                    status: StatusCode::PAYLOAD_TOO_LARGE,
                    reason: format!("the body decompresses to more than {max} bytes"),
                });
            }
            out
        }
        other => {
            return Err(Refused {
                status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
                reason: format!("content encoding {other:?}: gzip or none"),
            });
        }
    };
    Ok((encoding, bytes))
}
