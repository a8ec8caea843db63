//! The Nebius API as this provider uses it: an access token from the
//! service-account credentials, unary calls with the bearer token, and
//! long-running operations polled to completion.

use crate::auth;
use crate::grpc::{self, CallError};
use crate::proto::{self, paths};
use crate::settings::Settings;
use karpenter_plugin_sdk::log;
use karpenter_plugin_sdk::prelude::*;
use prost::Message;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const TOKEN_KEY: &str = "iam/token";
/// A launch waits at most this long for one operation.
const OPERATION_DEADLINE: Duration = Duration::from_secs(600);
/// The waits before a transient failure is tried again.
const RETRY_DELAYS: [Duration; 3] = [
    Duration::from_millis(200),
    Duration::from_millis(500),
    Duration::from_millis(1000),
];

pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

pub struct Cloud {
    endpoint: String,
    token: String,
    poll: Duration,
}

/// An access token: the cached one while it is good, else a fresh exchange.
fn token(s: &Settings) -> Result<String, Error> {
    if let Some(t) = cache::get(TOKEN_KEY).and_then(|b| auth::decode_cached(&b, now())) {
        return Ok(t);
    }
    let secret = config::get_secret(&s.credentials_secret).map_err(|e| {
        fatal(format!(
            "the Nebius credentials secret {}: {e}",
            s.credentials_secret
        ))
    })?;
    let creds = auth::parse(&secret).map_err(fatal)?;
    let input = auth::signing_input(&creds, now());
    let signature = signing::sign(
        &s.credentials_secret,
        Some(auth::PRIVATE_KEY_POINTER),
        signing::Algorithm::Rs256,
        input.as_bytes(),
    )
    .map_err(|e| fatal(format!("signing with the Nebius credentials: {e}")))?;
    let jwt = auth::jwt(&input, &signature);
    let request = proto::ExchangeTokenRequest {
        grant_type: auth::GRANT_TYPE.into(),
        requested_token_type: auth::ACCESS_TOKEN_TYPE.into(),
        subject_token: jwt,
        subject_token_type: auth::SUBJECT_TOKEN_TYPE.into(),
    };
    let response: proto::CreateTokenResponse =
        grpc::call(&s.iam_endpoint, paths::TOKEN_EXCHANGE, &request, None, None).map_err(|e| {
            let m = format!("token exchange at {}: {e}", s.iam_endpoint);
            if e.transient() {
                retryable(m)
            } else {
                fatal(m)
            }
        })?;
    let expires_at = now() + response.expires_in.max(0) as u64;
    if expires_at > now() + auth::REFRESH_MARGIN_SECONDS {
        let ttl = expires_at - now() - auth::REFRESH_MARGIN_SECONDS;
        cache::set(
            TOKEN_KEY,
            &auth::encode_cached(&response.access_token, expires_at),
            ttl,
        );
    }
    log::debug(
        "exchanged service-account credentials for an access token",
        &[("expires_in", &response.expires_in.to_string())],
    );
    Ok(response.access_token)
}

/// Whether the credentials secret is granted to this plugin at all. Only
/// the host's denial means no: a granted secret that is missing or
/// unreadable stays an error for `Cloud::connect` to report.
pub fn credentials_granted(s: &Settings) -> bool {
    match config::get_secret(&s.credentials_secret) {
        Ok(_) => true,
        Err(e) => !auth::is_not_granted(&e),
    }
}

/// A call failure as the contract's error.
pub fn failure(what: &str, e: &CallError) -> Error {
    let m = format!("{what}: {e}");
    if e.is_not_found() {
        not_found(m)
    } else if e.transient() {
        retryable(m)
    } else {
        fatal(m)
    }
}

impl Cloud {
    pub fn connect(s: &Settings) -> Result<Cloud, Error> {
        Ok(Cloud {
            endpoint: s.api_endpoint.clone(),
            token: token(s)?,
            poll: Duration::from_millis(s.poll_ms.max(10)),
        })
    }

