//! A kubelet bootstrap token, made the way `kubeadm token create` makes one:
//! a `bootstrap-token-<id>` Secret in kube-system whose token authenticates
//! as a member of system:bootstrappers:kubeadm:default-node-token.

use anyhow::Context;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, ListParams, PostParams};
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

const NAMESPACE: &str = "kube-system";
const TYPE: &str = "bootstrap.kubernetes.io/token";
/// Marks the tokens this command made, so a second run reuses one.
const LABEL: &str = "karpenter.sh/bootstrap-token";
const GROUP: &str = "system:bootstrappers:kubeadm:default-node-token";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootstrapToken {
    pub id: String,
    pub secret: String,
}

impl fmt::Display for BootstrapToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.id, self.secret)
    }
}

/// Reuses a token an earlier run made (unless it expires within a day), or
/// creates one; `ttl` None means it never expires, as nodes join at any time.
pub async fn ensure(client: &Client, ttl: Option<Duration>) -> anyhow::Result<BootstrapToken> {
    let api: Api<Secret> = Api::namespaced(client.clone(), NAMESPACE);
    let existing = api
        .list(
            &ListParams::default()
                .labels(LABEL)
                .fields(&format!("type={TYPE}")),
        )
        .await
        .context("listing bootstrap tokens in kube-system")?;
    let soon = jiff::Timestamp::now() + jiff::SignedDuration::from_hours(24);
    for s in existing.items {
        let data = decoded(&s);
        let expires = data
            .get("expiration")
            .and_then(|e| e.parse::<jiff::Timestamp>().ok());
        if expires.is_some_and(|e| e < soon) {
            continue;
        }
        if let (Some(id), Some(secret)) = (data.get("token-id"), data.get("token-secret")) {
            return Ok(BootstrapToken {
                id: id.clone(),
                secret: secret.clone(),
            });
        }
    }
    let token = BootstrapToken {
        id: random(6)?,
        secret: random(16)?,
    };
    let mut data = BTreeMap::from([
        ("token-id".to_string(), token.id.clone()),
        ("token-secret".to_string(), token.secret.clone()),
        ("usage-bootstrap-authentication".to_string(), "true".into()),
        ("usage-bootstrap-signing".to_string(), "true".into()),
        ("auth-extra-groups".to_string(), GROUP.into()),
        (
            "description".to_string(),
            "kubelet bootstrap token of karpenter's nodes (karpenter config helm)".into(),
        ),
    ]);
    if let Some(ttl) = ttl {
        let at = jiff::Timestamp::now()
            + jiff::SignedDuration::try_from(ttl).context("bootstrap token ttl")?;
        data.insert(
            "expiration".into(),
            at.round(jiff::Unit::Second)?.to_string(),
        );
    }
    let secret: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": format!("bootstrap-token-{}", token.id),
            "namespace": NAMESPACE,
            "labels": {LABEL: "true"},
        },
        "type": TYPE,
        "stringData": data,
    }))?;
    api.create(&PostParams::default(), &secret)
        .await
        .context("creating the bootstrap token Secret in kube-system")?;
    Ok(token)
}

fn decoded(s: &Secret) -> BTreeMap<String, String> {
    s.data
        .iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), String::from_utf8(v.0.clone()).ok()?)))
        .collect()
}

/// `n` characters of [a-z0-9], uniformly drawn.
fn random(n: usize) -> anyhow::Result<String> {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut out = String::with_capacity(n);
    let mut buf = [0u8; 64];
    while out.len() < n {
        getrandom::fill(&mut buf).map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
        // 252 = 7 * 36: rejecting the rest keeps every character equally likely.
        for b in buf.iter().filter(|b| **b < 252) {
            if out.len() == n {
                break;
            }
            out.push(ALPHABET[usize::from(*b) % ALPHABET.len()] as char);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn tokens_have_kubeadms_shape() {
        let id = super::random(6).expect("random");
        let secret = super::random(16).expect("random");
        assert_eq!(id.len(), 6);
        assert_eq!(secret.len(), 16);
        assert!(
            (id.clone() + &secret)
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        );
        assert_ne!(super::random(16).expect("random"), secret);
    }
}
