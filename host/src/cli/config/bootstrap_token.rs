//! A kubelet bootstrap token, made the way `kubeadm token create` makes one:
//! a `bootstrap-token-<id>` Secret in kube-system whose token authenticates
//! as a member of system:bootstrappers:kubeadm:default-node-token, until it
//! expires. The controller's plugins read it from a Secret of its own in the
//! release namespace, never from their configuration.

use anyhow::Context;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

const NAMESPACE: &str = "kube-system";
const TYPE: &str = "bootstrap.kubernetes.io/token";
/// Marks the tokens this command made, so a second run reuses one.
const LABEL: &str = "karpenter.sh/bootstrap-token";
const GROUP: &str = "system:bootstrappers:kubeadm:default-node-token";
/// The Secret the chart mounts for its plugins (`kubeletBootstrapToken`).
pub const PUBLISHED: &str = "kubelet-bootstrap-token";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootstrapToken {
    pub id: String,
    pub secret: String,
    pub expires: Option<jiff::Timestamp>,
}

impl fmt::Display for BootstrapToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.id, self.secret)
    }
}

/// Reuses a token an earlier run made while more than half of `ttl` is left
/// (so rerunning the command rotates it in time), or creates one; `ttl` None
/// means it never expires.
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
    let half = match ttl {
        Some(ttl) => jiff::SignedDuration::try_from(ttl / 2).context("bootstrap token ttl")?,
        None => jiff::SignedDuration::from_hours(24),
    };
    let keep_until = jiff::Timestamp::now() + half;
    for s in existing.items {
        let data = decoded(&s);
        let expires = data
            .get("expiration")
            .and_then(|e| e.parse::<jiff::Timestamp>().ok());
        // A token without expiry is not reused when one is asked for.
        let fresh = match (expires, ttl) {
            (Some(e), _) => e > keep_until,
            (None, ttl) => ttl.is_none(),
        };
        if !fresh {
            continue;
        }
        if let (Some(id), Some(secret)) = (data.get("token-id"), data.get("token-secret")) {
            return Ok(BootstrapToken {
                id: id.clone(),
                secret: secret.clone(),
                expires,
            });
        }
    }
    let expires = match ttl {
        Some(ttl) => Some(
            (jiff::Timestamp::now()
                + jiff::SignedDuration::try_from(ttl).context("bootstrap token ttl")?)
            .round(jiff::Unit::Second)?,
        ),
        None => None,
    };
    let token = BootstrapToken {
        id: random(6)?,
        secret: random(16)?,
        expires,
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
    if let Some(at) = expires {
        data.insert("expiration".into(), at.to_string());
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

/// Writes `token` as the [`PUBLISHED`] Secret in `namespace` (made if
/// absent), replacing an older token: the running controller reads the new
/// one on its next launch.
pub async fn publish(
    client: &Client,
    namespace: &str,
    token: &BootstrapToken,
) -> anyhow::Result<()> {
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let ns = serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}});
    let params = PatchParams::apply("karpenter-config").force();
    if namespaces.get_opt(namespace).await?.is_none() {
        namespaces
            .patch(namespace, &params, &Patch::Apply(&ns))
            .await
            .with_context(|| format!("creating namespace {namespace}"))?;
    }
    let mut data = BTreeMap::from([("token".to_string(), token.to_string())]);
    if let Some(at) = token.expires {
        data.insert("expiration".into(), at.to_string());
    }
    let secret = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": PUBLISHED,
            "namespace": namespace,
            "labels": {LABEL: "true"},
        },
        "type": "Opaque",
        "stringData": data,
    });
    Api::<Secret>::namespaced(client.clone(), namespace)
        .patch(PUBLISHED, &params, &Patch::Apply(&secret))
        .await
        .with_context(|| format!("writing Secret {namespace}/{PUBLISHED}"))?;
    Ok(())
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
