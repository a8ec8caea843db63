//! The real Azure plugin (built by the test build) in the
//! host's runtime against the emulator: create, idempotency, get, list,
//! delete, capacity failures and the examples through `simulate`.
//!
//! With `KARPENTER_TEST_CLUSTER=NAME` (a cluster from `tests/cluster/up NAME`)
//! the emulator registers each VM's Node there and the test checks it.

use azure_emulator::{Emulator, Fault, Injection, Kube, Options, Quota};
use karpenter_runtime::bindings::v0_1_4::karpenter::provider::tokens::AccessToken;
use karpenter_runtime::capabilities::cluster::ClusterView;
use karpenter_runtime::capabilities::tokens::{TokenFuture, TokenSource};
use karpenter_runtime::{Plugin, PluginConfig, Runtime, RuntimeOptions, wit};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

const SUB: &str = "00000000-0000-0000-0000-000000000001";
const RG: &str = "MC_rg_aks_westus3";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../..")
}

fn wasm() -> Vec<u8> {
    let path = karpenter_test_plugins::path("azure").expect("the test build builds azure");
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Workload identity against the emulator's token endpoint.
struct EmulatorTokens(String);

impl TokenSource for EmulatorTokens {
    fn token<'a>(&'a self, scopes: &'a [String]) -> TokenFuture<'a> {
        Box::pin(async move {
            let form = format!(
                "client_id=c&grant_type=client_credentials&client_assertion=jwt&scope={}",
                scopes.join(" ")
            );
            let r = reqwest::Client::new()
                .post(format!("{}/tenant/oauth2/v2.0/token", self.0))
                .header("content-type", "application/x-www-form-urlencoded")
                .body(form)
                .send()
                .await
                .map_err(|e| e.to_string())?;
            let v: serde_json::Value = r.json().await.map_err(|e| e.to_string())?;
            let token = v["access_token"]
                .as_str()
                .ok_or("no access_token")?
                .to_string();
            Ok(AccessToken {
                token,
                expires_at: u64::MAX / 2,
            })
        })
    }
}

/// The cluster named by KARPENTER_TEST_CLUSTER, if it is up.
fn cluster() -> Option<Kube> {
    let name = std::env::var("KARPENTER_TEST_CLUSTER").ok()?;
    let dir = std::env::var("XDG_RUNTIME_DIR").unwrap_or_else(|_| "/tmp".into());
    let env = std::fs::read_to_string(format!("{dir}/karpenter-clusters/{name}/env")).ok()?;
    let get = |k: &str| {
        env.lines()
            .find_map(|l| l.strip_prefix(&format!("{k}=")))
            .map(|v| v.trim_matches('"').to_string())
    };
    Some(Kube {
        endpoint: get("CLUSTER_ENDPOINT")?,
        ca_pem: std::fs::read(get("CLUSTER_CA_FILE")?).ok()?,
        token: std::fs::read_to_string(get("CLUSTER_TOKEN_FILE")?)
            .ok()?
            .trim()
            .to_string(),
    })
}

struct Setup {
    emulator: Arc<Emulator>,
    plugin: Plugin,
    kube: Option<Kube>,
    _server: tokio::task::JoinHandle<()>,
}

async fn setup(quota: Quota) -> Setup {
    setup_with(quota, &[]).await
}

/// As [`setup`], with further plugin settings.
async fn setup_with(quota: Quota, more: &[(&str, &str)]) -> Setup {
    let kube = cluster();
    if let Some(k) = &kube {
        eprintln!("VMs register their Nodes at {}", k.endpoint);
    }
    let emulator = Emulator::new(Options {
        location: "westus3".into(),
        require_auth: true,
        op_polls: 1,
        page_size: 1, // every list follows nextLink
        kube: kube.clone(),
        quota,
        injections: vec![],
        tls: false,
        ..Options::default()
    })
    .expect("emulator");
    let (addr, server) = emulator.clone().serve(0).await.expect("serve");
    let base = format!("http://{addr}");
    let (endpoint, ca) = match &kube {
        Some(k) => (
            k.endpoint.clone(),
            String::from_utf8_lossy(&k.ca_pem).into_owned(),
        ),
        None => (
            "https://127.0.0.1:6443".to_string(),
            "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n".to_string(),
        ),
    };
    let runtime = Runtime::new(RuntimeOptions {
        tokens: Arc::new(EmulatorTokens(base.clone())),
        cluster: Arc::new(ClusterView::new("aks", &endpoint, &ca)),
        ..RuntimeOptions::default()
    })
    .expect("runtime");
    let settings: BTreeMap<String, String> = [
        ("LOCATION", "westus3"),
        ("AZURE_SUBSCRIPTION_ID", SUB),
        ("AZURE_NODE_RESOURCE_GROUP", RG),
        ("ARM_RESOURCE_GROUP", "rg"),
        ("VNET_SUBNET_ID", "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/vnet/subnets/aks"),
        ("KUBELET_BOOTSTRAP_TOKEN", "abcdef.0123456789abcdef"),
        ("SSH_PUBLIC_KEY", "ssh-ed25519 AAAAtest"),
        ("ARM_ENDPOINT", &base),
        ("PRICES_ENDPOINT", &base),
        ("CLUSTER_NAME", "aks"),
    ]
    .into_iter()
    .chain(more.iter().copied())
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let config = PluginConfig {
        allowed_hosts: vec![base.clone()],
        settings,
        tokens: true,
        ..PluginConfig::default()
    };
    let plugin = runtime
        .load("azure", &wasm(), config)
        .await
        .expect("plugin loads");
    Setup {
        emulator,
        plugin,
        kube,
        _server: server,
    }
}

fn class() -> wit::NodeClass {
    wit::NodeClass {
        name: "azure".into(),
        generation: 1,
        json: r#"{"apiVersion":"karpenter.azure.com/v1beta1","kind":"AKSNodeClass","metadata":{"name":"azure"},"spec":{"imageFamily":"Ubuntu"}}"#.into(),
    }
}

fn pool() -> wit::NodePool {
    wit::NodePool {
        name: "default".into(),
        labels: vec![],
        annotations: vec![],
        taints: vec![],
        startup_taints: vec![],
        requirements: vec![],
        node_class_ref: wit::NodeClassRef {
            group: "karpenter.azure.com".into(),
            kind: "AKSNodeClass".into(),
            name: "azure".into(),
        },
    }
}

fn req(key: &str, values: &[&str]) -> wit::Requirement {
    wit::Requirement {
        key: key.into(),
        operator: wit::Operator::In,
        values: values.iter().map(|v| v.to_string()).collect(),
        min_values: None,
    }
}

fn claim(name: &str, reqs: Vec<wit::Requirement>) -> wit::NodeClaim {
    wit::NodeClaim {
        name: name.into(),
        node_pool: "default".into(),
        labels: vec![("team".into(), "a".into())],
        annotations: vec![],
        taints: vec![],
        startup_taints: vec![],
        requirements: reqs,
        resource_requests: vec![("cpu".into(), "1".into())],
        node_class_ref: pool().node_class_ref,
        provider_id: None,
        image_id: None,
        kubelet_version: None,
    }
}

async fn node(kube: &Kube, name: &str) -> Option<serde_json::Value> {
    let client = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&kube.ca_pem).ok()?)
        .build()
        .ok()?;
    let r = client
        .get(format!("{}/api/v1/nodes/{name}", kube.endpoint))
        .bearer_auth(&kube.token)
        .send()
        .await
        .ok()?;
    if !r.status().is_success() {
        return None;
    }
    r.json().await.ok()
}

