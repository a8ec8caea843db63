//! The built-in platform table (data/platforms.csv): Nebius's public
//! platforms and presets, so `get-instance-types` answers without
//! credentials, as an offline `simulate` runs. It becomes the same
//! `proto::Platform` values PlatformService.List returns, so `catalog` builds
//! the instance types the same way either way.
//!
//! Architecture Invariant: pure; nothing here calls a host import.

use crate::proto::{
    Platform, PlatformSpec, PlatformStatus, Preset, PresetResources, ResourceMetadata,
};

pub const PLATFORMS_CSV: &str = include_str!("data/platforms.csv");

/// One preset of one platform, and the regions offering it.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub platform: String,
    pub preset: String,
    pub vcpu: i32,
    pub memory_gib: i32,
    pub gpus: i32,
    pub preemptible: bool,
    pub regions: Vec<String>,
}

/// The table's rows; an error names the first bad line.
pub fn parse(text: &str) -> Result<Vec<Row>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = |what: &str| format!("line {}: {what}: {line}", i + 1);
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        let [platform, preset, vcpu, memory, gpus, preemptible, regions] = f[..] else {
            return Err(bad("expected 7 fields"));
        };
        let num = |s: &str, what: &str| s.parse::<i32>().map_err(|_| bad(what));
        out.push(Row {
            platform: platform.into(),
            preset: preset.into(),
            vcpu: num(vcpu, "vcpu")?,
            memory_gib: num(memory, "memoryGiB")?,
            gpus: num(gpus, "gpus")?,
            preemptible: match preemptible {
                "1" => true,
                "0" => false,
                _ => return Err(bad("preemptible is 0 or 1")),
            },
            regions: regions.split_whitespace().map(String::from).collect(),
        });
    }
    Ok(out)
}

/// The day the table was compiled, from its header ("compiled YYYY-MM-DD").
pub fn compiled(text: &str) -> Option<&str> {
    text.lines()
        .take_while(|l| l.starts_with('#'))
        .find_map(|l| l.split_once("compiled ").map(|(_, rest)| rest))
        .and_then(|rest| rest.get(..10))
}

/// The platforms offered in `region`, as PlatformService.List shapes them.
/// A region the table does not know gets every platform: a guess beats an
/// empty catalog, and the warning already says the table is an estimate.
pub fn platforms(rows: &[Row], region: &str) -> Vec<Platform> {
    let known = rows.iter().any(|r| r.regions.iter().any(|g| g == region));
    let mut out: Vec<Platform> = Vec::new();
    for r in rows {
        if known && !r.regions.iter().any(|g| g == region) {
            continue;
        }
        let preset = Preset {
            name: r.preset.clone(),
            resources: Some(PresetResources {
                vcpu_count: r.vcpu,
                memory_gibibytes: r.memory_gib,
                gpu_count: r.gpus,
            }),
        };
        let existing = out
            .iter_mut()
            .find(|p| p.metadata.as_ref().is_some_and(|m| m.name == r.platform));
        match existing {
            Some(p) => p
                .spec
                .get_or_insert_with(Default::default)
                .presets
                .push(preset),
            None => out.push(Platform {
                metadata: Some(ResourceMetadata {
                    name: r.platform.clone(),
                    ..Default::default()
                }),
                spec: Some(PlatformSpec {
                    presets: vec![preset],
                    human_readable_name: String::new(),
                }),
                status: Some(PlatformStatus {
                    allowed_for_preemptibles: r.preemptible,
                }),
            }),
        }
    }
    out
}

