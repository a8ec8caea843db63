//! The NebiusNodeClass: its spec with defaults, and validation.
//!
//! Architecture Invariant: pure.

use crate::wireguard::Cidr;
use serde_json::{Value, json};

pub const GROUP: &str = "flex.aks.azure.com";
pub const VERSION: &str = "v1alpha1";
pub const KIND: &str = "NebiusNodeClass";
pub const DEFAULT_IMAGE_FAMILY: &str = "ubuntu24.04-driverless";
pub const GPU_IMAGE_FAMILY: &str = "ubuntu24.04-cuda12";

#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    pub project_id: String,
    pub region: String,
    pub subnet_id: String,
    pub os_disk_size_gb: u64,
    /// None: the default for the platform (CUDA images on GPU platforms).
    pub image_family: Option<String>,
    pub public_ip: bool,
    pub wireguard_peer_cidr: Option<String>,
    pub max_pods: u64,
}

impl Spec {
    pub fn image_family(&self, gpu: bool) -> &str {
        match &self.image_family {
            Some(f) => f,
            None if gpu => GPU_IMAGE_FAMILY,
            None => DEFAULT_IMAGE_FAMILY,
        }
    }

    /// The WireGuard range, when WireGuard is in use.
    pub fn wireguard(&self) -> Result<Option<Cidr>, String> {
        self.wireguard_peer_cidr
            .as_deref()
            .map(|c| Cidr::parse(c).map_err(|e| format!("wireguardPeerCIDR: {e}")))
            .transpose()
    }
}

pub fn parse(json_text: &str) -> Result<Spec, String> {
    let obj: Value =
        serde_json::from_str(json_text).map_err(|e| format!("NebiusNodeClass is not JSON: {e}"))?;
    let spec = obj.get("spec").cloned().unwrap_or_else(|| json!({}));
    let text = |k: &str| {
        spec.get(k)
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    };
    Ok(Spec {
        project_id: text("projectID").unwrap_or_default(),
        region: text("region").unwrap_or_default(),
        subnet_id: text("subnetID").unwrap_or_default(),
        os_disk_size_gb: spec
            .get("osDiskSizeGB")
            .and_then(Value::as_u64)
            .unwrap_or(128),
        image_family: text("osDiskImageFamily"),
        public_ip: spec
            .get("allocateNodePublicIP")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        wireguard_peer_cidr: text("wireguardPeerCIDR"),
        max_pods: spec
            .get("maxPodsPerNode")
            .and_then(Value::as_u64)
            .unwrap_or(110),
    })
}

/// Problems with the spec beyond what the CRD schema checks (the host may
/// hand us objects the API server never saw, e.g. in `simulate`).
pub fn validate(spec: &Spec) -> Vec<String> {
    let mut problems = Vec::new();
    for (field, value) in [
        ("projectID", &spec.project_id),
        ("region", &spec.region),
        ("subnetID", &spec.subnet_id),
    ] {
        if value.is_empty() {
            problems.push(format!("spec.{field} is required"));
        }
    }
    if !(32..=4096).contains(&spec.os_disk_size_gb) {
        problems.push(format!(
            "osDiskSizeGB {} is outside 32..4096",
            spec.os_disk_size_gb
        ));
    }
    if !(10..=250).contains(&spec.max_pods) {
        problems.push(format!(
            "maxPodsPerNode {} is outside 10..250",
            spec.max_pods
        ));
    }
    match spec.wireguard() {
        Ok(Some(c)) if c.usable() == 0 => problems.push(format!(
            "wireguardPeerCIDR {} has no usable host addresses",
            c
        )),
        Ok(_) => {}
        Err(e) => problems.push(e),
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(extra: Value) -> Spec {
        let mut s = json!({"projectID": "project-e00a", "region": "eu-north1", "subnetID": "vpcsubnet-e00b"});
        for (k, v) in extra.as_object().expect("object") {
            s[k] = v.clone();
        }
        parse(&json!({"spec": s}).to_string()).expect("parses")
    }

    #[test]
    fn defaults() {
        let s = spec(json!({}));
        assert_eq!(s.os_disk_size_gb, 128);
        assert_eq!(s.max_pods, 110);
        assert!(!s.public_ip);
        assert_eq!(s.image_family(false), DEFAULT_IMAGE_FAMILY);
        assert_eq!(s.image_family(true), GPU_IMAGE_FAMILY);
        assert_eq!(s.wireguard(), Ok(None), "Unbounded CNI: no WireGuard range");
        assert!(validate(&s).is_empty());
    }

    #[test]
    fn validation() {
        assert!(validate(&spec(json!({"wireguardPeerCIDR": "100.96.0.0/12"}))).is_empty());
        let bad = validate(&spec(
            json!({"wireguardPeerCIDR": "100.96.0.0/33", "maxPodsPerNode": 5, "projectID": ""}),
        ));
        assert_eq!(bad.len(), 3, "{bad:?}");
        assert!(!validate(&spec(json!({"wireguardPeerCIDR": "10.0.0.1/32"}))).is_empty());
        assert_eq!(
            spec(json!({"osDiskImageFamily": "ubuntu22.04"})).image_family(true),
            "ubuntu22.04"
        );
    }
}