    /// One unary call. A transient failure (throttling, an answer lost, a
    /// server hiccup) is tried again after each of [`RETRY_DELAYS`], as
    /// Nebius' own SDKs do: a launch is several calls, and failing all of it
    /// for one of them would start it over. Every call that changes
    /// something carries an idempotency key, so a repeated create is the
    /// same create.
    pub fn call<Req: Message, Resp: Message + Default>(
        &self,
        path: &str,
        request: &Req,
        idempotency_key: Option<&str>,
    ) -> Result<Resp, CallError> {
        let mut delays = RETRY_DELAYS.iter();
        loop {
            let r = grpc::call(
                &self.endpoint,
                path,
                request,
                Some(&self.token),
                idempotency_key,
            );
            match &r {
                Err(e) if e.code() == Some(grpc::code::UNAUTHENTICATED) => {
                    // A revoked or expired token: the next call exchanges anew.
                    cache::delete(TOKEN_KEY);
                }
                Err(e) if e.transient() => {
                    if let Some(delay) = delays.next() {
                        std::thread::sleep(*delay);
                        continue;
                    }
                }
                _ => {}
            }
            return r;
        }
    }

    /// Wait for an operation; the error is the operation's own status.
    pub fn wait(&self, mut op: proto::Operation) -> Result<proto::Operation, CallError> {
        let started = std::time::Instant::now();
        loop {
            if let Some(status) = &op.status {
                return if status.code == grpc::code::OK {
                    Ok(op)
                } else {
                    Err(CallError::from_status(status))
                };
            }
            if started.elapsed() > OPERATION_DEADLINE {
                return Err(CallError::Transport(format!(
                    "operation {} still running after {:?}",
                    op.id, OPERATION_DEADLINE
                )));
            }
            std::thread::sleep(self.poll);
            op = self.call(
                paths::OPERATION_GET,
                &proto::GetOperationRequest { id: op.id.clone() },
                None,
            )?;
        }
    }

    pub fn platforms(&self, project: &str) -> Result<Vec<proto::Platform>, CallError> {
        self.list_all(
            paths::PLATFORM_LIST,
            |page_token| proto::ListPlatformsRequest {
                page_size: 100,
                page_token,
                parent_id: project.into(),
            },
            |r: proto::ListPlatformsResponse| (r.items, r.next_page_token),
        )
    }

    /// Every item of a paged List call in `project`.
    fn list_all<Req: Message, Resp: Message + Default, T>(
        &self,
        path: &str,
        request: impl Fn(String) -> Req,
        page: impl Fn(Resp) -> (Vec<T>, String),
    ) -> Result<Vec<T>, CallError> {
        let mut out = Vec::new();
        let mut page_token = String::new();
        loop {
            let (items, next) = page(self.call(path, &request(page_token), None)?);
            out.extend(items);
            if next.is_empty() {
                return Ok(out);
            }
            page_token = next;
        }
    }

    pub fn instances(&self, project: &str) -> Result<Vec<proto::Instance>, CallError> {
        self.list_all(
            paths::INSTANCE_LIST,
            |page_token| proto::ListInstancesRequest {
                parent_id: project.into(),
                page_size: 100,
                page_token,
            },
            |r: proto::ListInstancesResponse| (r.items, r.next_page_token),
        )
    }

    pub fn disks(&self, project: &str) -> Result<Vec<proto::Disk>, CallError> {
        self.list_all(
            paths::DISK_LIST,
            |page_token| proto::ListDisksRequest {
                parent_id: project.into(),
                page_size: 100,
                page_token,
            },
            |r: proto::ListDisksResponse| (r.items, r.next_page_token),
        )
    }

    /// A resource by name; None when there is none.
    fn by_name<T: Message + Default>(
        &self,
        path: &str,
        project: &str,
        name: &str,
    ) -> Result<Option<T>, CallError> {
        let by_name = proto::GetByNameRequest {
            parent_id: project.into(),
            name: name.into(),
        };
        match self.call(path, &by_name, None) {
            Ok(found) => Ok(Some(found)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    pub fn instance_by_name(
        &self,
        project: &str,
        name: &str,
    ) -> Result<Option<proto::Instance>, CallError> {
        self.by_name(paths::INSTANCE_GET_BY_NAME, project, name)
    }

    pub fn disk_by_name(
        &self,
        project: &str,
        name: &str,
    ) -> Result<Option<proto::Disk>, CallError> {
        self.by_name(paths::DISK_GET_BY_NAME, project, name)
    }
}
