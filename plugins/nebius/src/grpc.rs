//! Unary gRPC over the SDK's HTTP client: the 5-byte length-prefixed frame,
//! `grpc-status` from the trailers (or the headers of a trailers-only
//! answer), and the Nebius `ServiceError` from `grpc-status-details-bin`.

use crate::proto::{self, ServiceError, Status};
use base64::Engine;
use karpenter_plugin_sdk::http::{HttpError, Request};
use prost::Message;

/// gRPC status codes we act on.
pub mod code {
    pub const OK: i32 = 0;
    pub const CANCELLED: i32 = 1;
    pub const UNKNOWN: i32 = 2;
    pub const INVALID_ARGUMENT: i32 = 3;
    pub const DEADLINE_EXCEEDED: i32 = 4;
    pub const NOT_FOUND: i32 = 5;
    pub const ALREADY_EXISTS: i32 = 6;
    pub const PERMISSION_DENIED: i32 = 7;
    pub const RESOURCE_EXHAUSTED: i32 = 8;
    pub const FAILED_PRECONDITION: i32 = 9;
    pub const ABORTED: i32 = 10;
    pub const UNIMPLEMENTED: i32 = 12;
    pub const INTERNAL: i32 = 13;
    pub const UNAVAILABLE: i32 = 14;
    pub const UNAUTHENTICATED: i32 = 16;
}

/// A failed call: a gRPC status (with the Nebius detail when the server sent
/// one) or a transport failure.
#[derive(Debug, Clone)]
pub enum CallError {
    Status {
        code: i32,
        message: String,
        /// Boxed: the detail is large and errors travel by value.
        detail: Option<Box<ServiceError>>,
    },
    Transport(String),
}

impl CallError {
    pub fn code(&self) -> Option<i32> {
        match self {
            CallError::Status { code, .. } => Some(*code),
            CallError::Transport(_) => None,
        }
    }

    pub fn is_not_found(&self) -> bool {
        self.code() == Some(code::NOT_FOUND)
    }

    /// Worth trying again: the network, throttling, a server hiccup.
    pub fn transient(&self) -> bool {
        match self {
            CallError::Transport(_) => true,
            // Throttled (TooManyRequests), as opposed to a quota or capacity
            // that is exhausted.
            CallError::Status {
                code: code::RESOURCE_EXHAUSTED,
                detail,
                ..
            } => detail
                .as_ref()
                .is_some_and(|d| d.too_many_requests.is_some()),
            CallError::Status { code: c, .. } => matches!(
                *c,
                code::UNAVAILABLE
                    | code::DEADLINE_EXCEEDED
                    | code::ABORTED
                    | code::INTERNAL
                    | code::UNKNOWN
                    | code::CANCELLED
            ),
        }
    }

    /// quota_failure or not_enough_resources: the offering cannot launch now.
    pub fn capacity(&self) -> Option<String> {
        let CallError::Status {
            detail: Some(d),
            message,
            ..
        } = self
        else {
            return None;
        };
        if let Some(q) = &d.quota_failure {
            let what: Vec<String> = q
                .violations
                .iter()
                .map(|v| {
                    format!(
                        "{} (limit {}, requested {}): {}",
                        v.quota, v.limit, v.requested, v.message
                    )
                })
                .collect();
            return Some(format!("quota exceeded: {message}; {}", what.join("; ")));
        }
        if let Some(n) = &d.not_enough_resources {
            let what: Vec<String> = n
                .violations
                .iter()
                .map(|v| {
                    format!(
                        "{} (requested {}): {}",
                        v.resource_type, v.requested, v.message
                    )
                })
                .collect();
            return Some(format!(
                "not enough resources: {message}; {}",
                what.join("; ")
            ));
        }
        None
    }

    /// From the google.rpc.Status of a finished operation.
    pub fn from_status(s: &Status) -> CallError {
        CallError::Status {
            code: s.code,
            message: s.message.clone(),
            detail: proto::service_error(s).map(Box::new),
        }
    }
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Status {
                code,
                message,
                detail,
            } => {
                write!(f, "gRPC status {code}: {message}")?;
                if let Some(d) = detail.as_ref().filter(|d| !d.code.is_empty()) {
                    write!(f, " ({} {})", d.service, d.code)?;
                }
                Ok(())
            }
            CallError::Transport(m) => write!(f, "{m}"),
        }
    }
}

impl From<HttpError> for CallError {
    fn from(e: HttpError) -> Self {
        CallError::Transport(e.to_string())
    }
}

/// A message in a gRPC frame: uncompressed flag, big-endian length, bytes.
pub fn frame(message: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(message.len() + 5);
    out.push(0);
    out.extend_from_slice(&(message.len() as u32).to_be_bytes());
    out.extend_from_slice(message);
    out
}

/// The single message of a unary response.
pub fn unframe(body: &[u8]) -> Result<&[u8], String> {
    if body.len() < 5 {
        return Err(format!(
            "a gRPC frame needs 5 header bytes, got {}",
            body.len()
        ));
    }
    if body[0] != 0 {
        return Err("compressed gRPC frames are not supported".into());
    }
    let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
    body.get(5..5 + len)
        .ok_or_else(|| format!("gRPC frame of {len} bytes truncated at {}", body.len() - 5))
}

