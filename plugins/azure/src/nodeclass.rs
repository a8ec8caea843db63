//! The AKSNodeClass: its spec with defaults, validation, the images and
//! Kubernetes version it resolves to, its drift hash, and drift.
//!
//! Architecture Invariant: pure; settings come in as arguments.

use crate::kubelet::{self, LinuxOsConfig};
use serde_json::{Value, json};

pub const GROUP: &str = "karpenter.azure.com";
pub const VERSION: &str = "v1beta1";
pub const KIND: &str = "AKSNodeClass";
/// The NodeClass hash annotation Karpenter stamps on NodeClaims.
pub const HASH_ANNOTATION: &str = "karpenter.azure.com/aksnodeclass-hash";
pub const DEFAULT_KUBERNETES_VERSION: &str = "1.34.2";
pub const DEFAULT_IMAGE_VERSION: &str = "202509.09.0";
/// The community galleries AKS publishes node images to.
const UBUNTU_GALLERY: &str = "AKSUbuntu-38d80f77-467a-481f-a8d4-09b6d4220bd2";
const AZURE_LINUX_GALLERY: &str = "AKSAzureLinux-f7c7cda5-1c9a-4bdc-a222-9614c968580b";

/// The spec fields the plugin acts on, with defaults applied.
#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    pub vnet_subnet_id: Option<String>,
    pub os_disk_size_gb: u64,
    pub image_family: String,
    pub fips_mode: Option<String>,
    pub max_pods: Option<u64>,
    pub tags: Vec<(String, String)>,
    /// `kubelet` as kubelet flags; a problem with it is kept for `validate`.
    pub kubelet_flags: Result<Vec<(String, String)>, String>,
    pub linux_os_config: Result<LinuxOsConfig, String>,
    /// gpu.mode Driver (the default): the bootstrap installs the GPU driver
    /// on GPU sizes; None: the user brings their own.
    pub gpu_driver: bool,
    /// capacityReservation.groupID: the capacity reservation group whose
    /// reservations are offered as `reserved` capacity.
    pub capacity_reservation_group: Option<String>,
    /// The raw spec, for the hash.
    pub raw: Value,
}

impl Spec {
    pub fn fips(&self) -> bool {
        self.fips_mode.as_deref() == Some("FIPS")
    }
}

pub fn parse(json_text: &str) -> Result<(Spec, Value), String> {
    let obj: Value =
        serde_json::from_str(json_text).map_err(|e| format!("AKSNodeClass is not JSON: {e}"))?;
    let spec = obj.get("spec").cloned().unwrap_or_else(|| json!({}));
    let str_field = |k: &str| spec.get(k).and_then(Value::as_str).map(str::to_string);
    let tags = spec
        .get("tags")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default();
    let parsed = Spec {
        vnet_subnet_id: str_field("vnetSubnetID"),
        os_disk_size_gb: spec
            .get("osDiskSizeGB")
            .and_then(Value::as_u64)
            .unwrap_or(128),
        image_family: str_field("imageFamily").unwrap_or_else(|| "Ubuntu".into()),
        fips_mode: str_field("fipsMode"),
        max_pods: spec.get("maxPods").and_then(Value::as_u64),
        tags,
        kubelet_flags: kubelet::kubelet_flags(spec.get("kubelet")),
        linux_os_config: LinuxOsConfig::parse(spec.get("linuxOSConfig")),
        gpu_driver: spec.pointer("/gpu/mode").and_then(Value::as_str) != Some("None"),
        capacity_reservation_group: spec
            .pointer("/capacityReservation/groupID")
            .and_then(Value::as_str)
            .map(str::to_string),
        raw: spec,
    };
    let status = obj.get("status").cloned().unwrap_or_else(|| json!({}));
    Ok((parsed, status))
}

/// Problems with the spec, beyond what the CRD schema already checks.
pub fn validate(spec: &Spec, default_subnet: Option<&str>) -> Vec<String> {
    let mut problems = Vec::new();
    if !(30..=2048).contains(&spec.os_disk_size_gb) {
        problems.push(format!(
            "osDiskSizeGB {} is outside 30..2048",
            spec.os_disk_size_gb
        ));
    }
    if !["Ubuntu", "Ubuntu2204", "Ubuntu2404", "AzureLinux"].contains(&spec.image_family.as_str()) {
        problems.push(format!(
            "imageFamily {:?} is not one of Ubuntu, Ubuntu2204, Ubuntu2404, AzureLinux",
            spec.image_family
        ));
    }
    if let Err(e) = &spec.kubelet_flags {
        problems.push(e.clone());
    }
    if let Err(e) = &spec.linux_os_config {
        problems.push(e.clone());
    }
    if spec.fips() && spec.image_family == "Ubuntu2404" {
        problems.push("fipsMode FIPS has no Ubuntu2404 image; use Ubuntu2204 or AzureLinux".into());
    }
    if let Some(p) = spec.max_pods
        && !(10..=250).contains(&p)
    {
        problems.push(format!("maxPods {p} is outside 10..250"));
    }
    match spec.vnet_subnet_id.as_deref().or(default_subnet) {
        Some(id) if !is_subnet_id(id) => {
            problems.push(format!("vnetSubnetID {id:?} is not an ARM subnet id"))
        }
        _ => {}
    }
    if let Some(id) = &spec.capacity_reservation_group
        && crate::reservations::GroupId::parse(id).is_none()
    {
        problems.push(format!(
            "capacityReservation.groupID {id:?} is not an ARM capacity reservation group id"
        ));
    }
    problems
}

