//! The cloud-init user data that joins a Nebius VM to the cluster: the CA
//! and a bootstrap kubeconfig (TLS bootstrapping with the kubelet bootstrap
//! token), the kubelet's labels, taints, reservations and providerID, and
//! with WireGuard the wg0 interface toward the hub node, whose address
//! becomes the node IP.
//!
//! Architecture Invariant: pure. The `KUBELET_FLAGS=` line is one line of
//! space-separated `--flag=value` items (label and taint values hold no
//! spaces); the emulator, playing the VM, reads the Node it registers from
//! it. Nebius caps the user data at 32768 bytes.

use crate::catalog::EVICTION_HARD_MIB;
use base64::Engine;

pub const MAX_USER_DATA: usize = 32768;
/// The annotation a node publishes its WireGuard public key in, so the hub
/// can add it as a peer.
pub const PUBLIC_KEY_ANNOTATION: &str = "flex.aks.azure.com/wireguard-public-key";

#[derive(Debug, Clone, PartialEq)]
pub struct WireGuard {
    /// The node's address, also its kubelet --node-ip.
    pub address: String,
    pub prefix: u8,
    /// The whole peer range, routed through the hub.
    pub peer_cidr: String,
    pub hub_endpoint: String,
    pub hub_public_key: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Bootstrap {
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
    pub wireguard: Option<WireGuard>,
    pub ssh_public_key: Option<String>,
}

fn indent(text: &str, by: usize) -> String {
    let pad = " ".repeat(by);
    text.trim_end()
        .lines()
        .map(|l| format!("{pad}{l}\n"))
        .collect()
}

pub fn render(b: &Bootstrap) -> String {
    let labels: Vec<String> = b.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let mut flags = vec![
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
    ];
    if !b.taints.is_empty() {
        flags.push(format!("--register-with-taints={}", b.taints.join(",")));
    }
    if let Some(wg) = &b.wireguard {
        flags.push(format!("--node-ip={}", wg.address));
    }
    let ca = base64::engine::general_purpose::STANDARD.encode(b.ca_bundle.trim_end());
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: cluster\n  cluster:\n    certificate-authority-data: {ca}\n    server: {server}\nusers:\n- name: kubelet-bootstrap\n  user:\n    token: {token}\ncontexts:\n- name: bootstrap\n  context: {{cluster: cluster, user: kubelet-bootstrap}}\ncurrent-context: bootstrap\n",
        server = b.api_server,
        token = b.bootstrap_token,
    );
    let mut files = format!(
        "- path: /var/lib/kubelet/bootstrap-kubeconfig\n  permissions: '0600'\n  content: |\n{}- path: /etc/default/kubelet\n  content: |\n    KUBERNETES_VERSION={}\n    KUBELET_FLAGS={}\n",
        indent(&kubeconfig, 4),
        b.kubernetes_version,
        flags.join(" "),
    );
    let mut run = Vec::new();
    if let Some(wg) = &b.wireguard {
        // The private key never leaves the VM: it is made there, and the
        // public half is published on the Node for the hub to peer with.
        files.push_str(&format!(
            "- path: /etc/wireguard/wg0.conf.template\n  permissions: '0600'\n  content: |\n    [Interface]\n    Address = {}/{}\n    PrivateKey = __PRIVATE_KEY__\n    [Peer]\n    PublicKey = {}\n    Endpoint = {}\n    AllowedIPs = {}\n    PersistentKeepalive = 25\n",
            wg.address, wg.prefix, wg.hub_public_key, wg.hub_endpoint, wg.peer_cidr
        ));
        run.push("umask 077 && wg genkey > /etc/wireguard/private.key && wg pubkey < /etc/wireguard/private.key > /etc/wireguard/public.key".to_string());
        run.push("sed \"s|__PRIVATE_KEY__|$(cat /etc/wireguard/private.key)|\" /etc/wireguard/wg0.conf.template > /etc/wireguard/wg0.conf".to_string());
        run.push("systemctl enable --now wg-quick@wg0".to_string());
    }
    run.push("systemctl daemon-reload".to_string());
    run.push("systemctl enable --now kubelet".to_string());
    if b.wireguard.is_some() {
        run.push(format!(
            "until kubectl --kubeconfig /var/lib/kubelet/kubeconfig annotate --overwrite node \"$(hostname)\" {PUBLIC_KEY_ANNOTATION}=\"$(cat /etc/wireguard/public.key)\"; do sleep 5; done"
        ));
    }
    let runcmd: String = run
        .iter()
        .map(|c| format!("- {}\n", serde_json::Value::String(c.clone())))
        .collect();
    let ssh = b
        .ssh_public_key
        .as_deref()
        .map(|k| format!("ssh_authorized_keys:\n- {k}\n"))
        .unwrap_or_default();
    format!(
        "#cloud-config\n# Node bootstrap written by the karpenter Nebius provider.\n{ssh}write_files:\n{files}runcmd:\n{runcmd}"
    )
}

