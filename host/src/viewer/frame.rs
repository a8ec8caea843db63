//! One frame of `karpenter viewer`: the cluster as the controller sees it
//! (a disruption snapshot), one line per node grouped by NodePool, as plain
//! text. Pure: the same snapshot, options and clock give the same frame.

use engine::disruption::{ClusterNode, DisruptionSnapshot};
use std::collections::BTreeMap;
use std::fmt::Write;
use vocabulary::labels;

/// How nodes are ordered within their NodePool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Sort {
    Name,
    /// Dearest first.
    Price,
    /// Most requested CPU first.
    Utilization,
    /// Oldest first.
    Age,
}

#[derive(Debug, Clone)]
pub struct Options {
    /// Only this NodePool's nodes.
    pub node_pool: Option<String>,
    /// Only nodes with every one of these labels (`key=value`, or `key` for
    /// any value).
    pub selector: Vec<(String, Option<String>)>,
    pub sort: Sort,
    /// Nodes Karpenter does not manage are listed too.
    pub unmanaged: bool,
}

/// Parses `a=b,c` into the selector of [`Options`].
pub fn parse_selector(s: &str) -> Vec<(String, Option<String>)> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (k.trim().to_string(), Some(v.trim().to_string())),
            None => (p.to_string(), None),
        })
        .collect()
}

/// What the frame says about pods no node holds yet.
#[derive(Debug, Clone, Default)]
pub struct Pending {
    pub count: usize,
    /// The engine's reason for the largest group of pods it cannot place,
    /// with how many pods give it.
    pub largest: Option<(usize, String)>,
    /// Pods the provisioner would place on new NodeClaims.
    pub to_launch: usize,
}

struct Row<'a> {
    node: &'a ClusterNode,
    state: String,
    cpu: (i64, i64),
    memory: (i64, i64),
    price: Option<f64>,
}

const HOURS_PER_MONTH: f64 = 730.0;

pub fn render(
    snap: &DisruptionSnapshot,
    pending: &Pending,
    disrupting: &BTreeMap<String, String>,
    options: &Options,
) -> String {
    let rows: Vec<Row> = snap
        .nodes
        .iter()
        .filter(|n| options.unmanaged || n.node_pool.is_some())
        .filter(|n| {
            options
                .node_pool
                .as_ref()
                .is_none_or(|p| n.node_pool.as_ref() == Some(p))
        })
        .filter(|n| {
            options.selector.iter().all(|(k, v)| match v {
                Some(v) => n.labels.get(k) == Some(v),
                None => n.labels.get(k).is_some(),
            })
        })
        .map(|n| Row {
            node: n,
            state: state(n, snap.now, disrupting),
            cpu: requested(n, "cpu"),
            memory: requested(n, "memory"),
            price: engine::whatif::node_price(&snap.node_pools, n),
        })
        .collect();
    let mut pools: BTreeMap<&str, Vec<Row>> = BTreeMap::new();
    for r in rows {
        pools
            .entry(r.node.node_pool.as_deref().unwrap_or("(not managed)"))
            .or_default()
            .push(r);
    }
    // Folded from +0.0: an empty f64 sum is -0.0, which prints as "$-0.0000".
    let total: f64 = pools
        .values()
        .flatten()
        .filter_map(|r| r.price)
        .fold(0.0, |a, b| a + b);
    let nodes: usize = pools.values().map(Vec::len).sum();
    let pods: usize = pools
        .values()
        .flatten()
        .map(|r| r.node.pods.iter().filter(|p| !p.daemon_set).count())
        .sum();
    let mut out = String::new();
    let _ = write!(
        out,
        "{nodes} nodes  {pods} pods  ${total:.4}/h  ${:.2}/month  {} pending",
        total * HOURS_PER_MONTH,
        pending.count
    );
    if pending.to_launch > 0 {
        let _ = write!(out, " ({} to launch)", pending.to_launch);
    }
    if let Some((n, why)) = &pending.largest {
        let _ = write!(out, "; {n} cannot be scheduled: {why}");
    }
    out.push('\n');
    for (pool, mut rows) in pools {
        rows.sort_by(|a, b| order(options.sort, a, b));
        let cost: f64 = rows.iter().filter_map(|r| r.price).fold(0.0, |a, b| a + b);
        let _ = writeln!(out, "\nNodePool {pool}: {} nodes, ${cost:.4}/h", rows.len());
        let _ = writeln!(
            out,
            "  {:<30} {:<22} {:<10} {:<16} {:>5}  {:<22} {:<17} {:<17} {:>8}",
            "NAME", "TYPE", "CAPACITY", "ZONE", "AGE", "STATE", "CPU", "MEMORY", "$/h"
        );
        for r in rows {
            let l = |k: &str| r.node.labels.get(k).map(String::as_str).unwrap_or("-");
            let _ = writeln!(
                out,
                "  {:<30} {:<22} {:<10} {:<16} {:>5}  {:<22} {} {} {:>8}",
                r.node.name,
                l(labels::INSTANCE_TYPE),
                l(labels::CAPACITY_TYPE),
                l(labels::ZONE),
                age(snap.now - r.node.created),
                r.state,
                bar(r.cpu),
                bar(r.memory),
                r.price.map_or("-".to_string(), |p| format!("{p:.4}")),
            );
        }
    }
    out
}