/// `/subscriptions/<s>/resourceGroups/<g>/providers/Microsoft.Network/virtualNetworks/<v>/subnets/<n>`
pub fn is_subnet_id(id: &str) -> bool {
    let parts: Vec<&str> = id.trim_start_matches('/').split('/').collect();
    parts.len() == 10
        && parts[0].eq_ignore_ascii_case("subscriptions")
        && parts[2].eq_ignore_ascii_case("resourceGroups")
        && parts[4].eq_ignore_ascii_case("providers")
        && parts[5].eq_ignore_ascii_case("Microsoft.Network")
        && parts[6].eq_ignore_ascii_case("virtualNetworks")
        && parts[8].eq_ignore_ascii_case("subnets")
        && parts.iter().all(|p| !p.is_empty())
}

/// The image definition for a family: Ubuntu follows the Kubernetes version
/// (24.04 from 1.34 on), the others are fixed. FIPS images exist for Ubuntu
/// 22.04 and Azure Linux; FIPS Ubuntu stays on 22.04.
pub fn image_definition(
    image_family: &str,
    kubernetes_version: &str,
    fips: bool,
) -> (&'static str, &'static str) {
    match (image_family, fips) {
        ("AzureLinux", true) => (AZURE_LINUX_GALLERY, "V3gen2fips"),
        (_, true) => (UBUNTU_GALLERY, "2204gen2fipscontainerd"),
        ("AzureLinux", false) => (AZURE_LINUX_GALLERY, "V3gen2"),
        ("Ubuntu2204", false) => (UBUNTU_GALLERY, "2204gen2containerd"),
        ("Ubuntu2404", false) => (UBUNTU_GALLERY, "2404gen2containerd"),
        _ => {
            let minor = kubernetes_version
                .split('.')
                .nth(1)
                .and_then(|m| m.parse::<u32>().ok())
                .unwrap_or(0);
            if minor >= 34 {
                (UBUNTU_GALLERY, "2404gen2containerd")
            } else {
                (UBUNTU_GALLERY, "2204gen2containerd")
            }
        }
    }
}

/// The community gallery image id for the family, version and image version.
pub fn image_id(
    image_family: &str,
    kubernetes_version: &str,
    image_version: &str,
    fips: bool,
) -> String {
    let (gallery, definition) = image_definition(image_family, kubernetes_version, fips);
    format!("/CommunityGalleries/{gallery}/images/{definition}/versions/{image_version}")
}

/// The `status.images` list: one amd64 image.
pub fn images(spec: &Spec, kubernetes_version: &str, image_version: &str) -> Value {
    json!([{
        "id": image_id(&spec.image_family, kubernetes_version, image_version, spec.fips()),
        "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}],
    }])
}

/// The drift hash: FNV-1a over the canonical JSON of the spec without the
/// fields whose change does not replace nodes (tags).
pub fn hash(spec: &Spec) -> String {
    let mut raw = spec.raw.clone();
    if let Some(m) = raw.as_object_mut() {
        m.remove("tags");
    }
    // serde_json keeps object keys sorted (no preserve_order), so this is canonical.
    let text = raw.to_string();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h.to_string()
}

