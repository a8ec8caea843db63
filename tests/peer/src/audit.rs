//! What the controller asked of the API server, from the API server's audit
//! log: every request of the controller's identity, once each.

use crate::cluster::CONTROLLER_USER;
use anyhow::{Context, Result};
use serde::Deserialize;
use std::collections::{BTreeMap, HashSet};
use std::io::BufRead;
use std::path::Path;

#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct Requests {
    pub total: u64,
    /// "VERB resource" → count, e.g. "create nodeclaims".
    pub by_kind: BTreeMap<String, u64>,
    pub nodeclaims_created: u64,
    pub pods_evicted: u64,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Event {
    #[serde(rename = "auditID")]
    audit_id: String,
    verb: String,
    user: User,
    #[serde(default)]
    object_ref: Option<ObjectRef>,
    #[serde(default)]
    response_status: Option<Status>,
}

#[derive(Deserialize)]
struct User {
    #[serde(default)]
    username: String,
}

#[derive(Deserialize)]
struct ObjectRef {
    #[serde(default)]
    resource: String,
    #[serde(default)]
    subresource: String,
}

#[derive(Deserialize)]
struct Status {
    #[serde(default)]
    code: u16,
}

pub fn read(path: &Path) -> Result<Requests> {
    let file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut out = Requests::default();
    let mut seen = HashSet::new();
    // A watch logs when it starts and when it ends; it counts once, and a
    // creation counts when it completes.
    for line in std::io::BufReader::new(file).lines() {
        let line = line?;
        let Ok(e) = serde_json::from_str::<Event>(&line) else {
            continue;
        };
        if e.user.username != CONTROLLER_USER {
            continue;
        }
        let code = e.response_status.as_ref().map_or(0, |s| s.code);
        let (resource, sub) = e
            .object_ref
            .as_ref()
            .map_or(("", ""), |o| (o.resource.as_str(), o.subresource.as_str()));
        if code == 201 && e.verb == "create" {
            if resource == "nodeclaims" && sub.is_empty() {
                out.nodeclaims_created += 1;
            }
            if resource == "pods" && sub == "eviction" {
                out.pods_evicted += 1;
            }
        }
        if !seen.insert(e.audit_id) {
            continue;
        }
        out.total += 1;
        let kind = if sub.is_empty() {
            format!("{} {resource}", e.verb)
        } else {
            format!("{} {resource}/{sub}", e.verb)
        };
        *out.by_kind.entry(kind).or_default() += 1;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(
        id: &str,
        stage: &str,
        user: &str,
        verb: &str,
        resource: &str,
        sub: &str,
        code: u16,
    ) -> String {
        serde_json::json!({
            "auditID": id, "stage": stage, "verb": verb, "user": {"username": user},
            "objectRef": {"resource": resource, "subresource": sub},
            "responseStatus": {"code": code}
        })
        .to_string()
    }

    #[test]
    fn the_controllers_requests_count_once_each_and_others_not_at_all() {
        let c = CONTROLLER_USER;
        let log = [
            line("w", "ResponseStarted", c, "watch", "pods", "", 200),
            line("w", "ResponseComplete", c, "watch", "pods", "", 200),
            line("a", "ResponseComplete", c, "create", "nodeclaims", "", 201),
            line("b", "ResponseComplete", c, "create", "nodeclaims", "", 409),
            line(
                "e",
                "ResponseComplete",
                c,
                "create",
                "pods",
                "eviction",
                201,
            ),
            line(
                "s",
                "ResponseComplete",
                c,
                "patch",
                "nodeclaims",
                "status",
                200,
            ),
            line(
                "x",
                "ResponseComplete",
                "admin",
                "create",
                "nodeclaims",
                "",
                201,
            ),
            "not json".to_string(),
        ]
        .join("\n");
        let dir = std::env::temp_dir().join(format!("peer-audit-{}", std::process::id()));
        std::fs::write(&dir, log).expect("write");
        let r = read(&dir).expect("read");
        std::fs::remove_file(&dir).ok();
        assert_eq!(r.total, 5);
        assert_eq!(
            r.nodeclaims_created, 1,
            "a refused create is not a NodeClaim"
        );
        assert_eq!(r.pods_evicted, 1);
        assert_eq!(r.by_kind["watch pods"], 1);
        assert_eq!(r.by_kind["patch nodeclaims/status"], 1);
    }
}
