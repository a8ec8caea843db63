//! What the AKSNodeClass says about the node's own configuration: its
//! `kubelet` block as kubelet flags, and its `linuxOSConfig` (sysctls,
//! transparent huge pages, a swap file) as bootstrap steps.
//!
//! Architecture Invariant: pure. Values end up in one space-separated
//! KUBELET_FLAGS line and in shell heredocs, so anything with whitespace,
//! quotes or shell metacharacters is refused here rather than escaped.

use serde_json::Value;

/// `kubelet` field -> kubelet flag.
const FLAGS: &[(&str, &str)] = &[
    ("cpuManagerPolicy", "cpu-manager-policy"),
    ("cpuCFSQuota", "cpu-cfs-quota"),
    ("cpuCFSQuotaPeriod", "cpu-cfs-quota-period"),
    ("imageGCHighThresholdPercent", "image-gc-high-threshold"),
    ("imageGCLowThresholdPercent", "image-gc-low-threshold"),
    ("topologyManagerPolicy", "topology-manager-policy"),
    ("allowedUnsafeSysctls", "allowed-unsafe-sysctls"),
    ("containerLogMaxSize", "container-log-max-size"),
    ("containerLogMaxFiles", "container-log-max-files"),
    ("podPidsLimit", "pod-max-pids"),
    ("failSwapOn", "fail-swap-on"),
];

