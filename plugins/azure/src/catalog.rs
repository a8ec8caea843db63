//! The VM size catalog: the embedded SKU and price tables, what the Resource
//! SKUs and Retail Prices APIs say when they are reachable, and the instance
//! types built from them.
//!
//! Architecture Invariant: pure. Nothing here calls a host import, so all of
//! it is tested natively; `refresh` does the fetching and hands text in.

use crate::overhead;
use karpenter_plugin_sdk::prelude::*;

pub const SKUS_CSV: &str = include_str!("data/skus.csv");
pub const PRICES_CSV: &str = include_str!("data/prices.csv");

pub const LABEL_SKU_NAME: &str = "karpenter.azure.com/sku-name";
pub const LABEL_SKU_FAMILY: &str = "karpenter.azure.com/sku-family";
pub const LABEL_SKU_SERIES: &str = "karpenter.azure.com/sku-series";
pub const LABEL_SKU_VERSION: &str = "karpenter.azure.com/sku-version";
pub const LABEL_SKU_CPU: &str = "karpenter.azure.com/sku-cpu";
pub const LABEL_SKU_MEMORY: &str = "karpenter.azure.com/sku-memory";
pub const LABEL_SKU_ACCELERATED: &str = "karpenter.azure.com/sku-networking-accelerated";
pub const LABEL_SKU_PREMIUM: &str = "karpenter.azure.com/sku-storage-premium-capable";
pub const LABEL_SKU_EPHEMERAL: &str = "karpenter.azure.com/sku-storage-ephemeralos-maxsize";
pub const LABEL_SKU_GPU_NAME: &str = "karpenter.azure.com/sku-gpu-name";
pub const LABEL_SKU_GPU_MANUFACTURER: &str = "karpenter.azure.com/sku-gpu-manufacturer";
pub const LABEL_SKU_GPU_COUNT: &str = "karpenter.azure.com/sku-gpu-count";
pub const LABEL_PLACEMENT_SCOPE: &str = "karpenter.azure.com/placement-scope";

pub const ZONAL: &str = "zonal";
pub const REGIONAL: &str = "regional";
/// The zone label of nodes placed without an availability zone.
pub const REGIONAL_ZONE: &str = "0";

/// Spot is billed at a discount that floats per size and region; without a
/// live figure we assume a quarter of on-demand (Azure spot discounts are
/// typically 60-90%), and a third for GPU sizes, whose discounts are smaller.
pub const SPOT_FACTOR: f64 = 0.25;
pub const GPU_SPOT_FACTOR: f64 = 0.33;
/// What a size without a known price costs, so it is chosen last.
pub const UNKNOWN_PRICE: f64 = 1_000.0;

/// One VM size, as far as scheduling and launching need it.
#[derive(Debug, Clone, PartialEq)]
pub struct Sku {
    pub name: String,
    /// The quota family in ARM ("standardDSv5Family").
    pub arm_family: String,
    /// The letter(s) before the size: D, E, F, B, L, N.
    pub family: String,
    /// The name without the size: "Ds_v5".
    pub series: String,
    pub version: String,
    pub vcpu: u64,
    pub memory_gib: f64,
    pub gpu_count: u64,
    pub gpu_name: String,
    pub gpu_manufacturer: String,
    pub accelerated_networking: bool,
    pub premium_io: bool,
    pub ephemeral_os_max_gb: u64,
    /// Availability zone numbers ("1", "2", "3"); empty: regional only.
    pub zones: Vec<String>,
    pub low_priority: bool,
}

impl Sku {
    /// Nominal memory in MiB: floor(GiB) * 1024.
    pub fn memory_mib(&self) -> u64 {
        (self.memory_gib.floor() as u64) * 1024
    }

    pub fn is_gpu(&self) -> bool {
        self.gpu_count > 0
    }
}

/// Parses the embedded SKU table (see data/skus.csv for the columns).
pub fn parse_skus(text: &str) -> Vec<Sku> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let f: Vec<&str> = line.split(',').collect();
        if f.len() < 15 {
            continue;
        }
        let num = |s: &str| s.parse::<u64>().unwrap_or(0);
        out.push(Sku {
            name: f[0].into(),
            arm_family: f[1].into(),
            family: f[2].into(),
            series: f[3].into(),
            version: f[4].into(),
            vcpu: num(f[5]),
            memory_gib: f[6].parse().unwrap_or(0.0),
            gpu_count: num(f[7]),
            gpu_name: f[8].into(),
            gpu_manufacturer: f[9].into(),
            accelerated_networking: f[10] == "1",
            premium_io: f[11] == "1",
            ephemeral_os_max_gb: num(f[12]),
            zones: f[13].chars().map(|c| c.to_string()).collect(),
            low_priority: f[14] == "1",
        });
    }
    out
}

