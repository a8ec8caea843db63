//! The node bootstrap script passed as the VM's customData: it writes the
//! cluster CA and a bootstrap kubeconfig (TLS bootstrapping with the kubelet
//! bootstrap token) and starts the kubelet with the node's labels, taints,
//! reservations and providerID.
//!
//! Architecture Invariant: pure. The `KUBELET_FLAGS=` line is one line of
//! space-separated `--flag=value` items (label and taint values hold no
//! spaces); the emulator reads the node it registers from it.

use crate::kubelet::LinuxOsConfig;
use crate::overhead::EVICTION_HARD_MIB;

#[derive(Debug, Clone, PartialEq)]
pub struct Bootstrap {
    pub node_name: String,
    pub api_server: String,
    pub ca_bundle: String,
    pub bootstrap_token: String,
    pub provider_id: String,
    pub labels: Vec<(String, String)>,
    /// `key=value:Effect` items.
    pub taints: Vec<String>,
    pub kube_reserved_cpu_millis: u64,
    pub kube_reserved_memory_mib: u64,
    pub max_pods: u64,
    pub kubernetes_version: String,
    /// From the AKSNodeClass `kubelet` block: (flag without `--`, value).
    pub kubelet_flags: Vec<(String, String)>,
    pub linux_os_config: LinuxOsConfig,
    /// Some(install?) on GPU sizes (gpu.mode Driver installs the driver).
    pub gpu_driver: Option<bool>,
}

pub fn render(b: &Bootstrap) -> String {
    let labels: Vec<String> = b.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let mut flags = vec![
        format!("--hostname-override={}", b.node_name),
        format!("--provider-id={}", b.provider_id),
        format!("--node-labels={}", labels.join(",")),
        format!("--max-pods={}", b.max_pods),
        format!(
            "--kube-reserved=cpu={}m,memory={}Mi",
            b.kube_reserved_cpu_millis, b.kube_reserved_memory_mib
        ),
        format!("--eviction-hard=memory.available<{EVICTION_HARD_MIB}Mi"),
        "--bootstrap-kubeconfig=/var/lib/kubelet/bootstrap-kubeconfig".to_string(),
        "--kubeconfig=/var/lib/kubelet/kubeconfig".to_string(),
        "--cloud-provider=external".to_string(),
    ];
    if !b.taints.is_empty() {
        flags.push(format!("--register-with-taints={}", b.taints.join(",")));
    }
    flags.extend(b.kubelet_flags.iter().map(|(k, v)| format!("--{k}={v}")));
    let mut node_setup = b.linux_os_config.script();
    match b.gpu_driver {
        Some(true) => {
            node_setup.push_str("GPU_DRIVER=install\n/opt/azure/containers/aks-gpu/install.sh\n")
        }
        Some(false) => node_setup.push_str("GPU_DRIVER=none\n"),
        None => {}
    }
    format!(
        r#"#!/bin/bash
# Node bootstrap written by the karpenter Azure provider.
set -euo pipefail
KUBERNETES_VERSION={version}
mkdir -p /etc/kubernetes/certs /var/lib/kubelet
cat > /etc/kubernetes/certs/ca.crt <<'CA_EOF'
{ca}
CA_EOF
cat > /var/lib/kubelet/bootstrap-kubeconfig <<'KUBECONFIG_EOF'
apiVersion: v1
kind: Config
clusters:
- name: cluster
  cluster:
    certificate-authority: /etc/kubernetes/certs/ca.crt
    server: {server}
users:
- name: kubelet-bootstrap
  user:
    token: {token}
contexts:
- name: bootstrap
  context: {{cluster: cluster, user: kubelet-bootstrap}}
current-context: bootstrap
KUBECONFIG_EOF
{node_setup}cat > /etc/default/kubelet <<'FLAGS_EOF'
KUBELET_FLAGS={flags}
FLAGS_EOF
systemctl daemon-reload
systemctl enable --now kubelet
"#,
        version = b.kubernetes_version,
        ca = b.ca_bundle.trim_end(),
        server = b.api_server,
        token = b.bootstrap_token,
        flags = flags.join(" "),
    )
}

/// The `--name=value` flags of the script's KUBELET_FLAGS line.
pub fn kubelet_flags(script: &str) -> Vec<(String, String)> {
    let Some(line) = script
        .lines()
        .find_map(|l| l.strip_prefix("KUBELET_FLAGS="))
    else {
        return Vec::new();
    };
    line.split_whitespace()
        .filter_map(|f| f.strip_prefix("--"))
        .map(|f| match f.split_once('=') {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None => (f.to_string(), String::new()),
        })
        .collect()
}

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding, as ARM wants customData.
pub fn base64(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Bootstrap {
        Bootstrap {
            node_name: "aks-default-abcde".into(),
            api_server: "https://aks-xxxx.hcp.eastus2.azmk8s.io:443".into(),
            ca_bundle: "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n".into(),
            bootstrap_token: "abcdef.0123456789abcdef".into(),
            provider_id: "azure:///subscriptions/s/resourceGroups/mc_rg/providers/Microsoft.Compute/virtualMachines/aks-default-abcde".into(),
            labels: vec![("karpenter.sh/nodepool".into(), "default".into()), ("node.kubernetes.io/instance-type".into(), "Standard_D4s_v5".into())],
            taints: vec!["karpenter.sh/unregistered=:NoExecute".into()],
            kube_reserved_cpu_millis: 140,
            kube_reserved_memory_mib: 650,
            max_pods: 30,
            kubernetes_version: "1.34.2".into(),
            kubelet_flags: vec![],
            linux_os_config: LinuxOsConfig::default(),
            gpu_driver: None,
        }
    }

    #[test]
    fn script_carries_the_kubelet_configuration() {
        let script = render(&sample());
        assert!(script.starts_with("#!/bin/bash\n"));
        assert!(script.contains("token: abcdef.0123456789abcdef"));
        assert!(script.contains("MIIB"));
        let flags = kubelet_flags(&script);
        let get = |k: &str| flags.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("kube-reserved"), Some("cpu=140m,memory=650Mi"));
        assert_eq!(get("eviction-hard"), Some("memory.available<100Mi"));
        assert_eq!(get("max-pods"), Some("30"));
        assert_eq!(
            get("register-with-taints"),
            Some("karpenter.sh/unregistered=:NoExecute")
        );
        assert_eq!(
            get("node-labels"),
            Some("karpenter.sh/nodepool=default,node.kubernetes.io/instance-type=Standard_D4s_v5")
        );
        assert!(get("provider-id").is_some_and(|p| p.starts_with("azure:///subscriptions/s/")));
    }

    #[test]
    fn node_configuration_reaches_the_script() {
        let mut b = sample();
        b.kubelet_flags = vec![("cpu-manager-policy".into(), "static".into())];
        b.linux_os_config = LinuxOsConfig {
            sysctls: vec![("vm.max_map_count".into(), "262144".into())],
            ..LinuxOsConfig::default()
        };
        b.gpu_driver = Some(true);
        let script = render(&b);
        let flags = kubelet_flags(&script);
        assert!(flags.contains(&("cpu-manager-policy".into(), "static".into())));
        assert!(script.contains("vm.max_map_count = 262144\n"));
        assert!(script.contains("GPU_DRIVER=install\n"));
        b.gpu_driver = Some(false);
        assert!(render(&b).contains("GPU_DRIVER=none\n"));
        assert!(!render(&sample()).contains("GPU_DRIVER"));
    }

    #[test]
    fn base64_matches_rfc4648() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
    }
}
