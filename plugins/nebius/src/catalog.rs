//! Instance types from PlatformService.List: one per platform preset, named
//! `<platform>-<preset>`, with labels, capacity, overhead and prices.
//!
//! Architecture Invariant: pure; the platforms, prices and unavailable
//! offerings come in as arguments.

use crate::proto::Platform;
use karpenter_plugin_sdk::prelude::*;
use std::collections::BTreeMap;

pub const LABEL_SKU_CPU: &str = "karpenter.azure.com/sku-cpu";
pub const LABEL_SKU_MEMORY: &str = "karpenter.azure.com/sku-memory";
pub const LABEL_SKU_GPU_COUNT: &str = "karpenter.azure.com/sku-gpu-count";
pub const LABEL_PLATFORM: &str = "flex.aks.azure.com/platform";
pub const EVICTION_HARD_MIB: u64 = 100;

/// One launchable shape.
#[derive(Debug, Clone, PartialEq)]
pub struct Shape {
    pub name: String,
    pub platform: String,
    pub preset: String,
    pub vcpu: u64,
    pub memory_gib: u64,
    pub gpus: u64,
    pub preemptible: bool,
}

pub fn shapes(platforms: &[Platform]) -> Vec<Shape> {
    let mut out = Vec::new();
    for p in platforms {
        let Some(meta) = &p.metadata else { continue };
        let preemptible = p
            .status
            .as_ref()
            .is_some_and(|s| s.allowed_for_preemptibles);
        for preset in p.spec.iter().flat_map(|s| &s.presets) {
            let Some(r) = &preset.resources else { continue };
            if r.vcpu_count <= 0 || r.memory_gibibytes <= 0 {
                continue;
            }
            out.push(Shape {
                name: format!("{}-{}", meta.name, preset.name),
                platform: meta.name.clone(),
                preset: preset.name.clone(),
                vcpu: r.vcpu_count as u64,
                memory_gib: r.memory_gibibytes as u64,
                gpus: r.gpu_count.max(0) as u64,
                preemptible,
            });
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// Hourly rates of a platform, in US dollars.
#[derive(Debug, Clone, Copy, PartialEq, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Rates {
    pub gpu: f64,
    pub vcpu: f64,
    pub memory_gib: f64,
    /// Preemptible price as a fraction of on-demand.
    #[serde(default = "default_spot_factor")]
    pub spot_factor: f64,
}

fn default_spot_factor() -> f64 {
    0.5
}

/// Built-in rates. The H200 figure is Nebius's public list price for
/// 1gpu-16vcpu-200gb ($3.50/h = $2.668 + 16 x $0.012 + 200 x $0.0032); the
/// others keep the same vCPU and memory rates with each GPU priced so the
/// 1-GPU preset matches the public per-GPU-hour figure. Override them with
/// the PRICES setting.
pub fn builtin_rates(platform: &str) -> Rates {
    let (gpu, vcpu, memory_gib) = match platform {
        "gpu-h200-sxm" => (2.668, 0.012, 0.0032),
        "gpu-h100-sxm" => (2.118, 0.012, 0.0032),
        // gpu-b200-sxm-a is the same B200 machine, offered in other regions.
        "gpu-b200-sxm" | "gpu-b200-sxm-a" => (4.543, 0.012, 0.0032),
        "gpu-l40s-a" | "gpu-l40s-d" => (1.352, 0.012, 0.0032),
        "cpu-e2" => (0.0, 0.0138, 0.0037),
        _ => (0.0, 0.012, 0.0032),
    };
    Rates {
        gpu,
        vcpu,
        memory_gib,
        spot_factor: default_spot_factor(),
    }
}

/// The PRICES setting: `{"<platform>": {"gpu":..,"vcpu":..,"memoryGib":..},
/// "<type>": <on-demand $/h>}`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Prices {
    pub platforms: BTreeMap<String, Rates>,
    pub types: BTreeMap<String, f64>,
}

impl Prices {
    pub fn parse(text: &str) -> Result<Prices, String> {
        let v: serde_json::Value =
            serde_json::from_str(text).map_err(|e| format!("PRICES is not JSON: {e}"))?;
        let obj = v.as_object().ok_or("PRICES must be a JSON object")?;
        let mut p = Prices::default();
        for (k, v) in obj {
            if let Some(n) = v.as_f64() {
                if !n.is_finite() || n < 0.0 {
                    return Err(format!("PRICES[{k}] = {n} is not a price"));
                }
                p.types.insert(k.clone(), n);
            } else {
                let r: Rates =
                    serde_json::from_value(v.clone()).map_err(|e| format!("PRICES[{k}]: {e}"))?;
                p.platforms.insert(k.clone(), r);
            }
        }
        Ok(p)
    }

    /// (on-demand, preemptible) $/h.
    pub fn of(&self, s: &Shape) -> (f64, f64) {
        let rates = self
            .platforms
            .get(&s.platform)
            .copied()
            .unwrap_or_else(|| builtin_rates(&s.platform));
        let on_demand = self.types.get(&s.name).copied().unwrap_or(
            s.gpus as f64 * rates.gpu
                + s.vcpu as f64 * rates.vcpu
                + s.memory_gib as f64 * rates.memory_gib,
        );
        let round = |x: f64| (x * 10_000.0).round() / 10_000.0;
        (round(on_demand), round(on_demand * rates.spot_factor))
    }
}

/// kube-reserved CPU in millicores: 6% of the first core, 1% of the second,
/// 0.5% of cores 3 and 4, 0.25% of every core above.
pub fn kube_reserved_cpu_millis(vcpu: u64) -> u64 {
    let mut m = 0.0;
    for core in 1..=vcpu {
        m += match core {
            1 => 60.0,
            2 => 10.0,
            3 | 4 => 5.0,
            _ => 2.5,
        };
    }
    m as u64
}

/// kube-reserved memory in MiB: 11 MiB per pod plus 255 MiB, at most a
/// quarter of the machine.
pub fn kube_reserved_memory_mib(memory_gib: u64, max_pods: u64) -> u64 {
    (11 * max_pods + 255).min(memory_gib * 1024 / 4)
}

pub struct Shaping<'a> {
    pub region: &'a str,
    pub max_pods: u64,
    pub os_disk_size_gb: u64,
    pub prices: &'a Prices,
}

