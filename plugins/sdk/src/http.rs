//! A blocking HTTP client over `wasi:http/outgoing-handler`.
//!
//! The host sends the request through its own pooled client (HTTP/1.1 or
//! HTTP/2 by ALPN), and only to hosts on the plugin's allow-list; a request to
//! any other host fails with `HttpRequestDenied`.

use crate::bindings::wasi::http::outgoing_handler;
use crate::bindings::wasi::http::types::{
    ErrorCode, Fields, IncomingBody, Method, OutgoingBody, OutgoingRequest, Scheme,
};
use crate::bindings::wasi::io::streams::StreamError;

/// A request under construction: `Request::new("GET", url).header(..).send()`.
#[derive(Debug, Clone)]
pub struct Request {
    method: String,
    url: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Trailers, as gRPC sends its status in them.
    pub trailers: Vec<(String, String)>,
}

#[derive(Debug, Clone)]
pub enum HttpError {
    InvalidUrl(String),
    /// The host refused the request or the transport failed.
    Transport(String),
}

impl std::fmt::Display for HttpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HttpError::InvalidUrl(u) => write!(f, "invalid URL {u:?}"),
            HttpError::Transport(m) => write!(f, "HTTP request failed: {m}"),
        }
    }
}

impl std::error::Error for HttpError {}

impl Request {
    pub fn new(method: &str, url: impl Into<String>) -> Self {
        Request {
            method: method.to_string(),
            url: url.into(),
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    pub fn get(url: impl Into<String>) -> Self {
        Self::new("GET", url)
    }

    pub fn post(url: impl Into<String>) -> Self {
        Self::new("POST", url)
    }

    pub fn put(url: impl Into<String>) -> Self {
        Self::new("PUT", url)
    }

    pub fn delete(url: impl Into<String>) -> Self {
        Self::new("DELETE", url)
    }

    pub fn header(mut self, name: &str, value: impl Into<String>) -> Self {
        self.headers.push((name.to_ascii_lowercase(), value.into()));
        self
    }

    pub fn bearer(self, token: &str) -> Self {
        self.header("authorization", format!("Bearer {token}"))
    }

    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    /// A JSON body with its content type.
    pub fn json<T: serde::Serialize>(self, value: &T) -> Result<Self, serde_json::Error> {
        let body = serde_json::to_vec(value)?;
        Ok(self.header("content-type", "application/json").body(body))
    }

    /// Send and wait for the whole response.
    pub fn send(self) -> Result<Response, HttpError> {
        let url = Url::parse(&self.url)?;
        let mut headers = self.headers;
        if !self.body.is_empty() || matches!(self.method.as_str(), "POST" | "PUT" | "PATCH") {
            headers.push(("content-length".into(), self.body.len().to_string()));
        }
        let fields: Vec<(String, Vec<u8>)> = headers
            .into_iter()
            .map(|(k, v)| (k, v.into_bytes()))
            .collect();
        let fields = Fields::from_list(&fields).map_err(|e| transport(format!("header: {e:?}")))?;
        let request = OutgoingRequest::new(fields);
        let method = match self.method.as_str() {
            "GET" => Method::Get,
            "POST" => Method::Post,
            "PUT" => Method::Put,
            "DELETE" => Method::Delete,
            "PATCH" => Method::Patch,
            "HEAD" => Method::Head,
            other => Method::Other(other.to_string()),
        };
        let invalid = |what: &str| HttpError::InvalidUrl(format!("{} ({what})", self.url));
        request
            .set_method(&method)
            .map_err(|()| invalid("method"))?;
        let scheme = if url.https {
            Scheme::Https
        } else {
            Scheme::Http
        };
        request
            .set_scheme(Some(&scheme))
            .map_err(|()| invalid("scheme"))?;
        request
            .set_authority(Some(url.authority))
            .map_err(|()| invalid("authority"))?;
        request
            .set_path_with_query(Some(url.path))
            .map_err(|()| invalid("path"))?;
        let out_body = request
            .body()
            .map_err(|()| transport("request body taken twice"))?;

        // Hand the request over first: the host starts sending while we stream
        // the body into it.
        let pending = outgoing_handler::handle(request, None).map_err(code)?;
        {
            let stream = out_body
                .write()
                .map_err(|()| transport("body stream taken twice"))?;
            for chunk in self.body.chunks(4096) {
                stream
                    .blocking_write_and_flush(chunk)
                    .map_err(|e| transport(format!("{e:?}")))?;
            }
        }
        OutgoingBody::finish(out_body, None).map_err(code)?;

        let response = loop {
            match pending.get() {
                Some(result) => break result,
                None => pending.subscribe().block(),
            }
        };
        let response = response
            .map_err(|()| transport("response taken twice"))?
            .map_err(code)?;
        let status = response.status();
        let headers = entries(&response.headers());
        let incoming = response
            .consume()
            .map_err(|()| transport("response body taken twice"))?;
        let mut body = Vec::new();
        {
            let stream = incoming
                .stream()
                .map_err(|()| transport("body stream taken twice"))?;
            loop {
                match stream.blocking_read(64 * 1024) {
                    Ok(chunk) => body.extend_from_slice(&chunk),
                    Err(StreamError::Closed) => break,
                    Err(StreamError::LastOperationFailed(e)) => {
                        return Err(transport(e.to_debug_string()));
                    }
                }
            }
        }
        let trailers = IncomingBody::finish(incoming);
        let trailers = loop {
            match trailers.get() {
                Some(result) => break result,
                None => trailers.subscribe().block(),
            }
        };
        let trailers = match trailers {
            Ok(Ok(Some(fields))) => entries(&fields),
            Ok(Ok(None)) => Vec::new(),
            Ok(Err(e)) => return Err(code(e)),
            Err(()) => Vec::new(),
        };
        Ok(Response {
            status,
            headers,
            body,
            trailers,
        })
    }
}

impl Response {
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_slice(&self.body)
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The first header with this (lower-case) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The first trailer with this (lower-case) name.
    pub fn trailer(&self, name: &str) -> Option<&str> {
        self.trailers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

fn entries(fields: &Fields) -> Vec<(String, String)> {
    fields
        .entries()
        .into_iter()
        .map(|(k, v)| (k, String::from_utf8_lossy(&v).into_owned()))
        .collect()
}

fn transport(message: impl Into<String>) -> HttpError {
    HttpError::Transport(message.into())
}

fn code(e: ErrorCode) -> HttpError {
    match e {
        ErrorCode::HttpRequestDenied => {
            transport("denied by the host: not on the plugin's allowed hosts")
        }
        other => transport(format!("{other:?}")),
    }
}

/// The parts of an absolute http(s) URL that wasi:http needs.
struct Url<'a> {
    https: bool,
    authority: &'a str,
    path: &'a str,
}

impl<'a> Url<'a> {
    fn parse(url: &'a str) -> Result<Self, HttpError> {
        let (https, rest) = if let Some(rest) = url.strip_prefix("https://") {
            (true, rest)
        } else if let Some(rest) = url.strip_prefix("http://") {
            (false, rest)
        } else {
            return Err(HttpError::InvalidUrl(url.to_string()));
        };
        let split = rest.find('/').unwrap_or(rest.len());
        let (authority, path) = rest.split_at(split);
        if authority.is_empty() {
            return Err(HttpError::InvalidUrl(url.to_string()));
        }
        Ok(Url {
            https,
            authority,
            path: if path.is_empty() { "/" } else { path },
        })
    }
}

/// Percent-encode a query value.
pub fn encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}
