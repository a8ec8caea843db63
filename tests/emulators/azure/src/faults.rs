//! HTTP-level faults: ARM answering 429 (throttling) or 5xx for a while,
//! with a Retry-After header, before the request is even looked at. Unlike
//! `Injection` (a VM create whose operation fails), these are what a client
//! should retry.

use serde_json::{Value, json};

#[derive(Clone, Debug, PartialEq)]
pub struct Fault {
    /// 429, 500, 502, 503, ...
    pub status: u16,
    /// Seconds in the Retry-After header; none: no header.
    pub retry_after: Option<u64>,
    /// Only requests with this method ("PUT"); none: any.
    pub method: Option<String>,
    /// Only paths containing this (case-insensitive); none: any.
    pub path: Option<String>,
    /// Requests to fail; `u32::MAX`: for ever.
    pub count: u32,
}

impl Fault {
    pub fn matches(&self, method: &str, path: &str) -> bool {
        self.count > 0
            && self
                .method
                .as_deref()
                .is_none_or(|m| m.eq_ignore_ascii_case(method))
            && self
                .path
                .as_deref()
                .is_none_or(|p| path.to_ascii_lowercase().contains(&p.to_ascii_lowercase()))
    }

    /// ARM's error body for the status.
    pub fn body(&self) -> Value {
        let (code, message) = match self.status {
            429 => (
                "TooManyRequests",
                "The request is being throttled as the limit has been reached for operation type - Write_PT1M. For more information, see - https://aka.ms/throttling",
            ),
            502 => (
                "BadGateway",
                "The gateway did not receive a response in time.",
            ),
            503 => (
                "ServiceUnavailable",
                "The service is temporarily unavailable. Please retry later.",
            ),
            _ => (
                "InternalServerError",
                "An internal execution error occurred. Please retry later.",
            ),
        };
        json!({"error": {"code": code, "message": message}})
    }

    /// From the admin API: {"status", "retryAfter", "method", "path", "count"}
    /// (count "forever" or absent-with-"persistent": true is for ever).
    pub fn from_json(v: &Value) -> Option<Fault> {
        let status = u16::try_from(v.get("status")?.as_u64()?).ok()?;
        let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
        let count = if v.get("persistent").and_then(Value::as_bool) == Some(true) {
            u32::MAX
        } else {
            v.get("count")
                .and_then(Value::as_u64)
                .map(|c| u32::try_from(c).unwrap_or(u32::MAX))
                .unwrap_or(1)
        };
        Some(Fault {
            status,
            retry_after: v.get("retryAfter").and_then(Value::as_u64),
            method: s("method"),
            path: s("path"),
            count,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_method_and_path() {
        let f = Fault::from_json(&json!({"status": 429, "retryAfter": 1, "method": "put", "path": "virtualMachines", "count": 2}))
            .expect("fault");
        assert!(f.matches(
            "PUT",
            "/subscriptions/s/resourceGroups/g/providers/Microsoft.Compute/virtualmachines/x"
        ));
        assert!(!f.matches(
            "GET",
            "/subscriptions/s/providers/Microsoft.Compute/virtualMachines/x"
        ));
        assert!(!f.matches(
            "PUT",
            "/subscriptions/s/providers/Microsoft.Network/networkInterfaces/x"
        ));
        assert_eq!(f.body()["error"]["code"], "TooManyRequests");
        let forever = Fault::from_json(&json!({"status": 503, "persistent": true})).expect("fault");
        assert_eq!(forever.count, u32::MAX);
        assert!(forever.matches("DELETE", "/anything"));
    }
}