pub fn capacity(s: &Shape, max_pods: u64, disk_gb: u64) -> Vec<(String, String)> {
    let mut c = resources(&[
        ("cpu", s.vcpu.to_string()),
        ("memory", gib(s.memory_gib)),
        ("pods", max_pods.to_string()),
        ("ephemeral-storage", format!("{disk_gb}G")),
    ]);
    if s.gpus > 0 {
        c.push(("nvidia.com/gpu".into(), s.gpus.to_string()));
    }
    c
}

pub fn overhead(s: &Shape, max_pods: u64) -> Overhead {
    Overhead {
        kube_reserved: resources(&[
            ("cpu", millis(kube_reserved_cpu_millis(s.vcpu))),
            (
                "memory",
                mib(kube_reserved_memory_mib(s.memory_gib, max_pods)),
            ),
        ]),
        system_reserved: Vec::new(),
        eviction_threshold: resources(&[("memory", mib(EVICTION_HARD_MIB))]),
    }
}

/// The labels a node of this shape carries (also its requirements, In one
/// value each). sku-cpu is absent on GPU shapes: the seed's CPU NodePool
/// selects on it to keep GPU machines out.
pub fn labels(s: &Shape, region: &str) -> Vec<(String, String)> {
    let mut l = vec![
        (labels::INSTANCE_TYPE.to_string(), s.name.clone()),
        (labels::ARCH.to_string(), "amd64".to_string()),
        (labels::OS.to_string(), "linux".to_string()),
        (labels::ZONE.to_string(), region.to_string()),
        (labels::REGION.to_string(), region.to_string()),
        (LABEL_PLATFORM.to_string(), s.platform.clone()),
        (
            LABEL_SKU_MEMORY.to_string(),
            (s.memory_gib * 1024).to_string(),
        ),
        (LABEL_SKU_GPU_COUNT.to_string(), s.gpus.to_string()),
    ];
    if s.gpus == 0 {
        l.push((LABEL_SKU_CPU.to_string(), s.vcpu.to_string()));
    }
    l
}