#[tokio::test]
async fn create_get_list_delete() {
    let s = setup(Quota::default()).await;
    let status = s
        .plugin
        .validate_node_class(&class())
        .await
        .expect("validates");
    let ready = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .expect("Ready");
    assert!(
        matches!(ready.status, wit::ConditionStatus::True),
        "{:?}",
        status.conditions
    );
    assert!(
        status.resolved.contains("\"kubernetesVersion\":\"1.34.2\""),
        "{}",
        status.resolved
    );

    let cold = Instant::now();
    let types = s
        .plugin
        .get_instance_types(&pool(), &class())
        .await
        .expect("instance types")
        .into_listed();
    let cold = cold.elapsed();
    let warm = Instant::now();
    let again = s
        .plugin
        .get_instance_types(&pool(), &class())
        .await
        .expect("instance types")
        .into_listed();
    let warm = warm.elapsed();
    eprintln!(
        "get-instance-types: {} types, cold {cold:?} (SKU and price refresh from the emulator), warm {warm:?}",
        types.len()
    );
    assert_eq!(types.len(), again.len());
    assert!(types.iter().any(|t| t.name == "Standard_NC24ads_A100_v4"));
    // The SKU list came from the emulator's Resource SKUs API.
    assert!(
        s.emulator
            .requests()
            .iter()
            .any(|r| r.contains("/providers/Microsoft.Compute/skus")),
        "{:?}",
        s.emulator.requests()
    );

    let reqs = vec![
        req(
            "node.kubernetes.io/instance-type",
            &["Standard_D2s_v5", "Standard_D4s_v5"],
        ),
        req("karpenter.sh/capacity-type", &["on-demand"]),
        req("topology.kubernetes.io/zone", &["westus3-2"]),
    ];
    let c = claim("default-abcde", reqs);
    let i = s.plugin.create(&c, &class()).await.expect("create");
    assert_eq!(i.instance_type, "Standard_D2s_v5");
    assert_eq!(i.zone, "westus3-2");
    assert_eq!(i.capacity_type, "on-demand");
    assert_eq!(
        i.provider_id,
        format!(
            "azure:///subscriptions/{SUB}/resourceGroups/mc_rg_aks_westus3/providers/Microsoft.Compute/virtualMachines/aks-default-abcde"
        )
    );
    assert_eq!(s.emulator.vms(), ["mc_rg_aks_westus3/aks-default-abcde"]);
    assert_eq!(s.emulator.nics(), ["mc_rg_aks_westus3/aks-default-abcde"]);

    // Idempotent by NodeClaim name.
    let again = s.plugin.create(&c, &class()).await.expect("create again");
    assert_eq!(again.provider_id, i.provider_id);
    assert_eq!(s.emulator.vms().len(), 1);

    let got = s.plugin.get(&i.provider_id).await.expect("get");
    assert_eq!(got.node_claim, "default-abcde");
    assert!(matches!(got.state, wit::InstanceState::Running));
    let c2 = claim(
        "default-fghij",
        vec![req(
            "node.kubernetes.io/instance-type",
            &["Standard_D2s_v5"],
        )],
    );
    s.plugin.create(&c2, &class()).await.expect("second create");
    let listed = s.plugin.list().await.expect("list");
    let mut names: Vec<_> = listed.iter().map(|i| i.node_claim.clone()).collect();
    names.sort();
    assert_eq!(names, ["default-abcde", "default-fghij"]);

    if let Some(kube) = &s.kube {
        let n = node(kube, "aks-default-abcde")
            .await
            .expect("the Node registered");
        assert_eq!(n["spec"]["providerID"], i.provider_id.as_str());
        assert_eq!(n["metadata"]["labels"]["team"], "a");
        assert_eq!(
            n["metadata"]["labels"]["karpenter.azure.com/sku-name"],
            "Standard_D2s_v5"
        );
        assert_eq!(n["status"]["allocatable"]["cpu"], "1900m"); // 2000m - 100m
        let taints = n["spec"]["taints"].to_string();
        assert!(taints.contains("karpenter.sh/unregistered"), "{taints}");
    }

    let mut with_id = c.clone();
    with_id.provider_id = Some(i.provider_id.clone());
    s.plugin.delete(&with_id).await.expect("delete");
    assert_eq!(s.emulator.vms(), ["mc_rg_aks_westus3/aks-default-fghij"]);
    assert_eq!(s.emulator.nics(), ["mc_rg_aks_westus3/aks-default-fghij"]);
    let gone = s.plugin.delete(&with_id).await.expect_err("gone");
    assert!(
        matches!(gone.provider_error(), Some(wit::Error::NotFound(_))),
        "{gone}"
    );
    let gone = s.plugin.get(&i.provider_id).await.expect_err("gone");
    assert!(
        matches!(gone.provider_error(), Some(wit::Error::NotFound(_))),
        "{gone}"
    );
    if let Some(kube) = &s.kube {
        assert!(
            node(kube, "aks-default-abcde").await.is_none(),
            "the Node went with the VM"
        );
        s.plugin.delete(&c2).await.expect("delete the second");
    }
}