/// The embedded table's platforms for `region`.
pub fn embedded(region: &str) -> Result<Vec<Platform>, String> {
    Ok(platforms(&parse(PLATFORMS_CSV)?, region))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{self, LABEL_SKU_CPU, LABEL_SKU_GPU_COUNT, Prices, Shaping};
    use karpenter_plugin_sdk::prelude::*;

    fn rows() -> Vec<Row> {
        parse(PLATFORMS_CSV).expect("the embedded table parses")
    }

    fn types(region: &str) -> Vec<InstanceType> {
        let prices = Prices::default();
        let shaping = Shaping {
            region,
            max_pods: 110,
            os_disk_size_gb: 128,
            prices: &prices,
        };
        let platforms = embedded(region).expect("parses");
        catalog::shapes(&platforms)
            .iter()
            .map(|s| catalog::instance_type(s, &shaping, &|_, _, _| false))
            .collect()
    }

    fn value<'a>(it: &'a InstanceType, key: &str) -> Option<&'a str> {
        it.requirements
            .iter()
            .find(|r| r.key == key)
            .and_then(|r| r.values.first())
            .map(String::as_str)
    }

    fn capacity<'a>(it: &'a InstanceType, name: &str) -> Option<&'a str> {
        it.capacity
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn the_embedded_table_parses_and_names_its_date() {
        let rows = rows();
        assert!(rows.len() > 30, "{} rows", rows.len());
        let date = compiled(PLATFORMS_CSV).expect("a compiled date in the header");
        let digits = date.replace('-', "");
        assert!(
            date.len() == 10 && digits.len() == 8 && digits.chars().all(|c| c.is_ascii_digit()),
            "{date}"
        );
        for r in &rows {
            assert!(
                !r.regions.is_empty(),
                "{} {} has no region",
                r.platform,
                r.preset
            );
        }
    }

    #[test]
    fn preset_names_agree_with_their_resources() {
        for r in rows() {
            let name = if r.gpus > 0 {
                format!("{}gpu-{}vcpu-{}gb", r.gpus, r.vcpu, r.memory_gib)
            } else {
                format!("{}vcpu-{}gb", r.vcpu, r.memory_gib)
            };
            assert_eq!(r.preset, name, "{}", r.platform);
        }
    }

    #[test]
    fn every_preset_yields_a_type_with_cpu_and_memory() {
        let all = rows();
        let regions: std::collections::BTreeSet<&str> = all
            .iter()
            .flat_map(|r| r.regions.iter().map(String::as_str))
            .collect();
        for region in regions {
            let types = types(region);
            let offered = all
                .iter()
                .filter(|r| r.regions.iter().any(|g| g == region))
                .count();
            assert_eq!(types.len(), offered, "{region}");
            for it in &types {
                let positive = |n: &str| {
                    capacity(it, n)
                        .and_then(|v| {
                            v.trim_end_matches(|c: char| c.is_ascii_alphabetic())
                                .parse::<u64>()
                                .ok()
                        })
                        .is_some_and(|v| v > 0)
                };
                assert!(
                    positive("cpu") && positive("memory"),
                    "{}: {:?}",
                    it.name,
                    it.capacity
                );
                assert!(it.offerings.iter().all(|o| o.price > 0.0), "{}", it.name);
            }
        }
    }

    #[test]
    fn gpu_types_carry_their_gpus_and_no_sku_cpu() {
        let types = types("eu-north1");
        let h100 = types
            .iter()
            .find(|t| t.name == "gpu-h100-sxm-8gpu-128vcpu-1600gb")
            .expect("the seed's GPU type");
        assert_eq!(capacity(h100, "nvidia.com/gpu"), Some("8"));
        assert_eq!(value(h100, LABEL_SKU_GPU_COUNT), Some("8"));
        for t in types.iter().filter(|t| t.name.starts_with("gpu-")) {
            assert!(value(t, LABEL_SKU_CPU).is_none(), "{} has sku-cpu", t.name);
            assert!(capacity(t, "nvidia.com/gpu").is_some(), "{}", t.name);
        }
        for t in types.iter().filter(|t| t.name.starts_with("cpu-")) {
            assert!(value(t, LABEL_SKU_CPU).is_some(), "{}", t.name);
            assert_eq!(value(t, LABEL_SKU_GPU_COUNT), Some("0"), "{}", t.name);
        }
    }

    #[test]
    fn the_seed_cpu_type_and_the_public_h200_price() {
        let types = types("eu-north1");
        let cpu = types
            .iter()
            .find(|t| t.name == "cpu-d3-16vcpu-64gb")
            .expect("cpu-d3-16vcpu-64gb");
        assert_eq!(value(cpu, LABEL_SKU_CPU), Some("16"));
        assert_eq!(value(cpu, labels::ZONE), Some("eu-north1"));
        let h200 = types
            .iter()
            .find(|t| t.name == "gpu-h200-sxm-1gpu-16vcpu-200gb")
            .expect("H200 in eu-north1");
        assert_eq!(h200.offerings[0].price, 3.5);
        assert_eq!(h200.offerings.len(), 2, "H200 takes preemptibles");
        assert_eq!(cpu.offerings.len(), 1, "cpu-d3 takes no preemptibles");
    }

    #[test]
    fn regions_narrow_the_table_and_unknown_ones_get_all_of_it() {
        let names = |region: &str| -> Vec<String> {
            catalog::shapes(&embedded(region).expect("parses"))
                .into_iter()
                .map(|s| s.name)
                .collect()
        };
        let north = names("eu-north1");
        assert!(!north.iter().any(|n| n == "cpu-d3-256vcpu-1024gb"));
        assert!(!north.iter().any(|n| n.starts_with("gpu-b200")));
        let central = names("us-central1");
        assert!(
            central
                .iter()
                .any(|n| n == "gpu-b200-sxm-8gpu-160vcpu-1792gb")
        );
        assert!(!central.iter().any(|n| n.starts_with("gpu-h100")));
        assert_eq!(names("xx-nowhere1").len(), rows().len());
    }

    #[test]
    fn bad_lines_are_reported() {
        assert!(parse("cpu-d3,4vcpu-16gb,4,16,0,0").is_err());
        assert!(parse("cpu-d3,4vcpu-16gb,four,16,0,0,eu-north1").is_err());
        assert!(parse("cpu-d3,4vcpu-16gb,4,16,0,yes,eu-north1").is_err());
        assert_eq!(compiled("# nothing here\nx"), None);
    }
}