pub fn instance_type(
    s: &Shape,
    shaping: &Shaping,
    unavailable: &dyn Fn(&str, &str, &str) -> bool,
) -> InstanceType {
    let (on_demand, spot) = shaping.prices.of(s);
    let mut offerings = vec![Offering {
        zone: shaping.region.to_string(),
        capacity_type: labels::ON_DEMAND.into(),
        price: on_demand,
        available: !unavailable(&s.name, shaping.region, labels::ON_DEMAND),
        reservation_capacity: None,
        requirements: vec![],
    }];
    if s.preemptible {
        offerings.push(Offering {
            zone: shaping.region.to_string(),
            capacity_type: labels::SPOT.into(),
            price: spot,
            available: !unavailable(&s.name, shaping.region, labels::SPOT),
            reservation_capacity: None,
            requirements: vec![],
        });
    }
    let mut requirements: Vec<Requirement> = labels(s, shaping.region)
        .iter()
        .map(|(k, v)| req_in(k, &[v]))
        .collect();
    let capacity_types: Vec<&str> = offerings.iter().map(|o| o.capacity_type.as_str()).collect();
    requirements.push(req_in(labels::CAPACITY_TYPE, &capacity_types));
    InstanceType {
        name: s.name.clone(),
        requirements,
        offerings,
        capacity: capacity(s, shaping.max_pods, shaping.os_disk_size_gb),
        overhead: overhead(s, shaping.max_pods),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{PlatformSpec, PlatformStatus, Preset, PresetResources, ResourceMetadata};

    pub fn platform(name: &str, presets: &[(&str, i32, i32, i32)], spot: bool) -> Platform {
        Platform {
            metadata: Some(ResourceMetadata {
                name: name.into(),
                ..Default::default()
            }),
            spec: Some(PlatformSpec {
                presets: presets
                    .iter()
                    .map(|(n, c, m, g)| Preset {
                        name: n.to_string(),
                        resources: Some(PresetResources {
                            vcpu_count: *c,
                            memory_gibibytes: *m,
                            gpu_count: *g,
                        }),
                    })
                    .collect(),
                human_readable_name: String::new(),
            }),
            status: Some(PlatformStatus {
                allowed_for_preemptibles: spot,
            }),
        }
    }

    #[test]
    fn one_type_per_preset_with_labels_and_offerings() {
        let ps = [
            platform("cpu-d3", &[("16vcpu-64gb", 16, 64, 0)], false),
            platform(
                "gpu-h100-sxm",
                &[("8gpu-128vcpu-1600gb", 128, 1600, 8)],
                true,
            ),
        ];
        let prices = Prices::default();
        let shaping = Shaping {
            region: "eu-north1",
            max_pods: 110,
            os_disk_size_gb: 128,
            prices: &prices,
        };
        let types: Vec<InstanceType> = shapes(&ps)
            .iter()
            .map(|s| {
                instance_type(s, &shaping, &|t, _, ct| {
                    t.starts_with("gpu") && ct == "spot"
                })
            })
            .collect();
        let cpu = &types[0];
        assert_eq!(cpu.name, "cpu-d3-16vcpu-64gb");
        let has = |it: &InstanceType, k: &str| it.requirements.iter().any(|r| r.key == k);
        assert!(has(cpu, LABEL_SKU_CPU));
        assert_eq!(cpu.offerings.len(), 1, "no preemptibles on cpu-d3 here");
        assert!((cpu.offerings[0].price - (16.0 * 0.012 + 64.0 * 0.0032)).abs() < 1e-9);
        let gpu = &types[1];
        assert_eq!(gpu.name, "gpu-h100-sxm-8gpu-128vcpu-1600gb");
        assert!(!has(gpu, LABEL_SKU_CPU), "sku-cpu is absent on GPU types");
        assert!(
            gpu.capacity
                .contains(&("nvidia.com/gpu".into(), "8".into()))
        );
        assert_eq!(gpu.offerings.len(), 2);
        assert!(gpu.offerings[0].available && !gpu.offerings[1].available);
        let zone = gpu
            .requirements
            .iter()
            .find(|r| r.key == labels::ZONE)
            .expect("zone");
        assert_eq!(zone.values, ["eu-north1"]);
    }

    #[test]
    fn the_public_h200_price_and_overrides() {
        let s = Shape {
            name: "gpu-h200-sxm-1gpu-16vcpu-200gb".into(),
            platform: "gpu-h200-sxm".into(),
            preset: "1gpu-16vcpu-200gb".into(),
            vcpu: 16,
            memory_gib: 200,
            gpus: 1,
            preemptible: true,
        };
        assert_eq!(Prices::default().of(&s).0, 3.5);
        let p = Prices::parse(
            r#"{"gpu-h200-sxm": {"gpu": 2.0, "vcpu": 0, "memoryGib": 0, "spotFactor": 0.25},
                "cpu-d3-4vcpu-16gb": 0.1}"#,
        )
        .expect("parses");
        assert_eq!(p.of(&s), (2.0, 0.5));
        assert!(Prices::parse(r#"{"x": -1}"#).is_err());
    }

    #[test]
    fn overhead_numbers() {
        assert_eq!(kube_reserved_cpu_millis(1), 60);
        assert_eq!(kube_reserved_cpu_millis(16), 110);
        assert_eq!(kube_reserved_memory_mib(64, 110), 1465);
        assert_eq!(kube_reserved_memory_mib(2, 110), 512);
    }
}