fn order(sort: Sort, a: &Row, b: &Row) -> std::cmp::Ordering {
    let by_name = a.node.name.cmp(&b.node.name);
    match sort {
        Sort::Name => by_name,
        Sort::Price => b
            .price
            .unwrap_or(0.0)
            .total_cmp(&a.price.unwrap_or(0.0))
            .then(by_name),
        Sort::Utilization => fraction(b.cpu).total_cmp(&fraction(a.cpu)).then(by_name),
        Sort::Age => a.node.created.cmp(&b.node.created).then(by_name),
    }
}

/// What the node is doing, most telling first.
fn state(n: &ClusterNode, now: i64, disrupting: &BTreeMap<String, String>) -> String {
    if let Some(reason) = disrupting.get(&n.name) {
        return format!("disrupting ({reason})");
    }
    if n.deleting {
        return "deleting".into();
    }
    if n.awaiting_launch {
        return "launching".into();
    }
    if n.in_flight {
        return "registering".into();
    }
    if n.node_pool_hash_drifted || n.provider_drift.is_some() {
        return match &n.provider_drift {
            Some(why) => format!("drifted ({why})"),
            None => "drifted".into(),
        };
    }
    let expired = n
        .expire_after
        .as_deref()
        .and_then(|e| vocabulary::duration::parse_or_never(e).ok().flatten())
        .is_some_and(|d| now - n.created >= d.as_secs() as i64);
    if expired {
        return "expiring".into();
    }
    if !n.initialized {
        return "registered".into();
    }
    if n.not_ready {
        return "not ready".into();
    }
    "ready".into()
}

/// (requested by its pods, allocatable), in the engine's units.
fn requested(n: &ClusterNode, resource: &str) -> (i64, i64) {
    let used = n
        .pods
        .iter()
        .filter_map(|p| p.pod.requests.get(resource))
        .sum();
    (used, n.allocatable.get(resource).copied().unwrap_or(0))
}

fn fraction((used, of): (i64, i64)) -> f64 {
    if of > 0 { used as f64 / of as f64 } else { 0.0 }
}

/// `[#####-----]  50%`: ten steps of requested over allocatable.
fn bar(r: (i64, i64)) -> String {
    let f = fraction(r);
    let filled = ((f * 10.0).round() as usize).min(10);
    format!(
        "[{}{}] {:>3}%",
        "#".repeat(filled),
        "-".repeat(10 - filled),
        (f * 100.0).round() as i64
    )
}