#[tokio::test]
async fn zonal_allocation_failure_marks_the_offering_unavailable() {
    let s = setup(Quota::default()).await;
    s.emulator
        .inject(Injection::parse("ZonalAllocationFailed:1").expect("injection"));
    let reqs = vec![
        req("node.kubernetes.io/instance-type", &["Standard_D4s_v5"]),
        req("karpenter.sh/capacity-type", &["on-demand"]),
        req("karpenter.azure.com/placement-scope", &["zonal"]),
    ];
    // westus3-1 is the cheapest-first tie winner among equal zonal prices.
    let err = s
        .plugin
        .create(&claim("default-zonal", reqs.clone()), &class())
        .await
        .expect_err("no capacity");
    let Some(wit::Error::InsufficientCapacity(ic)) = err.provider_error() else {
        panic!("{err}")
    };
    assert_eq!(ic.offerings.len(), 1, "{:?}", ic.offerings);
    assert_eq!(
        (
            ic.offerings[0].instance_type.as_str(),
            ic.offerings[0].zone.as_str()
        ),
        ("Standard_D4s_v5", "westus3-1")
    );
    assert!(
        ic.message.contains("ZonalAllocationFailed"),
        "{}",
        ic.message
    );
    assert!(
        s.emulator.vms().is_empty() && s.emulator.nics().is_empty(),
        "nothing left behind"
    );

    let types = s
        .plugin
        .get_instance_types(&pool(), &class())
        .await
        .expect("types")
        .into_listed();
    let d4 = types
        .iter()
        .find(|t| t.name == "Standard_D4s_v5")
        .expect("d4");
    for o in &d4.offerings {
        let expect = !(o.zone == "westus3-1" && o.capacity_type == "on-demand");
        assert_eq!(o.available, expect, "{} {}", o.zone, o.capacity_type);
    }
    // The next launch picks another zone.
    let i = s
        .plugin
        .create(&claim("default-zonal2", reqs), &class())
        .await
        .expect("create elsewhere");
    assert_ne!(i.zone, "westus3-1");
    assert_ne!(i.zone, "0");
}

