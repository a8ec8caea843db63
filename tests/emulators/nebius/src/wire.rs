//! gRPC on the server side: the length-prefixed message in, the message and
//! `grpc-status` trailers out, or a trailers-only error carrying a Nebius
//! `ServiceError` in `grpc-status-details-bin`.

use base64::Engine;
use bytes::Bytes;
use http_body::{Body, Frame};
use hyper::header::{HeaderMap, HeaderValue};
use hyper::{Response, StatusCode};
use karpenter_plugin_nebius::grpc::{frame, unframe};
use karpenter_plugin_nebius::proto::{self, ServiceError, Status};
use prost::Message;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

/// A unary response body: one data frame, then the trailers.
pub struct GrpcBody {
    data: Option<Bytes>,
    trailers: Option<HeaderMap>,
}

impl Body for GrpcBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if let Some(d) = self.data.take() {
            return Poll::Ready(Some(Ok(Frame::data(d))));
        }
        if let Some(t) = self.trailers.take() {
            return Poll::Ready(Some(Ok(Frame::trailers(t))));
        }
        Poll::Ready(None)
    }

    fn is_end_stream(&self) -> bool {
        self.data.is_none() && self.trailers.is_none()
    }
}

pub type Reply = Response<GrpcBody>;

fn base(status: StatusCode) -> hyper::http::response::Builder {
    Response::builder()
        .status(status)
        .header("content-type", "application/grpc")
}

pub fn ok<M: Message>(m: &M) -> Reply {
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", HeaderValue::from_static("0"));
    base(StatusCode::OK)
        .body(GrpcBody {
            data: Some(Bytes::from(frame(&m.encode_to_vec()))),
            trailers: Some(trailers),
        })
        .unwrap_or_else(|_| plain(StatusCode::INTERNAL_SERVER_ERROR))
}

/// A plain HTTP answer (not gRPC at all), e.g. for a path nobody serves.
pub fn plain(status: StatusCode) -> Reply {
    let mut r = Response::new(GrpcBody {
        data: None,
        trailers: None,
    });
    *r.status_mut() = status;
    r
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b' '..=b'~' if b != b'%' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The google.rpc.Status of an error, its ServiceError in the details.
pub fn status(code: i32, message: &str, detail: Option<ServiceError>) -> Status {
    Status {
        code,
        message: message.into(),
        details: detail
            .into_iter()
            .map(|d| proto::Any {
                type_url: proto::SERVICE_ERROR_TYPE.into(),
                value: d.encode_to_vec(),
            })
            .collect(),
    }
}

/// A trailers-only error response: the status in the headers.
pub fn error(s: &Status) -> Reply {
    let mut r = base(StatusCode::OK);
    let bin = base64::engine::general_purpose::STANDARD_NO_PAD.encode(s.encode_to_vec());
    if let Ok(v) = HeaderValue::from_str(&s.code.to_string()) {
        r = r.header("grpc-status", v);
    }
    if let Ok(v) = HeaderValue::from_str(&percent_encode(&s.message)) {
        r = r.header("grpc-message", v);
    }
    if let Ok(v) = HeaderValue::from_str(&bin) {
        r = r.header("grpc-status-details-bin", v);
    }
    r.body(GrpcBody {
        data: None,
        trailers: None,
    })
    .unwrap_or_else(|_| plain(StatusCode::INTERNAL_SERVER_ERROR))
}

/// The request message, or the INVALID_ARGUMENT reply (boxed: replies are
/// large next to messages).
pub fn decode<M: Message + Default>(body: &[u8]) -> Result<M, Box<Reply>> {
    let bytes = unframe(body).map_err(|e| Box::new(error(&status(3, &e, None))))?;
    M::decode(bytes).map_err(|e| Box::new(error(&status(3, &format!("decoding: {e}"), None))))
}