fn age(seconds: i64) -> String {
    let s = seconds.max(0);
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::disruption::{DisruptionNodePool, NodePod};
    use engine::{InstanceType, NodePool, Offering, Pod, PodTemplate};
    use std::sync::Arc;

    fn node(name: &str, pool: &str, it: &str, zone: &str, cpu_used: i64) -> ClusterNode {
        ClusterNode {
            name: name.into(),
            node_pool: Some(pool.into()),
            labels: [
                (labels::INSTANCE_TYPE.to_string(), it.to_string()),
                (labels::ZONE.to_string(), zone.to_string()),
                (labels::CAPACITY_TYPE.to_string(), "on-demand".to_string()),
            ]
            .into_iter()
            .collect(),
            allocatable: [("cpu".to_string(), 2000), ("memory".to_string(), 8 << 30)]
                .into_iter()
                .collect(),
            pods: vec![NodePod {
                pod: Pod {
                    name: format!("{name}-pod"),
                    template: Arc::new(PodTemplate {
                        requests: [("cpu".to_string(), cpu_used)].into_iter().collect(),
                        ..PodTemplate::default()
                    }),
                    ..Pod::default()
                },
                ..NodePod::default()
            }],
            initialized: true,
            created: 1_000,
            ..ClusterNode::default()
        }
    }

    fn snapshot() -> DisruptionSnapshot {
        let it = |name: &str, price: f64| InstanceType {
            name: name.into(),
            offerings: vec![Offering {
                zone: Some("z1".into()),
                capacity_type: "on-demand".into(),
                price,
                available: true,
                ..Offering::default()
            }],
            ..InstanceType::default()
        };
        let pool = DisruptionNodePool {
            pool: NodePool {
                name: "default".into(),
                instance_types: vec![it("small", 0.1), it("large", 0.4)].into(),
                ..NodePool::default()
            },
            ..DisruptionNodePool::default()
        };
        let mut drifted = node("c-drifted", "default", "small", "z1", 500);
        drifted.node_pool_hash_drifted = true;
        let mut launching = node("d-launching", "default", "small", "z1", 0);
        launching.awaiting_launch = true;
        DisruptionSnapshot {
            now: 1_000 + 3 * 3600,
            node_pools: vec![pool],
            nodes: vec![
                node("a-busy", "default", "large", "z1", 1500),
                node("b-idle", "default", "small", "z1", 0),
                drifted,
                launching,
            ],
            ..DisruptionSnapshot::default()
        }
    }

    fn options(sort: Sort) -> Options {
        Options {
            node_pool: None,
            selector: vec![],
            sort,
            unmanaged: false,
        }
    }

    #[test]
    fn a_frame_shows_each_node_with_its_bars_price_and_state() {
        let pending = Pending {
            count: 3,
            largest: Some((2, "no instance type has enough cpu".into())),
            to_launch: 1,
        };
        let disrupting = [("b-idle".to_string(), "Empty".to_string())].into();
        let f = render(&snapshot(), &pending, &disrupting, &options(Sort::Price));
        eprintln!("{f}");
        let lines: Vec<&str> = f.lines().collect();
        assert_eq!(
            lines[0],
            "4 nodes  4 pods  $0.7000/h  $511.00/month  3 pending (1 to launch); 2 cannot be scheduled: no instance type has enough cpu"
        );
        assert!(f.contains("NodePool default: 4 nodes, $0.7000/h"), "{f}");
        let row = |name: &str| {
            lines
                .iter()
                .find(|l| l.trim_start().starts_with(name))
                .copied()
                .unwrap_or_else(|| panic!("{name} in {f}"))
        };
        assert!(row("a-busy").contains("[########--]  75%"), "{f}");
        assert!(row("a-busy").contains("0.4000") && row("a-busy").contains(" 3h "));
        assert!(row("b-idle").contains("disrupting (Empty)"));
        assert!(row("c-drifted").contains("drifted"));
        assert!(row("d-launching").contains("launching"));
        // Dearest first.
        let at = |name: &str| f.find(name).expect(name);
        assert!(at("a-busy") < at("b-idle"));
    }

    #[test]
    fn filters_and_sorting_choose_and_order_the_lines() {
        let snap = snapshot();
        let none = BTreeMap::new();
        let mut o = options(Sort::Utilization);
        o.selector = parse_selector("node.kubernetes.io/instance-type=small");
        let f = render(&snap, &Pending::default(), &none, &o);
        assert!(!f.contains("a-busy"), "{f}");
        assert!(f.find("c-drifted") < f.find("b-idle"), "busier first: {f}");
        o.node_pool = Some("other".into());
        let f = render(&snap, &Pending::default(), &none, &o);
        assert!(
            f.starts_with("0 nodes  0 pods  $0.0000/h  $0.00/month"),
            "{f}"
        );
        assert_eq!(
            parse_selector("a=b, c"),
            vec![
                ("a".to_string(), Some("b".to_string())),
                ("c".to_string(), None)
            ]
        );
    }
}
