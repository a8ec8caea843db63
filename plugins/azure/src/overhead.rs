//! What a node keeps for itself, as the provider's README documents it:
//! kube-reserved memory = min(20 * maxPods + 50, totalMemoryMiB / 4) MiB with a
//! 100 MiB hard-eviction threshold (totalMemoryMiB is the nominal SKU memory),
//! and kube-reserved CPU of 6% of the first core, 4% of the second, 2% of cores
//! 3 and 4 and 1% of every core above.
//!
//! Architecture Invariant: the numbers here are also what the bootstrap script
//! passes to the kubelet (`--kube-reserved`, `--eviction-hard`), so the
//! scheduler's estimate and the node's allocatable agree.

use crate::catalog::Sku;
use karpenter_plugin_sdk::prelude::*;

pub const EVICTION_HARD_MIB: u64 = 100;

/// kube-reserved memory in MiB.
pub fn kube_reserved_memory_mib(total_memory_mib: u64, max_pods: u64) -> u64 {
    (20 * max_pods + 50).min(total_memory_mib / 4)
}

/// kube-reserved CPU in millicores.
pub fn kube_reserved_cpu_millis(vcpu: u64) -> u64 {
    let mut m = 0;
    for core in 1..=vcpu {
        m += match core {
            1 => 60,
            2 => 40,
            3 | 4 => 20,
            _ => 10,
        };
    }
    m
}

pub fn overhead(sku: &Sku, max_pods: u64) -> Overhead {
    Overhead {
        kube_reserved: resources(&[
            ("cpu", millis(kube_reserved_cpu_millis(sku.vcpu))),
            (
                "memory",
                mib(kube_reserved_memory_mib(sku.memory_mib(), max_pods)),
            ),
        ]),
        system_reserved: Vec::new(),
        eviction_threshold: resources(&[("memory", mib(EVICTION_HARD_MIB))]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{SKUS_CSV, parse_skus};

    fn sku(name: &str) -> Sku {
        parse_skus(SKUS_CSV)
            .into_iter()
            .find(|s| s.name == name)
            .expect("in catalog")
    }

    fn reserved(name: &str, max_pods: u64) -> (String, String) {
        let o = overhead(&sku(name), max_pods);
        assert_eq!(
            o.eviction_threshold,
            vec![("memory".to_string(), "100Mi".to_string())]
        );
        (
            lookup(&o.kube_reserved, "cpu").unwrap_or_default().into(),
            lookup(&o.kube_reserved, "memory")
                .unwrap_or_default()
                .into(),
        )
    }

    #[test]
    fn d4s_v5() {
        // 4 vCPU, 16 GiB = 16384 MiB; a quarter is 4096 MiB.
        // CPU: 60 + 40 + 20 + 20 = 140m.
        // maxPods 30: 20*30+50 = 650 < 4096 -> 650.
        assert_eq!(
            reserved("Standard_D4s_v5", 30),
            ("140m".into(), "650Mi".into())
        );
        // maxPods 110: 20*110+50 = 2250 < 4096 -> 2250.
        assert_eq!(
            reserved("Standard_D4s_v5", 110),
            ("140m".into(), "2250Mi".into())
        );
        // maxPods 250: 20*250+50 = 5050 > 4096 -> 4096.
        assert_eq!(
            reserved("Standard_D4s_v5", 250),
            ("140m".into(), "4096Mi".into())
        );
    }

    #[test]
    fn d16s_v5() {
        // 16 vCPU, 64 GiB = 65536 MiB; a quarter is 16384 MiB.
        // CPU: 60 + 40 + 20 + 20 + 12 * 10 = 260m.
        // maxPods 30: 650; 110: 2250; 250: 5050 (all under 16384).
        assert_eq!(
            reserved("Standard_D16s_v5", 30),
            ("260m".into(), "650Mi".into())
        );
        assert_eq!(
            reserved("Standard_D16s_v5", 110),
            ("260m".into(), "2250Mi".into())
        );
        assert_eq!(
            reserved("Standard_D16s_v5", 250),
            ("260m".into(), "5050Mi".into())
        );
    }

    #[test]
    fn nc24ads_a100_v4() {
        // 24 vCPU, 220 GiB = 225280 MiB; a quarter is 56320 MiB.
        // CPU: 60 + 40 + 20 + 20 + 20 * 10 = 340m.
        // maxPods 30: 650; 110: 2250; 250: 5050.
        assert_eq!(
            reserved("Standard_NC24ads_A100_v4", 30),
            ("340m".into(), "650Mi".into())
        );
        assert_eq!(
            reserved("Standard_NC24ads_A100_v4", 110),
            ("340m".into(), "2250Mi".into())
        );
        assert_eq!(
            reserved("Standard_NC24ads_A100_v4", 250),
            ("340m".into(), "5050Mi".into())
        );
    }

    #[test]
    fn small_nodes_are_capped_by_a_quarter_of_memory() {
        // B2s: 4 GiB = 4096 MiB; a quarter is 1024 MiB < 20*110+50.
        assert_eq!(kube_reserved_memory_mib(4096, 110), 1024);
        assert_eq!(kube_reserved_cpu_millis(2), 100);
        assert_eq!(kube_reserved_cpu_millis(1), 60);
    }
}