/// Each error ARM answers a create with, as ARM answers it (the NIC's PUT or
/// the VM's, at once or in the operation), comes back under one reason,
/// with ARM's code in the message, and leaves nothing behind.
#[tokio::test]
async fn every_create_error_comes_back_under_one_reason() {
    let s = setup(Quota::default()).await;
    let cases = [
        ("ZonalAllocationFailed", "ZonalAllocationFailed", true),
        ("AllocationFailed", "AllocationFailed", true),
        (
            "OverconstrainedAllocationRequest",
            "OverconstrainedAllocationRequest",
            true,
        ),
        (
            "OverconstrainedZonalAllocationRequest",
            "OverconstrainedZonalAllocationRequest",
            true,
        ),
        ("SkuNotAvailable", "SKUNotAvailable", true),
        ("SubnetIsFull", "SubnetFull", false),
        ("GalleryImageNotFound", "ImageNotFound", false),
        ("AuthorizationFailed", "AuthorizationFailed", false),
        ("LinkedAuthorizationFailed", "AuthorizationFailed", false),
    ];
    // A size each: a failure keeps its offerings out for a while.
    let sizes = [
        "Standard_D2s_v5",
        "Standard_D4s_v5",
        "Standard_D8s_v5",
        "Standard_D16s_v5",
        "Standard_E2s_v5",
        "Standard_E4s_v5",
        "Standard_E8s_v5",
        "Standard_E16s_v5",
        "Standard_D2as_v5",
    ];
    for (i, (code, reason, gives_way)) in cases.into_iter().enumerate() {
        let mut inj = Injection::parse(code).expect("injection");
        inj.count = 1;
        s.emulator.inject(inj);
        let c = claim(
            &format!("default-err{i}"),
            vec![req("node.kubernetes.io/instance-type", &[sizes[i]])],
        );
        let err = s.plugin.create(&c, &class()).await.expect_err(code);
        match err.provider_error() {
            Some(wit::Error::InsufficientCapacity(ic)) if gives_way => {
                assert!(
                    ic.message.starts_with(&format!("{reason}: ")),
                    "{code}: {}",
                    ic.message
                );
                assert!(ic.message.contains(code), "{}", ic.message);
                assert!(!ic.offerings.is_empty(), "{code}: names the offerings");
            }
            Some(wit::Error::CreateError(ce)) if !gives_way => {
                assert_eq!(ce.reason, reason, "{code}: {}", ce.message);
                assert!(ce.message.contains(code), "{}", ce.message);
                assert!(!ce.retryable, "{code} needs someone to act");
            }
            other => panic!("{code}: {other:?}"),
        }
        assert!(
            s.emulator.vms().is_empty() && s.emulator.nics().is_empty(),
            "{code}: nothing left behind"
        );
    }
    // Throttled past every retry.
    s.emulator
        .fault(fault(429, Some(0), "PUT", "/virtualMachines/", 5));
    let c = claim(
        "default-throttled",
        vec![req(
            "node.kubernetes.io/instance-type",
            &["Standard_D4as_v5"],
        )],
    );
    let err = s.plugin.create(&c, &class()).await.expect_err("throttled");
    let Some(wit::Error::CreateError(ce)) = err.provider_error() else {
        panic!("{err}")
    };
    assert_eq!(ce.reason, "Throttled", "{}", ce.message);
    assert!(
        ce.retryable && ce.message.contains("TooManyRequests (429)"),
        "{ce:?}"
    );
}

#[tokio::test]
async fn spot_quota_marks_every_spot_offering() {
    // A quota error on create (another user of the subscription took the
    // vCPUs since the plugin read the usages), without the check before it.
    let s = setup_with(
        Quota {
            low_priority_cores: Some(0),
            ..Quota::default()
        },
        &[("QUOTA_CHECK", "false")],
    )
    .await;
    let reqs = vec![
        req("node.kubernetes.io/instance-type", &["Standard_D4s_v5"]),
        req("karpenter.sh/capacity-type", &["spot"]),
    ];
    let err = s
        .plugin
        .create(&claim("default-spot", reqs), &class())
        .await
        .expect_err("over quota");
    let Some(wit::Error::InsufficientCapacity(ic)) = err.provider_error() else {
        panic!("{err}")
    };
    assert!(
        ic.offerings.len() > 100 && ic.offerings.iter().all(|o| o.capacity_type == "spot"),
        "{}",
        ic.offerings.len()
    );
    let types = s
        .plugin
        .get_instance_types(&pool(), &class())
        .await
        .expect("types")
        .into_listed();
    for t in &types {
        for o in &t.offerings {
            assert_eq!(
                o.available,
                o.capacity_type == "on-demand",
                "{} {} {}",
                t.name,
                o.zone,
                o.capacity_type
            );
        }
    }
}

#[tokio::test]
async fn family_quota_marks_the_family() {
    // A quota error on create (another user of the subscription took the
    // vCPUs since the plugin read the usages), without the check before it.
    let s = setup_with(
        Quota {
            family_cores: [("standardDSv5Family".to_string(), 2)].into(),
            ..Quota::default()
        },
        &[("QUOTA_CHECK", "false")],
    )
    .await;
    let reqs = vec![
        req("node.kubernetes.io/instance-type", &["Standard_D4s_v5"]),
        req("karpenter.sh/capacity-type", &["on-demand"]),
    ];
    let err = s
        .plugin
        .create(&claim("default-family", reqs), &class())
        .await
        .expect_err("over quota");
    let Some(wit::Error::InsufficientCapacity(ic)) = err.provider_error() else {
        panic!("{err}")
    };
    assert!(
        ic.offerings
            .iter()
            .all(|o| o.instance_type.ends_with("s_v5")
                && o.instance_type.starts_with("Standard_D")
                && o.capacity_type == "on-demand")
    );
    assert_eq!(ic.offerings.len(), 8 * 4);
}

/// On demand, a D4 listed first and an E4 second.
fn d4_then_e4() -> Vec<wit::Requirement> {
    vec![
        req(
            "node.kubernetes.io/instance-type",
            &["Standard_D4s_v5", "Standard_E4s_v5"],
        ),
        req("karpenter.sh/capacity-type", &["on-demand"]),
    ]
}

