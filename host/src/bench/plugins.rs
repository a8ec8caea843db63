//! `karpenter bench plugins`: what the plugin runtime costs. Sizes; with
//! kwok.wasm in the directory, load from the precompiled cache, a trivial
//! call, get-instance-types of the kwok catalog, and many concurrent creates
//! that each wait on HTTP. Then, for every plugin of the directory,
//! get-instance-types with a default NodeClass and no settings (its embedded
//! catalog): cold, the first call on a fresh instance, and warm.

use anyhow::Context;
use cap_std::ambient_authority;
use cap_std::fs::Dir;
use karpenter_controller::records;
use karpenter_runtime::capabilities::cluster::ClusterView;
use karpenter_runtime::capabilities::secrets::SecretStore;
use karpenter_runtime::{PluginConfig, Runtime, RuntimeOptions, wit};
use serde::Serialize;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Debug, Serialize)]
pub struct Report {
    pub sizes: Vec<(String, u64)>,
    /// The runtime's own costs, measured with the kwok plugin; none without
    /// kwok.wasm.
    pub runtime: Option<RuntimeFigures>,
    pub get_instance_types_by_plugin: Vec<PluginFigures>,
}

#[derive(Debug, Serialize)]
pub struct RuntimeFigures {
    pub compile_ms: f64,
    /// Whether the calls below ran on Cranelift's code; a plugin not in the
    /// cache serves on Winch's until its calls make it hot.
    pub optimized: bool,
    pub load_precompiled_ms: f64,
    pub trivial_call_us: f64,
    pub instance_types: usize,
    /// Through kwok's most compact export (its tables, contract 0.1.4).
    pub get_instance_types_us: f64,
    /// Through get-instance-types' list of records.
    pub listed_instance_types_us: f64,
    /// get-instance-types and the conversion into the engine's catalog, as
    /// the controller asks it.
    pub into_engine_us: f64,
    pub concurrent_creates: usize,
    pub create_http_wait_s: f64,
    pub concurrent_creates_total_s: f64,
}

/// get-instance-types of one plugin with a default NodeClass.
#[derive(Debug, Serialize)]
pub struct PluginFigures {
    pub plugin: String,
    pub instance_types: usize,
    /// The first call after a load (a fresh instance), averaged over loads.
    pub cold_us: f64,
    pub warm_us: f64,
    /// Warm, through get-instance-types' list (plugins with a compact catalog).
    pub listed_us: Option<f64>,
    /// Why there are no figures (a plugin that refuses an empty NodeClass).
    pub not_measured: Option<String>,
}

pub struct Options<'a> {
    /// Directory of built plugins (`make plugins`).
    pub plugins_dir: &'a Path,
    pub creates: usize,
    pub http_wait: Duration,
}

pub async fn run(opts: Options<'_>) -> anyhow::Result<Report> {
    let mut sizes = Vec::new();
    let dir = Dir::open_ambient_dir(opts.plugins_dir, ambient_authority()).with_context(|| {
        format!(
            "opening {} (run `make plugins` first)",
            opts.plugins_dir.display()
        )
    })?;
    for entry in dir.entries()? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(stem) = name.strip_suffix(".wasm") {
            sizes.push((stem.to_string(), entry.metadata()?.len()));
        }
    }
    sizes.sort();
    anyhow::ensure!(
        !sizes.is_empty(),
        "no .wasm plugin in {} (run `make plugins` first)",
        opts.plugins_dir.display()
    );

    // A scratch area: the precompiled cache and the granted token.
    let scratch = std::env::temp_dir().join(format!("karpenter-bench-{}", std::process::id()));
    std::fs::create_dir_all(scratch.join("precompiled"))?;
    std::fs::create_dir_all(scratch.join("secrets/kube"))?;
    std::fs::write(scratch.join("secrets/kube/token"), "bench-token")?;
    let result = async {
        let runtime = match dir.read("kwok.wasm") {
            Ok(kwok) => Some(measure(&kwok, &scratch, &opts).await?),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e).context("kwok.wasm"),
        };
        let mut figures = Vec::new();
        for (name, _) in &sizes {
            let wasm = dir.read(format!("{name}.wasm"))?;
            figures.push(match per_plugin(name, &wasm, &scratch).await {
                Ok(figures) => figures,
                // A NodeClass with an empty spec is not every plugin's.
                Err(e) => PluginFigures {
                    plugin: name.clone(),
                    instance_types: 0,
                    cold_us: f64::NAN,
                    warm_us: f64::NAN,
                    listed_us: None,
                    not_measured: Some(format!("{e:#}")),
                },
            });
        }
        Ok(Report {
            sizes: sizes.clone(),
            runtime,
            get_instance_types_by_plugin: figures,
        })
    }
    .await;
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