/// The status a response carries: trailers first, then the headers of a
/// trailers-only response.
pub fn status_of(
    headers: &[(String, String)],
    trailers: &[(String, String)],
) -> Result<(), CallError> {
    let find = |k: &str| {
        trailers
            .iter()
            .chain(headers)
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.as_str())
    };
    let Some(raw) = find("grpc-status") else {
        return Err(CallError::Transport(
            "the response carries no grpc-status".into(),
        ));
    };
    let code: i32 = raw
        .trim()
        .parse()
        .map_err(|_| CallError::Transport(format!("grpc-status {raw:?} is not a number")))?;
    if code == code::OK {
        return Ok(());
    }
    let message = percent_decode(find("grpc-message").unwrap_or_default());
    let detail = find("grpc-status-details-bin")
        .and_then(|b| {
            base64::engine::general_purpose::STANDARD_NO_PAD
                .decode(b.trim_end_matches('='))
                .ok()
        })
        .and_then(|bytes| Status::decode(bytes.as_slice()).ok())
        .and_then(|s| proto::service_error(&s))
        .map(Box::new);
    Err(CallError::Status {
        code,
        message,
        detail,
    })
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = bytes.get(i + 1..i + 3)
            && let Ok(b) = u8::from_str_radix(&String::from_utf8_lossy(hex), 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// One unary call. `endpoint` is `https://host:port` (or `http://` for an h2c
/// emulator); `idempotency_key` makes a retried mutation a no-op server-side.
pub fn call<Req: Message, Resp: Message + Default>(
    endpoint: &str,
    path: &str,
    request: &Req,
    token: Option<&str>,
    idempotency_key: Option<&str>,
) -> Result<Resp, CallError> {
    let mut r = Request::post(format!("{}{path}", endpoint.trim_end_matches('/')))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(frame(&request.encode_to_vec()));
    if let Some(t) = token {
        r = r.bearer(t);
    }
    if let Some(k) = idempotency_key {
        r = r.header("x-idempotency-key", k);
    }
    let response = r.send()?;
    if response.status != 200 {
        return Err(CallError::Transport(format!(
            "{path}: HTTP {} {}",
            response.status,
            response.text()
        )));
    }
    status_of(&response.headers, &response.trailers)?;
    let message = unframe(&response.body).map_err(CallError::Transport)?;
    Resp::decode(message).map_err(|e| CallError::Transport(format!("{path}: decoding: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn frames_round_trip() {
        let f = frame(b"hello");
        assert_eq!(&f[..5], &[0, 0, 0, 0, 5]);
        assert_eq!(unframe(&f).expect("unframe"), b"hello");
        assert!(unframe(&f[..7]).is_err());
        assert!(unframe(&[1, 0, 0, 0, 0]).is_err());
    }

    #[test]
    fn status_in_trailers_or_headers_with_the_nebius_detail() {
        assert!(status_of(&[], &kv(&[("grpc-status", "0")])).is_ok());
        assert!(status_of(&[], &[]).is_err());
        let detail = ServiceError {
            service: "compute".into(),
            code: "NotEnoughResources".into(),
            not_enough_resources: Some(proto::NotEnoughResources {
                violations: vec![proto::ResourceViolation {
                    resource_type: "gpu-h100-sxm".into(),
                    message: "no capacity".into(),
                    requested: "8".into(),
                }],
            }),
            ..Default::default()
        };
        let status = Status {
            code: code::RESOURCE_EXHAUSTED,
            message: "no".into(),
            details: vec![proto::Any {
                type_url: proto::SERVICE_ERROR_TYPE.into(),
                value: detail.encode_to_vec(),
            }],
        };
        let bin = base64::engine::general_purpose::STANDARD_NO_PAD.encode(status.encode_to_vec());
        let e = status_of(
            &kv(&[
                ("grpc-status", "8"),
                ("grpc-message", "no%20capacity"),
                ("grpc-status-details-bin", &bin),
            ]),
            &[],
        )
        .expect_err("error");
        assert_eq!(e.code(), Some(8));
        assert!(e.to_string().contains("no capacity"), "{e}");
        let capacity = e.capacity().expect("capacity");
        assert!(capacity.contains("gpu-h100-sxm"), "{capacity}");
        assert!(!e.transient());
    }

    #[test]
    fn throttling_is_transient_and_not_capacity() {
        let throttled = CallError::Status {
            code: code::RESOURCE_EXHAUSTED,
            message: "rate limit".into(),
            detail: Some(Box::new(ServiceError {
                service: "compute".into(),
                code: "TooManyRequests".into(),
                too_many_requests: Some(proto::TooManyRequests {
                    violation: "compute.instance.create per second".into(),
                }),
                ..Default::default()
            })),
        };
        assert!(throttled.transient());
        assert!(throttled.capacity().is_none());
    }
}