/// The inverse of `parse_skus`, to keep a refreshed catalog in the host cache.
pub fn render_skus(skus: &[Sku]) -> String {
    let mut s = String::with_capacity(skus.len() * 80);
    for k in skus {
        let b = |v: bool| if v { "1" } else { "0" };
        s.push_str(&format!(
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n",
            k.name,
            k.arm_family,
            k.family,
            k.series,
            k.version,
            k.vcpu,
            k.memory_gib,
            k.gpu_count,
            k.gpu_name,
            k.gpu_manufacturer,
            b(k.accelerated_networking),
            b(k.premium_io),
            k.ephemeral_os_max_gb,
            k.zones.concat(),
            b(k.low_priority)
        ));
    }
    s
}

/// On-demand and (when known) spot prices of one region, by SKU name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Prices {
    pub on_demand: Vec<(String, f64)>,
    pub spot: Vec<(String, f64)>,
}

impl Prices {
    /// From the embedded table: one column per region.
    pub fn embedded(region: &str) -> Prices {
        let mut column = None;
        let mut on_demand = Vec::new();
        for line in PRICES_CSV.lines() {
            if let Some(header) = line.strip_prefix("#name,") {
                column = header.split(',').position(|r| r == region);
                continue;
            }
            if line.starts_with('#') || line.trim().is_empty() {
                continue;
            }
            let Some(col) = column else { break };
            let mut f = line.split(',');
            let Some(name) = f.next() else { continue };
            if let Some(Ok(p)) = f.nth(col).map(str::parse::<f64>) {
                on_demand.push((name.to_string(), p));
            }
        }
        on_demand.sort_by(|a, b| a.0.cmp(&b.0));
        Prices {
            on_demand,
            spot: Vec::new(),
        }
    }

    pub fn on_demand(&self, sku: &str) -> Option<f64> {
        find(&self.on_demand, sku)
    }

    /// The spot price: the live figure, else the estimate from on-demand.
    pub fn spot(&self, sku: &Sku) -> Option<f64> {
        find(&self.spot, &sku.name).or_else(|| {
            let factor = if sku.is_gpu() {
                GPU_SPOT_FACTOR
            } else {
                SPOT_FACTOR
            };
            self.on_demand(&sku.name).map(|p| round4(p * factor))
        })
    }

    /// `name,on-demand,spot` lines, for the host cache.
    pub fn render(&self) -> String {
        let mut s = String::new();
        for (name, p) in &self.on_demand {
            s.push_str(&format!(
                "{name},{p},{}\n",
                find(&self.spot, name)
                    .map(|x| x.to_string())
                    .unwrap_or_default()
            ));
        }
        s
    }

    pub fn parse(text: &str) -> Prices {
        let mut p = Prices::default();
        for line in text.lines() {
            let mut f = line.split(',');
            let (Some(name), Some(od)) = (f.next(), f.next()) else {
                continue;
            };
            if let Ok(od) = od.parse() {
                p.on_demand.push((name.to_string(), od));
            }
            if let Some(Ok(spot)) = f.next().map(str::parse::<f64>) {
                p.spot.push((name.to_string(), spot));
            }
        }
        p.on_demand.sort_by(|a, b| a.0.cmp(&b.0));
        p.spot.sort_by(|a, b| a.0.cmp(&b.0));
        p
    }
}

fn find(list: &[(String, f64)], name: &str) -> Option<f64> {
    list.binary_search_by(|(n, _)| n.as_str().cmp(name))
        .ok()
        .map(|i| list[i].1)
}