async fn per_plugin(name: &str, wasm: &[u8], scratch: &Path) -> anyhow::Result<PluginFigures> {
    let runtime = Runtime::new(RuntimeOptions {
        precompiled: Some(Dir::open_ambient_dir(
            scratch.join("precompiled"),
            ambient_authority(),
        )?),
        cluster: Arc::new(ClusterView::new("bench", "https://127.0.0.1:6443", "")),
        ..RuntimeOptions::default()
    })?;
    let config = PluginConfig::default();
    let mut plugin = runtime.load(name, wasm, config.clone()).await?;
    let Some(kind) = plugin.metadata.node_classes.first().cloned() else {
        anyhow::bail!("plugin {name} serves no NodeClass kind");
    };
    let class_ref = wit::NodeClassRef {
        group: kind.group.clone(),
        kind: kind.kind.clone(),
        name: "default".into(),
    };
    let pool = records::bare_node_pool("default", class_ref);
    let class = wit::NodeClass {
        name: "default".into(),
        generation: 1,
        json: serde_json::json!({
            "apiVersion": format!("{}/{}", kind.group, kind.version),
            "kind": kind.kind,
            "metadata": {"name": "default"},
            "spec": {},
        })
        .to_string(),
    };
    let loads = 5;
    let mut cold = Duration::ZERO;
    let mut instance_types = 0;
    for i in 0..loads {
        if i > 0 {
            plugin = runtime.load(name, wasm, config.clone()).await?;
        }
        let t = Instant::now();
        instance_types = plugin.get_instance_types(&pool, &class).await?.len();
        cold += t.elapsed();
    }
    let rounds = 200;
    let t = Instant::now();
    for _ in 0..rounds {
        plugin.get_instance_types(&pool, &class).await?;
    }
    let warm_us = t.elapsed().as_secs_f64() * 1e6 / f64::from(rounds);
    // Without the compact catalog, where the plugin has one.
    let listed_us = if plugin.has_catalog() {
        let t = Instant::now();
        for _ in 0..rounds {
            let types = plugin.listed_instance_types(&pool, &class).await?;
            karpenter_runtime::validate::instance_types(types.iter())?;
        }
        Some(t.elapsed().as_secs_f64() * 1e6 / f64::from(rounds))
    } else {
        None
    };
    Ok(PluginFigures {
        plugin: name.to_string(),
        instance_types,
        cold_us: cold.as_secs_f64() * 1e6 / f64::from(loads),
        warm_us,
        listed_us,
        not_measured: None,
    })
}

