//! The synthetic catalog, shaped like Karpenter's kwok provider: 12 CPU sizes x
//! 3 memory factors x 2 OSes x 2 architectures = 144 types in 4 zones, spot at
//! 0.7 x on-demand.

use karpenter_plugin_sdk::prelude::*;

pub const ZONES: [&str; 4] = ["test-zone-a", "test-zone-b", "test-zone-c", "test-zone-d"];
const CPUS: [u64; 12] = [1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256];
/// (family, GiB of memory per vCPU)
const FAMILIES: [(&str, u64); 3] = [("c", 2), ("s", 4), ("m", 8)];
const OSES: [&str; 2] = ["linux", "windows"];
const ARCHES: [&str; 2] = ["amd64", "arm64"];
pub const SPOT_DISCOUNT: f64 = 0.7;

pub const LABEL_FAMILY: &str = "karpenter.kwok.sh/instance-family";
pub const LABEL_CPU: &str = "karpenter.kwok.sh/instance-cpu";
pub const LABEL_MEMORY: &str = "karpenter.kwok.sh/instance-memory";
pub const LABEL_SIZE: &str = "karpenter.kwok.sh/instance-size";

/// One shape of the catalog.
#[derive(Debug, Clone, PartialEq)]
pub struct Shape {
    pub name: String,
    pub family: &'static str,
    pub cpu: u64,
    pub memory_gib: u64,
    pub os: &'static str,
    pub arch: &'static str,
}

impl Shape {
    /// On-demand $/h: a vCPU-hour and a GiB-hour priced like general-purpose
    /// cloud VMs; Windows carries a licence surcharge per vCPU.
    pub fn on_demand_price(&self) -> f64 {
        let licence = if self.os == "windows" { 0.046 } else { 0.0 };
        self.cpu as f64 * (0.0235 + licence) + self.memory_gib as f64 * 0.0031
    }

    pub fn max_pods(&self) -> u64 {
        (self.cpu * 8).clamp(16, 110)
    }
}

pub fn shapes() -> Vec<Shape> {
    let mut out = Vec::with_capacity(144);
    for cpu in CPUS {
        for (family, factor) in FAMILIES {
            for os in OSES {
                for arch in ARCHES {
                    out.push(Shape {
                        name: format!("{family}-{cpu}x-{arch}-{os}"),
                        family,
                        cpu,
                        memory_gib: cpu * factor,
                        os,
                        arch,
                    });
                }
            }
        }
    }
    out
}

#[cfg(test)]
pub fn find(name: &str) -> Option<Shape> {
    shapes().into_iter().find(|s| s.name == name)
}

/// Offerings currently marked unavailable live in the host's shared cache
/// under this key, so every instance of the plugin sees them.
pub fn unavailable_key(instance_type: &str, zone: &str, capacity_type: &str) -> String {
    format!("unavailable/{instance_type}/{zone}/{capacity_type}")
}

pub fn instance_type(shape: &Shape) -> InstanceType {
    let od = shape.on_demand_price();
    let mut offerings = Vec::with_capacity(ZONES.len() * 2);
    for zone in ZONES {
        for (capacity_type, price) in [(labels::SPOT, od * SPOT_DISCOUNT), (labels::ON_DEMAND, od)]
        {
            offerings.push(Offering {
                zone: zone.to_string(),
                capacity_type: capacity_type.to_string(),
                price: (price * 10_000.0).round() / 10_000.0,
                available: true,
                reservation_capacity: None,
                requirements: Vec::new(),
            });
        }
    }
    let cpu = shape.cpu.to_string();
    let memory = (shape.memory_gib * 1024).to_string();
    InstanceType {
        name: shape.name.clone(),
        requirements: vec![
            req_in(labels::INSTANCE_TYPE, &[&shape.name]),
            req_in(labels::ARCH, &[shape.arch]),
            req_in(labels::OS, &[shape.os]),
            req_in(labels::ZONE, &ZONES),
            req_in(labels::CAPACITY_TYPE, &[labels::SPOT, labels::ON_DEMAND]),
            req_in(LABEL_FAMILY, &[shape.family]),
            req_in(LABEL_CPU, &[&cpu]),
            req_in(LABEL_MEMORY, &[&memory]),
            req_in(LABEL_SIZE, &[format!("{}x", shape.cpu)]),
        ],
        offerings,
        capacity: resources(&[
            ("cpu", cpu.clone()),
            ("memory", gib(shape.memory_gib)),
            ("pods", shape.max_pods().to_string()),
            ("ephemeral-storage", "20Gi".to_string()),
        ]),
        overhead: Overhead {
            kube_reserved: resources(&[
                ("cpu", "100m".into()),
                ("memory", mib(shape.max_pods() * 11 + 255)),
            ]),
            system_reserved: Vec::new(),
            eviction_threshold: resources(&[("memory", mib(100))]),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalog_has_144_distinct_types() {
        let all = shapes();
        assert_eq!(all.len(), 144);
        let mut names: Vec<_> = all.iter().map(|s| s.name.clone()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), 144);
    }

    #[test]
    fn spot_is_cheaper() {
        let shape = find("c-4x-amd64-linux").expect("in catalog");
        let it = instance_type(&shape);
        let spot = it
            .offerings
            .iter()
            .find(|o| o.zone == "test-zone-a" && o.capacity_type == "spot")
            .expect("spot");
        let od = it
            .offerings
            .iter()
            .find(|o| o.zone == "test-zone-a" && o.capacity_type == "on-demand")
            .expect("od");
        assert!(spot.price < od.price);
        assert_eq!(it.offerings.len(), 8);
    }
}