/// Why a NodeClaim launched from an older NodeClass no longer matches it.
pub fn drift(
    spec: &Spec,
    status: &Value,
    claim_annotations: &[(String, String)],
    kubelet_version: Option<&str>,
    image_id: Option<&str>,
) -> Option<&'static str> {
    let claim_hash = claim_annotations
        .iter()
        .find(|(k, _)| k == HASH_ANNOTATION)
        .map(|(_, v)| v.as_str());
    if claim_hash.is_some_and(|h| h != hash(spec)) {
        return Some("NodeClassDrift");
    }
    if let (Some(kv), Some(want)) = (
        kubelet_version,
        status.get("kubernetesVersion").and_then(Value::as_str),
    ) && kv.trim_start_matches('v') != want.trim_start_matches('v')
    {
        return Some("KubernetesVersionDrift");
    }
    if let (Some(id), Some(images)) = (image_id, status.get("images").and_then(Value::as_array))
        && !id.is_empty()
        && !images.is_empty()
        && !images.iter().any(|i| {
            i.get("id")
                .and_then(Value::as_str)
                .is_some_and(|x| x.eq_ignore_ascii_case(id))
        })
    {
        return Some("ImageDrift");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(json_spec: &str) -> Spec {
        parse(&format!(r#"{{"spec": {json_spec}}}"#))
            .expect("parses")
            .0
    }

    #[test]
    fn defaults_and_validation() {
        let s = spec(r#"{"imageFamily": "Ubuntu"}"#);
        assert_eq!(s.os_disk_size_gb, 128);
        assert_eq!(s.image_family, "Ubuntu");
        assert!(validate(&s, None).is_empty());
        let bad = spec(
            r#"{"osDiskSizeGB": 10, "imageFamily": "Windows", "maxPods": 500, "vnetSubnetID": "x"}"#,
        );
        assert_eq!(validate(&bad, None).len(), 4);
        assert!(is_subnet_id(
            "/subscriptions/s/resourceGroups/g/providers/Microsoft.Network/virtualNetworks/v/subnets/aks"
        ));
    }

    #[test]
    fn images_follow_the_family_and_version() {
        assert!(
            image_id("Ubuntu", "1.34.2", "1", false)
                .contains("/images/2404gen2containerd/versions/1")
        );
        assert!(image_id("Ubuntu", "1.33.1", "1", false).contains("2204gen2containerd"));
        assert!(
            image_id("AzureLinux", "1.34.2", "1", false)
                .starts_with("/CommunityGalleries/AKSAzureLinux")
        );
    }

    #[test]
    fn fips_picks_fips_images() {
        let s = spec(r#"{"imageFamily": "Ubuntu", "fipsMode": "FIPS"}"#);
        assert!(s.fips());
        assert!(validate(&s, None).is_empty());
        let images = images(&s, "1.34.2", "202509.09.0");
        assert_eq!(
            images[0]["id"],
            "/CommunityGalleries/AKSUbuntu-38d80f77-467a-481f-a8d4-09b6d4220bd2/images/2204gen2fipscontainerd/versions/202509.09.0"
        );
        assert!(image_id("AzureLinux", "1.34.2", "1", true).contains("/images/V3gen2fips/"));
        assert!(!spec(r#"{"fipsMode": "Disabled"}"#).fips());
        let bad = spec(r#"{"imageFamily": "Ubuntu2404", "fipsMode": "FIPS"}"#);
        assert_eq!(validate(&bad, None).len(), 1);
        // Turning FIPS on changes the image, hence drift.
        assert_ne!(hash(&s), hash(&spec(r#"{"imageFamily": "Ubuntu"}"#)));
    }

    #[test]
    fn kubelet_os_config_and_gpu_mode_are_read() {
        let s = spec(
            r#"{"kubelet": {"cpuManagerPolicy": "static"}, "linuxOSConfig": {"transparentHugePageEnabled": "never"}, "gpu": {"mode": "None"}}"#,
        );
        assert_eq!(
            s.kubelet_flags,
            Ok(vec![(
                "cpu-manager-policy".to_string(),
                "static".to_string()
            )])
        );
        assert!(
            s.linux_os_config
                .as_ref()
                .is_ok_and(|c| c.script().contains("echo never"))
        );
        assert!(!s.gpu_driver);
        assert!(spec("{}").gpu_driver);
        let bad = spec(r#"{"kubelet": {"containerLogMaxSize": "1 Mi"}}"#);
        assert_eq!(validate(&bad, None).len(), 1, "{:?}", validate(&bad, None));
    }

    #[test]
    fn tags_do_not_change_the_hash_but_the_disk_does() {
        let a = spec(r#"{"imageFamily": "Ubuntu", "tags": {"team": "a"}}"#);
        let b = spec(r#"{"imageFamily": "Ubuntu", "tags": {"team": "b"}}"#);
        let c = spec(r#"{"imageFamily": "Ubuntu", "osDiskSizeGB": 256}"#);
        assert_eq!(hash(&a), hash(&b));
        assert_ne!(hash(&a), hash(&c));
    }

    #[test]
    fn drift_reasons() {
        let s = spec(r#"{"imageFamily": "Ubuntu"}"#);
        let image = image_id("Ubuntu", "1.34.2", "v1", false);
        let status = json!({"kubernetesVersion": "1.34.2", "images": [{"id": image}]});
        let ann = vec![(HASH_ANNOTATION.to_string(), hash(&s))];
        assert_eq!(
            drift(&s, &status, &ann, Some("v1.34.2"), Some(&image)),
            None
        );
        let old = vec![(HASH_ANNOTATION.to_string(), "1".to_string())];
        assert_eq!(
            drift(&s, &status, &old, Some("v1.34.2"), Some(&image)),
            Some("NodeClassDrift")
        );
        assert_eq!(
            drift(&s, &status, &ann, Some("v1.33.0"), Some(&image)),
            Some("KubernetesVersionDrift")
        );
        assert_eq!(
            drift(&s, &status, &ann, Some("v1.34.2"), Some("/other")),
            Some("ImageDrift")
        );
    }
}