/// Five on-demand NodeClaims that list a D4 first and an E4 second, with
/// 16 vCPUs of D-family quota: the types each VM got, and the VM creates
/// ARM refused.
async fn five_launches_under_a_d_family_quota(more: &[(&str, &str)]) -> (Vec<String>, usize) {
    let s = setup_with(
        Quota {
            family_cores: [("standardDSv5Family".to_string(), 16)].into(),
            ..Quota::default()
        },
        more,
    )
    .await;
    let mut launched = Vec::new();
    for i in 0..5 {
        match s
            .plugin
            .create(&claim(&format!("q-{i}"), d4_then_e4()), &class())
            .await
        {
            Ok(instance) => launched.push(instance.instance_type),
            Err(e) => launched.push(format!("failed: {e}")),
        }
    }
    let creates = count(&s.emulator.requests(), "PUT", "/virtualMachines/");
    (launched, creates - s.emulator.vms().len())
}

#[tokio::test]
async fn quota_is_read_before_launch_and_the_next_family_takes_the_rest() {
    let (launched, refused) = five_launches_under_a_d_family_quota(&[]).await;
    assert_eq!(
        launched,
        [
            "Standard_D4s_v5",
            "Standard_D4s_v5",
            "Standard_D4s_v5",
            "Standard_D4s_v5",
            "Standard_E4s_v5"
        ]
    );
    assert_eq!(refused, 0, "no create may fail on quota");

    // Without the check ARM refuses the fifth.
    let (launched, refused) =
        five_launches_under_a_d_family_quota(&[("QUOTA_CHECK", "false")]).await;
    assert_eq!(refused, 1, "{launched:?}");
    assert!(launched[4].contains("standardDSv5Family"), "{launched:?}");
}

#[tokio::test]
async fn launches_at_once_share_the_quota() {
    let s = setup(Quota {
        family_cores: [("standardDSv5Family".to_string(), 16)].into(),
        ..Quota::default()
    })
    .await;
    let plugin = &s.plugin;
    let one = |i: usize| {
        let c = claim(&format!("at-once-{i}"), d4_then_e4());
        async move { plugin.create(&c, &class()).await.map(|i| i.instance_type) }
    };
    let all = tokio::join!(one(0), one(1), one(2), one(3), one(4), one(5));
    let launched: Vec<String> = [all.0, all.1, all.2, all.3, all.4, all.5]
        .into_iter()
        .map(|r| r.expect("every launch finds room"))
        .collect();
    let d = launched.iter().filter(|t| *t == "Standard_D4s_v5").count();
    assert!((1..=4).contains(&d), "{launched:?}");
    let creates = count(&s.emulator.requests(), "PUT", "/virtualMachines/");
    assert_eq!(creates, 6, "no create refused: {launched:?}");
    assert_eq!(s.emulator.vms().len(), 6);
}

#[tokio::test]
async fn a_nodeclaim_only_quota_keeps_back_says_which_quota() {
    let s = setup(Quota {
        family_cores: [("standardDSv5Family".to_string(), 6)].into(),
        ..Quota::default()
    })
    .await;
    let d4 = || {
        vec![
            req("node.kubernetes.io/instance-type", &["Standard_D4s_v5"]),
            req("karpenter.sh/capacity-type", &["on-demand"]),
        ]
    };
    s.plugin
        .create(&claim("only-1", d4()), &class())
        .await
        .expect("4 of 6 vCPUs");
    let err = s
        .plugin
        .create(&claim("only-2", d4()), &class())
        .await
        .expect_err("over quota");
    let Some(wit::Error::InsufficientCapacity(ic)) = err.provider_error() else {
        panic!("{err}")
    };
    assert_eq!(
        ic.message,
        "NodeClaim only-2 is over quota: family standardDSv5Family: 4 of 6 vCPUs used; Standard_D4s_v5 needs 4"
    );
    assert!(
        !ic.offerings.is_empty()
            && ic
                .offerings
                .iter()
                .all(|o| o.instance_type == "Standard_D4s_v5" && o.capacity_type == "on-demand"),
        "{:?}",
        ic.offerings
    );
    // The catalog says so too: the D family's on-demand offerings that need
    // more than 2 vCPUs are out, its D2 and spot offerings and other
    // families stay.
    let types = s
        .plugin
        .get_instance_types(&pool(), &class())
        .await
        .expect("types")
        .into_listed();
    let available = |name: &str, ct: &str| {
        types.iter().find(|t| t.name == name).is_some_and(|t| {
            t.offerings
                .iter()
                .any(|o| o.capacity_type == ct && o.available)
        })
    };
    assert!(!available("Standard_D4s_v5", "on-demand"));
    assert!(available("Standard_D2s_v5", "on-demand"));
    assert!(available("Standard_D4s_v5", "spot"));
    assert!(available("Standard_E4s_v5", "on-demand"));
    assert_eq!(count(&s.emulator.requests(), "PUT", "/virtualMachines/"), 1);
}