async fn measure(
    kwok: &[u8],
    scratch: &Path,
    opts: &Options<'_>,
) -> anyhow::Result<RuntimeFigures> {
    let server = super::slow_server::start(opts.http_wait).await?;
    let endpoint = format!("http://{server}");
    let runtime = Runtime::new(RuntimeOptions {
        precompiled: Some(Dir::open_ambient_dir(
            scratch.join("precompiled"),
            ambient_authority(),
        )?),
        secrets: SecretStore::new(Dir::open_ambient_dir(
            scratch.join("secrets"),
            ambient_authority(),
        )?),
        cluster: Arc::new(ClusterView::new("bench", &endpoint, "")),
        ..RuntimeOptions::default()
    })?;
    let config = PluginConfig {
        allowed_hosts: vec![endpoint.clone()],
        secrets: vec!["kube/token".into()],
        ..PluginConfig::default()
    };

    // The first load compiles (Winch's quick compile) and fills the cache;
    // later ones deserialize.
    let t = Instant::now();
    let plugin = runtime.load("kwok", kwok, config.clone()).await?;
    let compile_ms = t.elapsed().as_secs_f64() * 1e3;
    let loads = 20;
    let t = Instant::now();
    for _ in 0..loads {
        runtime.load("kwok", kwok, config.clone()).await?;
    }
    let load_precompiled_ms = t.elapsed().as_secs_f64() * 1e3 / loads as f64;

    let calls = 20_000;
    plugin.repair_policies().await?;
    let t = Instant::now();
    for _ in 0..calls {
        plugin.repair_policies().await?;
    }
    let trivial_call_us = t.elapsed().as_secs_f64() * 1e6 / calls as f64;

    let pool = records::bare_node_pool(
        "default",
        wit::NodeClassRef {
            group: "karpenter.kwok.sh".into(),
            kind: "KWOKNodeClass".into(),
            name: "default".into(),
        },
    );
    let class = wit::NodeClass {
        name: "default".into(),
        generation: 1,
        json: "{}".into(),
    };
    let instance_types = plugin.get_instance_types(&pool, &class).await?.len();
    let rounds = 500;
    let t = Instant::now();
    for _ in 0..rounds {
        plugin.get_instance_types(&pool, &class).await?;
    }
    let get_instance_types_us = t.elapsed().as_secs_f64() * 1e6 / rounds as f64;
    // What the controller does with it: the engine's catalog.
    let t = Instant::now();
    for _ in 0..rounds {
        let types = plugin.get_instance_types(&pool, &class).await?;
        karpenter_controller::snapshot::instance_types::catalog(types)?;
    }
    let into_engine_us = t.elapsed().as_secs_f64() * 1e6 / rounds as f64;
    // The same catalog through get-instance-types' list, checked the same way.
    let t = Instant::now();
    for _ in 0..rounds {
        let types = plugin.listed_instance_types(&pool, &class).await?;
        karpenter_runtime::validate::instance_types(types.iter())?;
    }
    let listed_instance_types_us = t.elapsed().as_secs_f64() * 1e6 / rounds as f64;

    let plugin = Arc::new(plugin);
    let t = Instant::now();
    let tasks: Vec<_> = (0..opts.creates)
        .map(|i| {
            let plugin = plugin.clone();
            let claim = claim(&format!("bench-{i}"), &pool.node_class_ref);
            let class = class.clone();
            tokio::spawn(async move { plugin.create(&claim, &class).await })
        })
        .collect();
    for task in tasks {
        task.await??;
    }
    let concurrent_creates_total_s = t.elapsed().as_secs_f64();

    Ok(RuntimeFigures {
        compile_ms,
        optimized: plugin.optimized(),
        load_precompiled_ms,
        trivial_call_us,
        instance_types,
        get_instance_types_us,
        listed_instance_types_us,
        into_engine_us,
        concurrent_creates: opts.creates,
        create_http_wait_s: opts.http_wait.as_secs_f64(),
        concurrent_creates_total_s,
    })
}

fn claim(name: &str, class: &wit::NodeClassRef) -> wit::NodeClaim {
    let req = records::requirement_in;
    wit::NodeClaim {
        name: name.into(),
        node_pool: "default".into(),
        labels: vec![],
        annotations: vec![],
        taints: vec![],
        startup_taints: vec![],
        requirements: vec![
            req("kubernetes.io/arch", &["amd64"]),
            req("kubernetes.io/os", &["linux"]),
            req("karpenter.sh/capacity-type", &["on-demand"]),
        ],
        resource_requests: vec![("cpu".into(), "1".into())],
        node_class_ref: class.clone(),
        provider_id: None,
        image_id: None,
        kubelet_version: None,
    }
}