fn round4(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

/// What of the NodeClass and settings shapes the instance types.
#[derive(Debug, Clone, PartialEq)]
pub struct Shaping {
    pub region: String,
    pub max_pods: u64,
    pub os_disk_size_gb: u64,
    /// VM_MEMORY_OVERHEAD_PERCENT, as a fraction (0.075).
    pub vm_memory_overhead: f64,
}

/// Offerings currently marked unavailable live in the host's shared cache
/// under this key, so every instance of the plugin sees them.
pub fn unavailable_key(instance_type: &str, zone: &str, capacity_type: &str) -> String {
    format!("unavailable/{instance_type}/{zone}/{capacity_type}")
}

/// The zone label of an availability zone number: `<region>-<n>`.
pub fn zone_label(region: &str, zone: &str) -> String {
    format!("{region}-{zone}")
}

/// Every zone label the size can be placed in, regional ("0") last.
pub fn zone_labels(region: &str, sku: &Sku) -> Vec<String> {
    let mut z: Vec<String> = sku.zones.iter().map(|n| zone_label(region, n)).collect();
    z.push(REGIONAL_ZONE.to_string());
    z
}

/// Memory capacity: floor(GiB) in MiB, less the VM memory overhead margin.
pub fn memory_capacity_mib(sku: &Sku, overhead_fraction: f64) -> u64 {
    let total = sku.memory_mib();
    // Integer permille keeps 7.5% exact: 16384 MiB -> 15155 MiB.
    let permille = (overhead_fraction * 1000.0).round().clamp(0.0, 1000.0) as u64;
    total * (1000 - permille) / 1000
}

/// Sizes the plugin offers at all: at least 2 vCPUs and 3.5 GiB.
pub fn supported(sku: &Sku) -> bool {
    sku.vcpu >= 2 && sku.memory_gib >= 3.5
}

/// The instance type for one size: labels, offerings per zone and capacity
/// type (spot only when low-priority capable), capacity and overhead.
pub fn instance_type(
    sku: &Sku,
    shaping: &Shaping,
    prices: &Prices,
    unavailable: &dyn Fn(&str) -> bool,
) -> InstanceType {
    let zones = zone_labels(&shaping.region, sku);
    let on_demand = prices.on_demand(&sku.name);
    let od_price = on_demand.unwrap_or(UNKNOWN_PRICE);
    let spot_price = prices.spot(sku).unwrap_or(UNKNOWN_PRICE);
    let mut capacity_types = vec![labels::ON_DEMAND];
    if sku.low_priority {
        capacity_types.push(labels::SPOT);
    }
    let mut offerings = Vec::with_capacity(zones.len() * capacity_types.len());
    for zone in &zones {
        let scope = if zone == REGIONAL_ZONE {
            REGIONAL
        } else {
            ZONAL
        };
        for ct in &capacity_types {
            let price = if *ct == labels::SPOT {
                spot_price
            } else {
                od_price
            };
            offerings.push(Offering {
                zone: zone.clone(),
                capacity_type: ct.to_string(),
                price,
                available: !unavailable(&unavailable_key(&sku.name, zone, ct)),
                reservation_capacity: None,
                requirements: vec![req_in(LABEL_PLACEMENT_SCOPE, &[scope])],
            });
        }
    }
    let scopes: Vec<&str> = if sku.zones.is_empty() {
        vec![REGIONAL]
    } else {
        vec![ZONAL, REGIONAL]
    };
    let b = |v: bool| if v { "true" } else { "false" };
    let mut requirements = vec![
        req_in(labels::INSTANCE_TYPE, &[&sku.name]),
        req_in(labels::ARCH, &["amd64"]),
        req_in(labels::OS, &["linux"]),
        req_in(labels::ZONE, &zones),
        req_in(labels::CAPACITY_TYPE, &capacity_types),
        req_in(LABEL_PLACEMENT_SCOPE, &scopes),
        req_in(LABEL_SKU_NAME, &[&sku.name]),
        req_in(LABEL_SKU_FAMILY, &[&sku.family]),
        req_in(LABEL_SKU_SERIES, &[&sku.series]),
        req_in(LABEL_SKU_VERSION, &[&sku.version]),
        req_in(LABEL_SKU_CPU, &[sku.vcpu.to_string()]),
        req_in(LABEL_SKU_MEMORY, &[sku.memory_mib().to_string()]),
        req_in(LABEL_SKU_ACCELERATED, &[b(sku.accelerated_networking)]),
        req_in(LABEL_SKU_PREMIUM, &[b(sku.premium_io)]),
        req_in(LABEL_SKU_EPHEMERAL, &[sku.ephemeral_os_max_gb.to_string()]),
    ];
    if sku.is_gpu() {
        requirements.push(req_in(LABEL_SKU_GPU_NAME, &[&sku.gpu_name]));
        requirements.push(req_in(LABEL_SKU_GPU_MANUFACTURER, &[&sku.gpu_manufacturer]));
        requirements.push(req_in(LABEL_SKU_GPU_COUNT, &[sku.gpu_count.to_string()]));
    }
    InstanceType {
        name: sku.name.clone(),
        requirements,
        offerings,
        capacity: capacity(sku, shaping),
        overhead: overhead::overhead(sku, shaping.max_pods),
    }
}

/// cpu, memory, ephemeral-storage, pods and GPUs of a node of this size.
pub fn capacity(sku: &Sku, shaping: &Shaping) -> Vec<(String, String)> {
    let mut c = resources(&[
        ("cpu", sku.vcpu.to_string()),
        (
            "memory",
            mib(memory_capacity_mib(sku, shaping.vm_memory_overhead)),
        ),
        // osDiskSizeGB * 10^9 bytes.
        ("ephemeral-storage", format!("{}G", shaping.os_disk_size_gb)),
        ("pods", shaping.max_pods.to_string()),
    ]);
    if sku.is_gpu() && sku.gpu_manufacturer.eq_ignore_ascii_case("nvidia") {
        c.push(("nvidia.com/gpu".into(), sku.gpu_count.to_string()));
    }
    c
}

/// The SKUs of the embedded table offered in `region` (those with a price
/// there), or all of them for a region the table does not know.
pub fn embedded_skus(region: &str) -> Vec<Sku> {
    let prices = Prices::embedded(region);
    let all = parse_skus(SKUS_CSV);
    if prices.on_demand.is_empty() {
        return all;
    }
    all.into_iter()
        .filter(|s| prices.on_demand(&s.name).is_some())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shaping(max_pods: u64) -> Shaping {
        Shaping {
            region: "westus3".into(),
            max_pods,
            os_disk_size_gb: 128,
            vm_memory_overhead: 0.075,
        }
    }

    fn sku(name: &str) -> Sku {
        parse_skus(SKUS_CSV)
            .into_iter()
            .find(|s| s.name == name)
            .expect("in catalog")
    }

    fn label<'a>(it: &'a InstanceType, key: &str) -> Vec<&'a str> {
        it.requirements
            .iter()
            .find(|r| r.key == key)
            .map(|r| r.values.iter().map(String::as_str).collect())
            .unwrap_or_default()
    }

    #[test]
    fn embedded_catalog_covers_the_families_and_regions() {
        let all = parse_skus(SKUS_CSV);
        assert_eq!(all.len(), 71);
        for series in [
            "Ds_v5",
            "Dds_v5",
            "Das_v5",
            "Es_v5",
            "Fs_v2",
            "Bs",
            "Ls_v3",
            "NCads_A100_v4",
            "NCas_T4_v3",
            "NDisr_H100_v5",
        ] {
            assert!(all.iter().any(|s| s.series == series), "{series}");
        }
        assert!(all.iter().all(supported));
        for region in ["southcentralus", "eastus2", "westus3"] {
            let p = Prices::embedded(region);
            assert!(
                p.on_demand("Standard_D4s_v5")
                    .is_some_and(|x| x > 0.1 && x < 0.3),
                "{region}"
            );
        }
        // Not offered in westus3 in the table: the H100 size.
        assert!(
            !embedded_skus("westus3")
                .iter()
                .any(|s| s.name == "Standard_ND96isr_H100_v5")
        );
        assert!(
            embedded_skus("eastus2")
                .iter()
                .any(|s| s.name == "Standard_ND96isr_H100_v5")
        );
    }

    #[test]
    fn render_and_parse_round_trip() {
        let all = parse_skus(SKUS_CSV);
        assert_eq!(parse_skus(&render_skus(&all)), all);
        let p = Prices {
            on_demand: vec![("A".into(), 1.5)],
            spot: vec![("A".into(), 0.3)],
        };
        assert_eq!(Prices::parse(&p.render()), p);
    }

    #[test]
    fn gpu_sku_labels_and_capacity() {
        let s = sku("Standard_NC24ads_A100_v4");
        let it = instance_type(&s, &shaping(30), &Prices::embedded("westus3"), &|_| false);
        assert_eq!(label(&it, LABEL_SKU_NAME), ["Standard_NC24ads_A100_v4"]);
        assert_eq!(label(&it, LABEL_SKU_FAMILY), ["N"]);
        assert_eq!(label(&it, LABEL_SKU_SERIES), ["NCads_A100_v4"]);
        assert_eq!(label(&it, LABEL_SKU_VERSION), ["4"]);
        assert_eq!(label(&it, LABEL_SKU_CPU), ["24"]);
        assert_eq!(label(&it, LABEL_SKU_MEMORY), ["225280"]); // 220 * 1024
        assert_eq!(label(&it, LABEL_SKU_GPU_NAME), ["A100"]);
        assert_eq!(label(&it, LABEL_SKU_GPU_MANUFACTURER), ["nvidia"]);
        assert_eq!(label(&it, LABEL_SKU_GPU_COUNT), ["1"]);
        assert_eq!(label(&it, LABEL_SKU_ACCELERATED), ["true"]);
        assert_eq!(label(&it, LABEL_SKU_PREMIUM), ["true"]);
        assert_eq!(label(&it, LABEL_SKU_EPHEMERAL), ["64"]);
        assert_eq!(label(&it, LABEL_PLACEMENT_SCOPE), ["zonal", "regional"]);
        for wk in labels::INSTANCE_TYPE_MUST_DEFINE {
            assert!(!label(&it, wk).is_empty(), "{wk}");
        }
        let cap = |k: &str| lookup(&it.capacity, k).map(str::to_string);
        assert_eq!(cap("nvidia.com/gpu").as_deref(), Some("1"));
        assert_eq!(cap("cpu").as_deref(), Some("24"));
        // 225280 MiB * 0.925 = 208384 MiB.
        assert_eq!(cap("memory").as_deref(), Some("208384Mi"));
        assert_eq!(cap("ephemeral-storage").as_deref(), Some("128G"));
        assert_eq!(cap("pods").as_deref(), Some("30"));
        // A CPU size has no GPU labels.
        let d = instance_type(
            &sku("Standard_D4s_v5"),
            &shaping(30),
            &Prices::embedded("westus3"),
            &|_| false,
        );
        assert!(label(&d, LABEL_SKU_GPU_NAME).is_empty());
        assert_eq!(lookup(&d.capacity, "memory"), Some("15155Mi")); // 16384 * 0.925 = 15155.2
    }

    /// MiB or millicores of a quantity the plugin writes ("650Mi", "140m", "4").
    fn amount(q: &str) -> u64 {
        if let Some(n) = q.strip_suffix("Mi") {
            n.parse().expect("MiB")
        } else if let Some(n) = q.strip_suffix('m') {
            n.parse().expect("millicores")
        } else {
            q.parse::<u64>().expect("whole") * 1000
        }
    }

    /// The figures a user can check by hand, per the seed: kube-reserved
    /// memory = min(20 * maxPods + 50, totalMemoryMiB / 4) MiB plus a 100 MiB
    /// hard eviction threshold; memory capacity = floor(GiB) * 1024 less 7.5%;
    /// kube-reserved CPU = 60m + 40m + 20m + 20m + 10m per core above four.
    #[test]
    fn overhead_and_allocatable_follow_max_pods() {
        // (size, maxPods, kube-reserved cpu m, kube-reserved memory Mi,
        //  capacity memory Mi, allocatable cpu m, allocatable memory Mi)
        let cases: &[(&str, u64, u64, u64, u64, u64, u64)] = &[
            // 16384 MiB: a quarter is 4096; 15155 = 16384 * 0.925.
            ("Standard_D4s_v5", 30, 140, 650, 15155, 3860, 14405),
            ("Standard_D4s_v5", 110, 140, 2250, 15155, 3860, 12805),
            ("Standard_D4s_v5", 250, 140, 4096, 15155, 3860, 10959),
            // 65536 MiB: a quarter is 16384; 60620 = 65536 * 0.925.
            ("Standard_D16s_v5", 30, 260, 650, 60620, 15740, 59870),
            ("Standard_D16s_v5", 110, 260, 2250, 60620, 15740, 58270),
            ("Standard_D16s_v5", 250, 260, 5050, 60620, 15740, 55470),
            // 225280 MiB: a quarter is 56320; 208384 = 225280 * 0.925.
            (
                "Standard_NC24ads_A100_v4",
                30,
                340,
                650,
                208384,
                23660,
                207634,
            ),
            (
                "Standard_NC24ads_A100_v4",
                110,
                340,
                2250,
                208384,
                23660,
                206034,
            ),
            (
                "Standard_NC24ads_A100_v4",
                250,
                340,
                5050,
                208384,
                23660,
                203234,
            ),
        ];
        for &(name, max_pods, cpu_res, mem_res, mem_cap, cpu_alloc, mem_alloc) in cases {
            let it = instance_type(
                &sku(name),
                &shaping(max_pods),
                &Prices::embedded("westus3"),
                &|_| false,
            );
            let what = format!("{name} at maxPods {max_pods}");
            let cap = |k: &str| amount(lookup(&it.capacity, k).expect(k));
            let reserved = |k: &str| amount(lookup(&it.overhead.kube_reserved, k).expect(k));
            let evict = amount(lookup(&it.overhead.eviction_threshold, "memory").expect("evict"));
            assert_eq!(
                lookup(&it.capacity, "pods"),
                Some(max_pods.to_string().as_str()),
                "{what}"
            );
            assert_eq!(reserved("cpu"), cpu_res, "{what}");
            assert_eq!(reserved("memory"), mem_res, "{what}");
            assert_eq!(evict, 100, "{what}");
            assert!(it.overhead.system_reserved.is_empty(), "{what}");
            assert_eq!(cap("memory"), mem_cap, "{what}");
            assert_eq!(cap("cpu") - reserved("cpu"), cpu_alloc, "{what}");
            assert_eq!(
                cap("memory") - reserved("memory") - evict,
                mem_alloc,
                "{what}"
            );
        }
    }

    #[test]
    fn spot_and_regional_offerings() {
        let prices = Prices::embedded("southcentralus");
        let scus = Shaping {
            region: "southcentralus".into(),
            ..shaping(110)
        };
        let it = instance_type(&sku("Standard_D4s_v5"), &scus, &prices, &|k| {
            k == "unavailable/Standard_D4s_v5/southcentralus-2/spot"
        });
        // 3 zones + regional, each on-demand and spot.
        assert_eq!(it.offerings.len(), 8);
        let find = |z: &str, ct: &str| {
            it.offerings
                .iter()
                .find(|o| o.zone == z && o.capacity_type == ct)
                .expect("offering")
        };
        let od = find("southcentralus-1", "on-demand");
        let spot = find("southcentralus-1", "spot");
        assert!((od.price - 0.204).abs() < 1e-9, "{}", od.price); // 0.192 * 1.0625
        assert!((spot.price - 0.051).abs() < 1e-9, "{}", spot.price); // a quarter of it
        assert!(!find("southcentralus-2", "spot").available);
        assert!(find("southcentralus-2", "on-demand").available);
        let regional = find("0", "on-demand");
        assert_eq!(regional.requirements[0].key, LABEL_PLACEMENT_SCOPE);
        assert_eq!(regional.requirements[0].values, ["regional"]);
        assert_eq!(od.requirements[0].values, ["zonal"]);
        assert_eq!(
            label(&it, labels::ZONE),
            [
                "southcentralus-1",
                "southcentralus-2",
                "southcentralus-3",
                "0"
            ]
        );

        // B sizes are not low-priority capable: on-demand only.
        let b = instance_type(&sku("Standard_B2s"), &shaping(110), &prices, &|_| false);
        assert!(b.offerings.iter().all(|o| o.capacity_type == "on-demand"));
        assert_eq!(label(&b, labels::CAPACITY_TYPE), ["on-demand"]);
        // A regional-only size has only zone "0".
        let h = instance_type(
            &sku("Standard_ND96isr_H100_v5"),
            &shaping(110),
            &Prices::embedded("eastus2"),
            &|_| false,
        );
        assert_eq!(label(&h, labels::ZONE), ["0"]);
        assert_eq!(label(&h, LABEL_PLACEMENT_SCOPE), ["regional"]);
        // Unknown price: very expensive, never NaN.
        let unknown = instance_type(
            &sku("Standard_D4s_v5"),
            &shaping(110),
            &Prices::default(),
            &|_| false,
        );
        assert!(unknown.offerings.iter().all(|o| o.price == UNKNOWN_PRICE));
    }
}