#[tokio::test]
async fn examples_place_cpu_pods_on_d_family_and_the_gpu_pod_on_the_gpu_sku() {
    use karpenter::simulate::{self, manifests::Manifests};
    // A plugin directory with only the azure plugin and no configuration:
    // the embedded catalog answers.
    let dir = std::env::temp_dir().join(format!("azure-simulate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(dir.join("azure.wasm"), wasm()).expect("copy plugin");
    let registry = karpenter_runtime::Registry::open(
        Runtime::new(RuntimeOptions::default()).expect("runtime"),
        cap_std::fs::Dir::open_ambient_dir(&dir, cap_std::ambient_authority()).expect("open"),
    )
    .await
    .expect("registry");
    let mut m = Manifests::default();
    for f in [
        "nodeclass.yaml",
        "cpu_nodepool.yaml",
        "gpu_nodepool.yaml",
        "cpu_deployment.yaml",
        "gpu_deployment.yaml",
    ] {
        let text = std::fs::read_to_string(root().join("examples/azure").join(f)).expect("example");
        m.add_yaml(f, &text).expect("parses");
    }
    let sim = simulate::offline(&m, &registry).await.expect("simulates");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        sim.plan.unschedulable.is_empty(),
        "{:?}",
        sim.plan.unschedulable
    );
    assert_eq!(sim.pod_count, 4);
    let mut cpu = 0;
    let mut gpu = 0;
    for claim in &sim.plan.new_node_claims {
        let cheapest = claim.cheapest.as_ref().expect("an offering");
        match claim.node_pool.as_str() {
            "azure-cpu-nodepool" => {
                assert!(
                    cheapest.instance_type.starts_with("Standard_D"),
                    "{}",
                    cheapest.instance_type
                );
                assert!(
                    sim.plan
                        .instance_type_names(claim)
                        .all(|t| t.starts_with("Standard_D"))
                );
                cpu += claim.pods.len();
            }
            "azure-gpu-nodepool" => {
                assert_eq!(cheapest.instance_type, "Standard_NC24ads_A100_v4");
                gpu += claim.pods.len();
            }
            other => panic!("unexpected pool {other}"),
        }
    }
    assert_eq!((cpu, gpu), (3, 1));
}

fn count(requests: &[String], method: &str, path_part: &str) -> usize {
    requests
        .iter()
        .filter(|r| r.starts_with(&format!("{method} ")) && r.contains(path_part))
        .count()
}

fn fault(status: u16, retry_after: Option<u64>, method: &str, path: &str, count: u32) -> Fault {
    Fault {
        status,
        retry_after,
        method: Some(method.into()),
        path: Some(path.into()),
        count,
    }
}

#[tokio::test]
async fn throttling_and_server_errors_are_retried_with_backoff() {
    let s = setup(Quota::default()).await;
    // One 429 on the NIC, two 503s on the VM (Retry-After: 1 each), and a
    // 500 without Retry-After on an operation poll (the plugin's own backoff).
    s.emulator
        .fault(fault(429, Some(1), "PUT", "/networkInterfaces/", 1));
    s.emulator
        .fault(fault(503, Some(1), "PUT", "/virtualMachines/", 2));
    s.emulator.fault(fault(500, None, "GET", "/operations/", 1));
    let c = claim(
        "default-retry",
        vec![req(
            "node.kubernetes.io/instance-type",
            &["Standard_D2s_v5"],
        )],
    );
    let started = Instant::now();
    let i = s
        .plugin
        .create(&c, &class())
        .await
        .expect("create succeeds");
    let took = started.elapsed();
    assert_eq!(i.instance_type, "Standard_D2s_v5");
    assert_eq!(s.emulator.vms(), ["mc_rg_aks_westus3/aks-default-retry"]);
    let log = s.emulator.requests();
    assert_eq!(
        count(&log, "PUT", "/networkInterfaces/aks-default-retry"),
        2,
        "{log:?}"
    );
    assert_eq!(
        count(&log, "PUT", "/virtualMachines/aks-default-retry"),
        3,
        "{log:?}"
    );
    // 1 s + 2 × 1 s of Retry-After, and at least 0.5 s of backoff.
    assert!(
        took >= Duration::from_millis(3_500),
        "retried without waiting: {took:?}"
    );
    eprintln!("create with 4 transient failures took {took:?}");
}

#[tokio::test]
async fn a_persistent_server_error_is_a_clear_error_and_leaves_nothing_behind() {
    let s = setup(Quota::default()).await;
    s.emulator
        .fault(fault(503, Some(1), "PUT", "/virtualMachines/", u32::MAX));
    let c = claim(
        "default-persist",
        vec![req(
            "node.kubernetes.io/instance-type",
            &["Standard_D2s_v5"],
        )],
    );
    let err = s
        .plugin
        .create(&c, &class())
        .await
        .expect_err("ARM keeps failing");
    let Some(wit::Error::CreateError(ce)) = err.provider_error() else {
        panic!("not a create error: {err}")
    };
    assert!(ce.retryable, "a 503 may pass: {ce:?}");
    for part in [
        "create VM aks-default-persist",
        "giving up after 5 tries",
        "ServiceUnavailable (503)",
        "temporarily unavailable",
    ] {
        assert!(ce.message.contains(part), "{part:?} not in {}", ce.message);
    }
    let log = s.emulator.requests();
    assert_eq!(
        count(&log, "PUT", "/virtualMachines/aks-default-persist"),
        5,
        "{log:?}"
    );
    // The NIC made before the VM was deleted again; no VM exists.
    assert!(s.emulator.vms().is_empty(), "{:?}", s.emulator.vms());
    assert!(s.emulator.nics().is_empty(), "{:?}", s.emulator.nics());
    assert_eq!(
        count(&log, "DELETE", "/networkInterfaces/aks-default-persist"),
        1,
        "{log:?}"
    );
    // Once ARM recovers, the same NodeClaim launches.
    s.emulator.clear_faults();
    let i = s
        .plugin
        .create(&c, &class())
        .await
        .expect("create after recovery");
    assert_eq!(i.node_claim, "default-persist");
    assert_eq!(s.emulator.vms().len(), 1);
}

/// A NIC whose VM was never made (its launch failed, and so did the clean-up)
/// is listed as an instance of its own, and deleting that instance removes
/// the NIC: garbage collection leaves no network interface behind.
#[tokio::test]
async fn a_nic_left_without_its_vm_is_listed_and_collected() {
    let s = setup(Quota::default()).await;
    s.emulator
        .fault(fault(503, None, "PUT", "/virtualMachines/", u32::MAX));
    s.emulator
        .fault(fault(500, None, "DELETE", "/networkInterfaces/", u32::MAX));
    let c = claim(
        "default-orphan",
        vec![req(
            "node.kubernetes.io/instance-type",
            &["Standard_D2s_v5"],
        )],
    );
    s.plugin
        .create(&c, &class())
        .await
        .expect_err("the VM is never made");
    s.emulator.clear_faults();
    assert!(s.emulator.vms().is_empty());
    assert_eq!(s.emulator.nics(), ["mc_rg_aks_westus3/aks-default-orphan"]);

    let listed = s.plugin.list().await.expect("lists");
    let orphan = listed
        .iter()
        .find(|i| i.node_claim == "default-orphan")
        .unwrap_or_else(|| panic!("the orphan NIC is listed: {listed:?}"));
    assert!(
        orphan
            .provider_id
            .ends_with("/networkInterfaces/aks-default-orphan")
    );
    assert!(orphan.created_at.is_none());

    // What the host's garbage collection does with an instance no NodeClaim owns.
    let mut gone = claim("default-orphan", vec![]);
    gone.provider_id = Some(orphan.provider_id.clone());
    for _ in 0..10 {
        match s.plugin.delete(&gone).await {
            Ok(()) => continue,
            Err(e) if matches!(e.provider_error(), Some(wit::Error::NotFound(_))) => break,
            Err(e) => panic!("delete: {e}"),
        }
    }
    assert!(s.emulator.nics().is_empty(), "{:?}", s.emulator.nics());
    assert!(
        s.plugin
            .list()
            .await
            .expect("lists")
            .iter()
            .all(|i| i.node_claim != "default-orphan")
    );
}

fn class_in_group(group_id: &str) -> wit::NodeClass {
    wit::NodeClass {
        name: "azure".into(),
        generation: 1,
        json: serde_json::json!({
            "apiVersion": "karpenter.azure.com/v1beta1", "kind": "AKSNodeClass",
            "metadata": {"name": "azure"},
            "spec": {"imageFamily": "Ubuntu", "capacityReservation": {"groupID": group_id}}
        })
        .to_string(),
    }
}

fn condition<'a>(status: &'a wit::NodeClassStatus, type_: &str) -> &'a wit::Condition {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .unwrap_or_else(|| panic!("{type_} in {:?}", status.conditions))
}

