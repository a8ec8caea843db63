//! A small ARM REST client: bearer token from the host's token capability,
//! retries with backoff on 429/5xx (honouring Retry-After), and long-running
//! operations polled through Azure-AsyncOperation or Location.

use crate::armerrors::ArmError;
use crate::settings::Settings;
use karpenter_plugin_sdk::http::{Request, Response};
use karpenter_plugin_sdk::prelude::*;
use serde_json::Value;
use std::time::Duration;

/// Tries of one request on throttling, server errors or transport failures.
const MAX_TRIES: u32 = 5;
/// Backoff and Retry-After are capped at this.
const MAX_WAIT: Duration = Duration::from_secs(30);
/// Polls of one long-running operation (a VM create takes a minute or two).
const MAX_POLLS: u32 = 600;

pub struct Arm {
    endpoint: String,
    token: Option<String>,
    /// ARM's last answer to a request given up on, for the caller's reason.
    gave_up: std::cell::RefCell<Option<ArmError>>,
}

impl Arm {
    pub fn new(s: &Settings) -> Result<Arm, Error> {
        let token = if s.auth {
            let t = tokens::get_token(std::slice::from_ref(&s.arm_scope))
                .map_err(|e| retryable(format!("ARM token: {e}")))?;
            Some(t.token)
        } else {
            None
        };
        Ok(Arm {
            endpoint: s.arm_endpoint.clone(),
            token,
            gave_up: Default::default(),
        })
    }

    /// GETs a list and every page after it (`nextLink`), at most
    /// `max_pages`, handing each page to `page`.
    pub fn pages(
        &self,
        first: &str,
        what: &str,
        max_pages: usize,
        mut page: impl FnMut(&Value),
    ) -> Result<(), String> {
        let mut next = Some(first.to_string());
        for _ in 0..max_pages {
            let Some(url) = next.take() else { break };
            let r = self.send("GET", &url, None).map_err(|e| format!("{e:?}"))?;
            if !r.is_success() {
                return Err(format!(
                    "{what}: {}",
                    ArmError::from_body(r.status, &r.body)
                ));
            }
            let v: Value = r.json().map_err(|e| e.to_string())?;
            page(&v);
            next = v
                .get("nextLink")
                .and_then(Value::as_str)
                .map(str::to_string);
        }
        Ok(())
    }

    /// An absolute URL for an ARM path, or the URL itself (nextLink, operation URLs).
    pub fn url(&self, path_or_url: &str) -> String {
        if path_or_url.starts_with("http://") || path_or_url.starts_with("https://") {
            path_or_url.to_string()
        } else {
            format!("{}{path_or_url}", self.endpoint)
        }
    }

    /// Sends with retries. Non-success answers other than throttling and
    /// server errors come back as `Ok` for the caller to read.
    pub fn send(
        &self,
        method: &str,
        path_or_url: &str,
        body: Option<&Value>,
    ) -> Result<Response, Error> {
        let url = self.url(path_or_url);
        let mut last = String::new();
        let mut answer = None;
        self.gave_up.replace(None);
        for attempt in 0..MAX_TRIES {
            let mut req = Request::new(method, url.clone()).header("accept", "application/json");
            if let Some(t) = &self.token {
                req = req.bearer(t);
            }
            if let Some(b) = body {
                req = req.json(b)?;
            }
            let wait = match req.send() {
                Ok(r) if r.status == 429 || r.status >= 500 => {
                    let e = ArmError::from_body(r.status, &r.body);
                    last = format!("{method} {url}: {e}");
                    answer = Some(e);
                    retry_after(&r).unwrap_or_else(|| backoff(attempt))
                }
                Ok(r) => return Ok(r),
                Err(e) => {
                    last = format!("{method} {url}: {e}");
                    answer = None;
                    // Denied by the host's allow-list: retrying cannot help.
                    if last.contains("denied by the host") {
                        return Err(fatal(last));
                    }
                    backoff(attempt)
                }
            };
            if attempt + 1 < MAX_TRIES {
                std::thread::sleep(wait.min(MAX_WAIT));
            }
        }
        *self.gave_up.borrow_mut() = answer;
        Err(retryable(format!(
            "giving up after {MAX_TRIES} tries: {last}"
        )))
    }

    /// ARM's last answer to the last request given up on (throttled or
    /// failing past every retry), if it answered at all.
    pub fn gave_up(&self) -> Option<ArmError> {
        self.gave_up.borrow().clone()
    }

    /// Waits for a long-running operation started by `response` (201/202 with
    /// Azure-AsyncOperation or Location). Err(ArmError) when it failed.
    pub fn wait(&self, response: &Response) -> Result<Result<(), ArmError>, Error> {
        if let Some(op) = response.header("azure-asyncoperation") {
            let op = op.to_string();
            let mut delay = retry_after(response);
            for _ in 0..MAX_POLLS {
                std::thread::sleep(delay.unwrap_or(Duration::from_secs(2)).min(MAX_WAIT));
                let r = self.send("GET", &op, None)?;
                if !r.is_success() {
                    return Ok(Err(ArmError::from_body(r.status, &r.body)));
                }
                let v: Value = r.json().unwrap_or(Value::Null);
                match v
                    .get("status")
                    .and_then(Value::as_str)
                    .unwrap_or("InProgress")
                {
                    "Succeeded" => return Ok(Ok(())),
                    "Failed" | "Canceled" => {
                        let e = v.get("error").cloned().unwrap_or(Value::Null);
                        return Ok(Err(ArmError::from_value(409, &e, || {
                            format!("operation {op} failed")
                        })));
                    }
                    _ => delay = retry_after(&r),
                }
            }
            return Err(retryable(format!(
                "operation {op} still running after {MAX_POLLS} polls"
            )));
        }
        if response.status == 202
            && let Some(loc) = response.header("location")
        {
            let loc = loc.to_string();
            let mut delay = retry_after(response);
            for _ in 0..MAX_POLLS {
                std::thread::sleep(delay.unwrap_or(Duration::from_secs(2)).min(MAX_WAIT));
                let r = self.send("GET", &loc, None)?;
                match r.status {
                    202 => delay = retry_after(&r),
                    s if (200..300).contains(&s) => return Ok(Ok(())),
                    s => return Ok(Err(ArmError::from_body(s, &r.body))),
                }
            }
            return Err(retryable(format!(
                "operation {loc} still running after {MAX_POLLS} polls"
            )));
        }
        Ok(Ok(()))
    }
}

fn retry_after(r: &Response) -> Option<Duration> {
    r.header("retry-after")
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs)
}

fn backoff(attempt: u32) -> Duration {
    Duration::from_millis(500u64.saturating_mul(1 << attempt.min(6)))
}