/// The `--name=value` flags of the user data's KUBELET_FLAGS line.
pub fn kubelet_flags(user_data: &str) -> Vec<(String, String)> {
    let Some(line) = user_data
        .lines()
        .find_map(|l| l.trim_start().strip_prefix("KUBELET_FLAGS="))
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

/// The API server and the CA (PEM) the user data's bootstrap kubeconfig
/// points at.
pub fn cluster_of(user_data: &str) -> Option<(String, String)> {
    let field = |k: &str| {
        user_data
            .lines()
            .find_map(|l| l.trim_start().strip_prefix(k))
            .map(str::trim)
    };
    let server = field("server:")?.to_string();
    let ca = base64::engine::general_purpose::STANDARD
        .decode(field("certificate-authority-data:")?)
        .ok()?;
    Some((server, String::from_utf8(ca).ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(wg: bool) -> Bootstrap {
        Bootstrap {
            api_server: "https://aks-xxxx.hcp.eastus2.azmk8s.io:443".into(),
            ca_bundle: "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n".into(),
            bootstrap_token: "abcdef.0123456789abcdef".into(),
            provider_id: "aks-nebius://nebius-cpu-nodepool-6g8v8".into(),
            labels: vec![
                ("karpenter.sh/nodepool".into(), "nebius-cpu-nodepool".into()),
                (
                    "node.kubernetes.io/instance-type".into(),
                    "cpu-d3-16vcpu-64gb".into(),
                ),
            ],
            taints: vec!["karpenter.sh/unregistered=:NoExecute".into()],
            kube_reserved_cpu_millis: 110,
            kube_reserved_memory_mib: 1465,
            max_pods: 110,
            kubernetes_version: "1.34.2".into(),
            wireguard: wg.then(|| WireGuard {
                address: "100.96.1.237".into(),
                prefix: 16,
                peer_cidr: "100.96.0.0/16".into(),
                hub_endpoint: "20.91.194.208:51820".into(),
                hub_public_key: "aHViLWtleQ==".into(),
            }),
            ssh_public_key: None,
        }
    }

    #[test]
    fn user_data_joins_the_node() {
        let ud = render(&sample(false));
        assert!(ud.starts_with("#cloud-config\n"));
        assert!(ud.contains("token: abcdef.0123456789abcdef"));
        assert_eq!(
            cluster_of(&ud),
            Some((
                "https://aks-xxxx.hcp.eastus2.azmk8s.io:443".into(),
                "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----".into()
            ))
        );
        let flags = kubelet_flags(&ud);
        let get = |k: &str| flags.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(
            get("provider-id"),
            Some("aks-nebius://nebius-cpu-nodepool-6g8v8")
        );
        assert_eq!(
            get("register-with-taints"),
            Some("karpenter.sh/unregistered=:NoExecute")
        );
        assert_eq!(get("kube-reserved"), Some("cpu=110m,memory=1465Mi"));
        assert_eq!(get("node-ip"), None);
        assert!(!ud.contains("wg0"));
        assert!(ud.len() < MAX_USER_DATA);
    }

    #[test]
    fn wireguard_sets_up_wg0_and_the_node_ip() {
        let ud = render(&sample(true));
        let flags = kubelet_flags(&ud);
        assert!(flags.contains(&("node-ip".into(), "100.96.1.237".into())));
        assert!(ud.contains("Address = 100.96.1.237/16"));
        assert!(ud.contains("Endpoint = 20.91.194.208:51820"));
        assert!(ud.contains("wg-quick@wg0"));
        assert!(ud.contains(PUBLIC_KEY_ANNOTATION));
    }
}