/// The reserved offering of D4s_v5 in zone 1: (capacity left, available).
async fn reserved_d4(s: &Setup, class: &wit::NodeClass) -> Option<(Option<u32>, bool)> {
    let types = s
        .plugin
        .get_instance_types(&pool(), class)
        .await
        .expect("instance types")
        .into_listed();
    let d4 = types.iter().find(|t| t.name == "Standard_D4s_v5")?;
    d4.offerings
        .iter()
        .find(|o| o.capacity_type == "reserved" && o.zone == "westus3-1")
        .map(|o| (o.reservation_capacity, o.available))
}

#[tokio::test]
async fn a_capacity_reservation_group_is_offered_as_reserved_and_launched_into() {
    // The D family's quota is what the reservation holds: a reserved VM
    // draws on it, an on-demand D4 finds none left.
    let s = setup(Quota {
        family_cores: [("standardDSv5Family".to_string(), 8)].into(),
        ..Quota::default()
    })
    .await;
    let group_id = format!(
        "/subscriptions/{SUB}/resourceGroups/rg-capacity/providers/Microsoft.Compute/capacityReservationGroups/crg-d4"
    );
    s.emulator.set_group(
        azure_emulator::reservations::from_admin(
            &serde_json::json!({"subscription": SUB, "resourceGroup": "rg-capacity", "name": "crg-d4",
                "reservations": [{"name": "d4-zone1", "vmSize": "Standard_D4s_v5", "zone": "1", "capacity": 2}]}),
            "westus3",
        )
        .expect("group"),
    );
    let class = class_in_group(&group_id);

    let status = s
        .plugin
        .validate_node_class(&class)
        .await
        .expect("validates");
    let c = condition(&status, "CapacityReservationGroupReady");
    assert!(matches!(c.status, wit::ConditionStatus::True), "{c:?}");
    assert!(
        c.message
            .contains("d4-zone1 Standard_D4s_v5 in westus3-1: 2 of 2 left"),
        "{c:?}"
    );
    assert!(matches!(
        condition(&status, "Ready").status,
        wit::ConditionStatus::True
    ));
    assert!(
        status.resolved.contains("\"d4-zone1\""),
        "{}",
        status.resolved
    );

    assert_eq!(reserved_d4(&s, &class).await, Some((Some(2), true)));
    let reserved = || {
        vec![
            req("karpenter.sh/capacity-type", &["reserved"]),
            req(
                "karpenter.azure.com/capacity-reservation-group",
                &["crg-d4"],
            ),
        ]
    };
    for i in 0..2 {
        let instance = s
            .plugin
            .create(&claim(&format!("r-{i}"), reserved()), &class)
            .await
            .expect("launches into the reservation");
        assert_eq!(instance.instance_type, "Standard_D4s_v5");
        assert_eq!(instance.capacity_type, "reserved");
        assert!(
            instance.labels.iter().any(|(k, v)| k
                == "karpenter.azure.com/capacity-reservation-group"
                && v == "crg-d4"),
            "{:?}",
            instance.labels
        );
    }
    assert_eq!(
        reserved_d4(&s, &class).await,
        Some((Some(0), false)),
        "counted down by ARM's allocation"
    );
    let full = s
        .plugin
        .create(&claim("r-2", reserved()), &class)
        .await
        .expect_err("a full reservation launches nothing");
    let full = full.to_string();
    assert!(
        full.contains("Standard_D4s_v5") && full.contains("reserved"),
        "{full}"
    );

    // On demand, the D family's quota is the reservation's: E4 it is, with
    // no create refused.
    let on_demand = s
        .plugin
        .create(&claim("od-0", d4_then_e4()), &class)
        .await
        .expect("on demand");
    assert_eq!(on_demand.instance_type, "Standard_E4s_v5");
    assert_eq!(on_demand.capacity_type, "on-demand");
    let creates = count(&s.emulator.requests(), "PUT", "/virtualMachines/");
    assert_eq!(creates, 3, "no create refused");

    s.plugin
        .delete(&claim("r-0", reserved()))
        .await
        .expect("deletes");
    wait_until(|| async { reserved_d4(&s, &class).await == Some((Some(1), true)) }).await;

    // A group that does not exist keeps the NodeClass from Ready.
    let missing = class_in_group(&group_id.replace("crg-d4", "crg-none"));
    let status = s
        .plugin
        .validate_node_class(&missing)
        .await
        .expect("validates");
    let c = condition(&status, "CapacityReservationGroupReady");
    assert!(matches!(c.status, wit::ConditionStatus::False), "{c:?}");
    assert_eq!(c.reason, "GroupNotFound");
    assert!(matches!(
        condition(&status, "Ready").status,
        wit::ConditionStatus::False
    ));
}