fn safe(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-/*=:+".contains(c))
}

fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Kubelet flags (name without `--`, value) for the `kubelet` block.
pub fn kubelet_flags(kubelet: Option<&Value>) -> Result<Vec<(String, String)>, String> {
    let Some(k) = kubelet.and_then(Value::as_object) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for (field, flag) in FLAGS {
        let Some(v) = k.get(*field) else { continue };
        // A list is one comma-separated flag value.
        let items = match v {
            Value::Array(items) => items
                .iter()
                .map(|i| scalar(i).ok_or_else(|| format!("kubelet.{field}: not a list of strings")))
                .collect::<Result<Vec<_>, _>>()?,
            v => vec![scalar(v).ok_or_else(|| format!("kubelet.{field}: not a scalar"))?],
        };
        if items.is_empty() {
            continue;
        }
        if let Some(bad) = items.iter().find(|i| !safe(i)) {
            return Err(format!(
                "kubelet.{field} {bad:?} has characters a kubelet flag cannot hold"
            ));
        }
        out.push((flag.to_string(), items.join(",")));
    }
    let num = |f: &str| k.get(f).and_then(Value::as_i64);
    if let (Some(high), Some(low)) = (
        num("imageGCHighThresholdPercent"),
        num("imageGCLowThresholdPercent"),
    ) && high <= low
    {
        return Err(
            "kubelet.imageGCHighThresholdPercent must be greater than imageGCLowThresholdPercent"
                .into(),
        );
    }
    Ok(out)
}

/// `linuxOSConfig`, checked.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LinuxOsConfig {
    pub sysctls: Vec<(String, String)>,
    pub transparent_huge_page_enabled: Option<String>,
    pub transparent_huge_page_defrag: Option<String>,
    pub swap_file_size_mb: Option<u64>,
}

impl LinuxOsConfig {
    pub fn parse(v: Option<&Value>) -> Result<LinuxOsConfig, String> {
        let Some(o) = v.and_then(Value::as_object) else {
            return Ok(LinuxOsConfig::default());
        };
        let mut sysctls = Vec::new();
        for (key, value) in o
            .get("sysctls")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            let value = scalar(value)
                .ok_or_else(|| format!("linuxOSConfig.sysctls.{key}: not a scalar"))?;
            if !safe(key) || key.contains('=') || !safe(&value) {
                return Err(format!(
                    "linuxOSConfig.sysctls: {key:?} = {value:?} is not a sysctl"
                ));
            }
            sysctls.push((key.clone(), value));
        }
        let choice = |field: &str, allowed: &[&str]| -> Result<Option<String>, String> {
            match o.get(field).and_then(Value::as_str) {
                None => Ok(None),
                Some(v) if allowed.contains(&v) => Ok(Some(v.to_string())),
                Some(v) => Err(format!(
                    "linuxOSConfig.{field} {v:?} is not one of {allowed:?}"
                )),
            }
        };
        Ok(LinuxOsConfig {
            sysctls,
            transparent_huge_page_enabled: choice(
                "transparentHugePageEnabled",
                &["always", "madvise", "never"],
            )?,
            transparent_huge_page_defrag: choice(
                "transparentHugePageDefrag",
                &["always", "defer", "defer+madvise", "madvise", "never"],
            )?,
            swap_file_size_mb: o
                .get("swapFileSizeMB")
                .and_then(Value::as_u64)
                .filter(|n| *n > 0),
        })
    }

    /// The bootstrap lines that apply it (none when empty).
    pub fn script(&self) -> String {
        let mut s = String::new();
        if !self.sysctls.is_empty() {
            s.push_str("cat > /etc/sysctl.d/99-aksnodeclass.conf <<'SYSCTL_EOF'\n");
            for (k, v) in &self.sysctls {
                s.push_str(&format!("{k} = {v}\n"));
            }
            s.push_str("SYSCTL_EOF\nsysctl --system\n");
        }
        if let Some(v) = &self.transparent_huge_page_enabled {
            s.push_str(&format!(
                "echo {v} > /sys/kernel/mm/transparent_hugepage/enabled\n"
            ));
        }
        if let Some(v) = &self.transparent_huge_page_defrag {
            s.push_str(&format!(
                "echo {v} > /sys/kernel/mm/transparent_hugepage/defrag\n"
            ));
        }
        if let Some(mb) = self.swap_file_size_mb {
            s.push_str(&format!(
                "fallocate -l {mb}M /swapfile && chmod 600 /swapfile && mkswap /swapfile && swapon /swapfile\n"
            ));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn kubelet_block_becomes_flags() {
        let k = json!({
            "cpuManagerPolicy": "static", "cpuCFSQuota": false, "imageGCHighThresholdPercent": 85,
            "imageGCLowThresholdPercent": 80, "topologyManagerPolicy": "single-numa-node",
            "allowedUnsafeSysctls": ["kernel.msg*", "net.ipv4.route.min_pmtu"],
            "containerLogMaxSize": "50Mi", "containerLogMaxFiles": 5, "podPidsLimit": 4096, "failSwapOn": false
        });
        let flags = kubelet_flags(Some(&k)).expect("valid");
        let get = |f: &str| flags.iter().find(|(n, _)| n == f).map(|(_, v)| v.as_str());
        assert_eq!(get("cpu-manager-policy"), Some("static"));
        assert_eq!(get("cpu-cfs-quota"), Some("false"));
        assert_eq!(get("image-gc-high-threshold"), Some("85"));
        assert_eq!(get("image-gc-low-threshold"), Some("80"));
        assert_eq!(get("topology-manager-policy"), Some("single-numa-node"));
        assert_eq!(
            get("allowed-unsafe-sysctls"),
            Some("kernel.msg*,net.ipv4.route.min_pmtu")
        );
        assert_eq!(get("container-log-max-size"), Some("50Mi"));
        assert_eq!(get("container-log-max-files"), Some("5"));
        assert_eq!(get("pod-max-pids"), Some("4096"));
        assert_eq!(get("fail-swap-on"), Some("false"));
        assert!(kubelet_flags(None).expect("none").is_empty());
        assert!(kubelet_flags(Some(&json!({"containerLogMaxSize": "1Mi --v=9"}))).is_err());
        assert!(
            kubelet_flags(Some(
                &json!({"imageGCHighThresholdPercent": 50, "imageGCLowThresholdPercent": 60})
            ))
            .is_err()
        );
    }

    #[test]
    fn linux_os_config_becomes_bootstrap_steps() {
        let c = LinuxOsConfig::parse(Some(&json!({
            "sysctls": {"net.core.somaxconn": 16384, "vm.max_map_count": "262144"},
            "transparentHugePageEnabled": "madvise", "transparentHugePageDefrag": "defer+madvise",
            "swapFileSizeMB": 1500
        })))
        .expect("valid");
        let s = c.script();
        assert!(s.contains("net.core.somaxconn = 16384\n"), "{s}");
        assert!(s.contains("vm.max_map_count = 262144\n"), "{s}");
        assert!(s.contains("echo madvise > /sys/kernel/mm/transparent_hugepage/enabled\n"));
        assert!(s.contains("echo defer+madvise > /sys/kernel/mm/transparent_hugepage/defrag\n"));
        assert!(s.contains("fallocate -l 1500M /swapfile"));
        assert_eq!(LinuxOsConfig::parse(None).expect("none").script(), "");
        assert!(LinuxOsConfig::parse(Some(&json!({"sysctls": {"a; rm -rf /": 1}}))).is_err());
        assert!(
            LinuxOsConfig::parse(Some(&json!({"transparentHugePageEnabled": "sometimes"})))
                .is_err()
        );
    }
}