async fn wait_until<F: std::future::Future<Output = bool>>(mut f: impl FnMut() -> F) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f().await {
        assert!(Instant::now() < deadline, "timed out");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// 100 launches of 4-vCPU on-demand VMs, every VM family's quota at 52
/// vCPUs (13 such VMs; the eight families with 4-vCPU sizes hold 104):
/// how many launched, and how many VM creates ARM refused on the way.
async fn a_hundred_launches_under_tight_quotas(more: &[(&str, &str)]) -> (usize, usize) {
    let families: BTreeMap<String, u64> = karpenter_plugin_azure::catalog::embedded_skus("westus3")
        .into_iter()
        .filter(|s| s.vcpu == 4)
        .map(|s| (s.arm_family, 52))
        .collect();
    let s = setup_with(
        Quota {
            family_cores: families,
            ..Quota::default()
        },
        more,
    )
    .await;
    let mut launched = 0;
    for i in 0..100 {
        let c = claim(
            &format!("tight-{i}"),
            vec![
                req("karpenter.azure.com/sku-cpu", &["4"]),
                req("karpenter.sh/capacity-type", &["on-demand"]),
            ],
        );
        if s.plugin.create(&c, &class()).await.is_ok() {
            launched += 1;
        }
    }
    let creates = count(&s.emulator.requests(), "PUT", "/virtualMachines/");
    (launched, creates - s.emulator.vms().len())
}

/// The figure: VM creates ARM refuses for quota per 100 launches, with the
/// plugin reading the quota first and without.
#[tokio::test]
async fn quota_read_first_means_no_refused_create_per_hundred_launches() {
    let (launched, refused) = a_hundred_launches_under_tight_quotas(&[]).await;
    let (launched_unchecked, refused_unchecked) =
        a_hundred_launches_under_tight_quotas(&[("QUOTA_CHECK", "false")]).await;
    eprintln!(
        "100 launches under 52-vCPU family quotas: quota checked: {launched} launched, {refused} creates refused; unchecked: {launched_unchecked} launched, {refused_unchecked} creates refused"
    );
    assert_eq!(refused, 0);
    assert_eq!(launched, 100);
    // Unchecked, each refused create is a launch that failed (the host
    // tries the NodeClaim again); the family is then kept out at once.
    assert_eq!(launched_unchecked + refused_unchecked, 100);
    assert!(refused_unchecked > 0);
}
