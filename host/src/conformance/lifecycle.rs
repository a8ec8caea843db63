//! The instance lifecycle against the plugin's real backend: create, create
//! again (idempotent by NodeClaim name), get, list, delete until not-found,
//! delete of an unknown instance, and a create nothing can satisfy.

use super::Calls;
use super::report::Report;
use karpenter_controller::records;
use karpenter_runtime::{CallError, Plugin, wit};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub(super) struct RoundTrip<'a> {
    pub plugin: &'a Plugin,
    pub class: &'a wit::NodeClass,
    pub node_class_ref: wit::NodeClassRef,
    pub types: &'a [wit::InstanceType],
    /// get-instance-types failed: what needs a catalog is skipped.
    pub catalog_failed: bool,
    pub calls: &'a mut Calls,
    pub delete_timeout: Duration,
}

/// The offering the kit launches: the cheapest available on-demand one (any
/// capacity type if none is on-demand).
struct Choice {
    instance_type: String,
    zone: String,
    capacity_type: String,
}

impl RoundTrip<'_> {
    pub(super) async fn check(&mut self, report: &mut Report) {
        let name = unique_name();
        let launched = match self.choose() {
            Some(choice) => {
                let claim = self.claim(
                    &name,
                    vec![
                        records::requirement_in(INSTANCE_TYPE, &[&choice.instance_type]),
                        records::requirement_in(ZONE, &[&choice.zone]),
                        records::requirement_in(CAPACITY_TYPE, &[&choice.capacity_type]),
                    ],
                );
                let created = self
                    .calls
                    .track("create", self.plugin.create(&claim, self.class))
                    .await;
                let result = created
                    .as_ref()
                    .map_err(|e| e.to_string())
                    .and_then(|i| matches_choice(i, &claim, &choice));
                report.push(
                    "create",
                    "create launches an instance for the NodeClaim, as it asked",
                    result,
                );
                if let Err(CallError::Provider {
                    error: wit::Error::InsufficientCapacity(ic),
                    ..
                }) = &created
                {
                    report.push(
                        "insufficient-capacity",
                        "an insufficient-capacity names the offerings that failed",
                        names_what_failed(ic, &choice),
                    );
                }
                created.ok().map(|i| (claim, i))
            }
            None if self.catalog_failed => {
                report.skip(
                    "create",
                    "create launches an instance for the NodeClaim, as it asked",
                    super::catalog::CATALOG,
                );
                None
            }
            None => {
                report.push(
                    "create",
                    "create launches an instance for the NodeClaim, as it asked",
                    Err("no available offering to launch".into()),
                );
                None
            }
        };
        let Some((claim, first)) = launched else {
            for (id, title) in [
                ("create-idempotent", IDEMPOTENT),
                ("get", GET),
                ("list", LIST),
                ("delete", DELETE),
            ] {
                report.skip(id, title, "create");
            }
            self.unknown_delete(report).await;
            self.unsatisfiable(report).await;
            return;
        };

        let second = self
            .calls
            .track("create", self.plugin.create(&claim, self.class))
            .await;
        let listed = self.calls.track("list-instances", self.plugin.list()).await;
        let mine: Vec<wit::Instance> = listed
            .as_ref()
            .map(|l| {
                l.iter()
                    .filter(|i| i.node_claim == claim.name)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        report.push(
            "create-idempotent",
            IDEMPOTENT,
            match &second {
                Err(e) => Err(format!("a second create for the same NodeClaim failed: {e}")),
                Ok(i) if i.provider_id != first.provider_id => Err(format!(
                    "a second create for NodeClaim {} returned {}, the first {}: create must return the existing instance",
                    claim.name, i.provider_id, first.provider_id
                )),
                Ok(_) if mine.len() > 1 => Err(format!(
                    "list-instances shows {} instances for NodeClaim {}: {}",
                    mine.len(),
                    claim.name,
                    ids(&mine)
                )),
                Ok(_) => Ok(first.provider_id.clone()),
            },
        );

        let got = self
            .calls
            .track("get", self.plugin.get(&first.provider_id))
            .await;
        report.push(
            "get",
            GET,
            match got {
                Ok(i) if i.provider_id == first.provider_id && i.node_claim == claim.name => {
                    same_launch(&i, &first).map(|()| format!("{} state {}", i.provider_id, i.state))
                }
                Ok(i) => Err(format!(
                    "get({}) returned {} for NodeClaim {:?}",
                    first.provider_id, i.provider_id, i.node_claim
                )),
                Err(e) => Err(e.to_string()),
            },
        );
        report.push(
            "list",
            LIST,
            match &listed {
                Ok(all) if all.iter().any(|i| i.provider_id == first.provider_id) => {
                    Ok(format!("{} instances", all.len()))
                }
                Ok(all) => Err(format!(
                    "list-instances ({} instances) does not include {}",
                    all.len(),
                    first.provider_id
                )),
                Err(e) => Err(e.to_string()),
            },
        );

        // Delete everything made for the claim, the extra instance of a
        // create that is not idempotent included.
        let mut targets = vec![first.clone()];
        for i in mine.iter().chain(second.as_ref().ok()) {
            if !targets.iter().any(|t| t.provider_id == i.provider_id) {
                targets.push(i.clone());
            }
        }
        let mut result = Ok(format!("{} deleted", first.provider_id));
        for target in &targets {
            let mut c = claim.clone();
            c.provider_id = Some(target.provider_id.clone());
            if let Err(e) = self.delete_until_gone(&c).await {
                result = Err(e);
            }
        }
        report.push("delete", DELETE, result);
        self.unknown_delete(report).await;
        self.unsatisfiable(report).await;
    }

    fn choose(&self) -> Option<Choice> {
        let mut offerings: Vec<(&wit::InstanceType, &wit::Offering)> = self
            .types
            .iter()
            .flat_map(|it| it.offerings.iter().map(move |o| (it, o)))
            .filter(|(_, o)| o.available && o.price.is_finite())
            .collect();
        offerings.sort_by(|a, b| {
            let od = |o: &wit::Offering| o.capacity_type != "on-demand";
            (od(a.1), a.1.price)
                .partial_cmp(&(od(b.1), b.1.price))
                .unwrap_or(std::cmp::Ordering::Equal)
        });
        offerings.first().map(|(it, o)| Choice {
            instance_type: it.name.clone(),
            zone: o.zone.clone(),
            capacity_type: o.capacity_type.clone(),
        })
    }

    fn claim(&self, name: &str, requirements: Vec<wit::Requirement>) -> wit::NodeClaim {
        wit::NodeClaim {
            name: name.to_string(),
            node_pool: "conformance".into(),
            labels: vec![("karpenter.sh/nodepool".into(), "conformance".into())],
            annotations: vec![],
            taints: vec![],
            startup_taints: vec![],
            requirements,
            resource_requests: vec![("cpu".into(), "100m".into())],
            node_class_ref: self.node_class_ref.clone(),
            provider_id: None,
            image_id: None,
            kubelet_version: None,
        }
    }

    /// Deletes until the plugin answers not-found, then expects get to agree.
    async fn delete_until_gone(&mut self, claim: &wit::NodeClaim) -> Result<(), String> {
        let provider_id = claim.provider_id.clone().unwrap_or_default();
        let deadline = Instant::now() + self.delete_timeout;
        loop {
            match self.calls.track("delete", self.plugin.delete(claim)).await {
                Ok(()) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(500)).await
                }
                Ok(()) => {
                    return Err(format!(
                        "delete of {provider_id} still answers success after {} s; it must answer not-found once the instance is gone",
                        self.delete_timeout.as_secs()
                    ));
                }
                Err(e) if is_not_found(&e) => break,
                Err(e) => return Err(format!("deleting {provider_id}: {e}")),
            }
        }
        match self.calls.track("get", self.plugin.get(&provider_id)).await {
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(format!(
                "get of the deleted {provider_id} must answer not-found, it answered: {e}"
            )),
            Ok(i) => Err(format!(
                "get of the deleted {provider_id} still returns it (state {})",
                i.state
            )),
        }
    }

    async fn unknown_delete(&mut self, report: &mut Report) {
        let claim = self.claim(&format!("{}-unknown", unique_name()), vec![]);
        let result = match self.calls.track("delete", self.plugin.delete(&claim)).await {
            Err(e) if is_not_found(&e) => Ok("not-found".into()),
            Err(e) => Err(format!(
                "delete of NodeClaim {} that was never created must answer not-found, it answered: {e}",
                claim.name
            )),
            Ok(()) => Err(format!(
                "delete of NodeClaim {} that was never created succeeded; it must answer not-found",
                claim.name
            )),
        };
        report.push(
            "delete-unknown",
            "delete of an instance that does not exist answers not-found",
            result,
        );
    }

    /// A create no offering satisfies must fail with a typed error the host
    /// can act on.
    async fn unsatisfiable(&mut self, report: &mut Report) {
        let claim = self.claim(
            &format!("{}-none", unique_name()),
            vec![records::requirement_in(
                INSTANCE_TYPE,
                &["conformance-no-such-instance-type"],
            )],
        );
        let result = match self
            .calls
            .track("create", self.plugin.create(&claim, self.class))
            .await
        {
            Err(CallError::Provider {
                error: wit::Error::InsufficientCapacity(_) | wit::Error::CreateError(_),
                ..
            }) => Ok("insufficient-capacity or create-error".into()),
            Err(e) => Err(format!(
                "a NodeClaim no instance type satisfies must fail with insufficient-capacity (or create-error), it failed with: {e}"
            )),
            Ok(i) => {
                let mut c = claim.clone();
                c.provider_id = Some(i.provider_id.clone());
                let _ = self.delete_until_gone(&c).await;
                Err(format!(
                    "a NodeClaim requiring instance type conformance-no-such-instance-type launched {} ({})",
                    i.provider_id, i.instance_type
                ))
            }
        };
        report.push(
            "unsatisfiable-create",
            "a create no offering satisfies fails with insufficient-capacity",
            result,
        );
    }
}

const INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
const ZONE: &str = "topology.kubernetes.io/zone";
const CAPACITY_TYPE: &str = "karpenter.sh/capacity-type";
const IDEMPOTENT: &str = "create is idempotent by NodeClaim name";
const GET: &str = "get returns the created instance by providerID";
const LIST: &str = "list-instances includes the created instance";
const DELETE: &str = "delete answers not-found once the instance is gone, and get agrees";

/// The host keeps the offerings an insufficient-capacity names out of the
/// next rounds; with none named it would ask for the same one again.
fn names_what_failed(ic: &wit::InsufficientCapacity, asked: &Choice) -> Result<String, String> {
    if ic.offerings.is_empty() {
        return Err(format!(
            "create of a NodeClaim for {} in {} ({}) answered insufficient-capacity ({:?}) naming no offering: name the ones that failed, or the host asks for them again",
            asked.instance_type, asked.zone, asked.capacity_type, ic.message
        ));
    }
    let outside: Vec<String> = ic
        .offerings
        .iter()
        .filter(|o| {
            o.instance_type != asked.instance_type
                || o.zone != asked.zone
                || o.capacity_type != asked.capacity_type
        })
        .map(|o| format!("{} in {} ({})", o.instance_type, o.zone, o.capacity_type))
        .collect();
    if !outside.is_empty() {
        return Err(format!(
            "it names offerings the NodeClaim did not allow: {}",
            outside.join(", ")
        ));
    }
    Ok(format!("{} offerings named", ic.offerings.len()))
}

fn is_not_found(e: &CallError) -> bool {
    matches!(e.provider_error(), Some(wit::Error::NotFound(_)))
}

fn matches_choice(
    i: &wit::Instance,
    claim: &wit::NodeClaim,
    choice: &Choice,
) -> Result<String, String> {
    let mut wrong = Vec::new();
    if i.node_claim != claim.name {
        wrong.push(format!(
            "node-claim {:?}, not {:?}",
            i.node_claim, claim.name
        ));
    }
    if i.instance_type != choice.instance_type {
        wrong.push(format!(
            "instance type {:?}, not {:?}",
            i.instance_type, choice.instance_type
        ));
    }
    if i.zone != choice.zone {
        wrong.push(format!("zone {:?}, not {:?}", i.zone, choice.zone));
    }
    if i.capacity_type != choice.capacity_type {
        wrong.push(format!(
            "capacity type {:?}, not {:?}",
            i.capacity_type, choice.capacity_type
        ));
    }
    wrong.extend(node_labels(i));
    wrong.extend(allocatable_within_capacity(i));
    if wrong.is_empty() {
        Ok(format!(
            "{} ({} in {}, {})",
            i.provider_id, i.instance_type, i.zone, i.capacity_type
        ))
    } else {
        Err(format!(
            "the instance {} does not match the NodeClaim: {}",
            i.provider_id,
            wrong.join(", ")
        ))
    }
}

/// The labels the Node will carry name its instance type and zone, as the
/// instance does.
fn node_labels(i: &wit::Instance) -> Vec<String> {
    let mut wrong = Vec::new();
    for (key, want) in [(INSTANCE_TYPE, &i.instance_type), (ZONE, &i.zone)] {
        match i.labels.iter().find(|(k, _)| k == key) {
            Some((_, v)) if v == want => {}
            Some((_, v)) => wrong.push(format!("label {key}={v}, but the instance says {want}")),
            None => wrong.push(format!("no label {key} among its labels")),
        }
    }
    wrong
}

/// Allocatable is what is left of capacity: never more of anything.
fn allocatable_within_capacity(i: &wit::Instance) -> Vec<String> {
    use engine::quantity::parse_resource;
    let mut wrong = Vec::new();
    for (name, amount) in &i.allocatable {
        let Some((_, cap)) = i.capacity.iter().find(|(n, _)| n == name) else {
            continue;
        };
        match (parse_resource(name, amount), parse_resource(name, cap)) {
            (Ok(a), Ok(c)) if a > c => wrong.push(format!(
                "allocatable {name} {amount} is above its capacity {cap}"
            )),
            (Ok(_), Ok(_)) => {}
            _ => wrong.push(format!("{name}: {amount} or {cap} is not a quantity")),
        }
    }
    wrong
}

/// `get` answers with what `create` launched.
fn same_launch(got: &wit::Instance, created: &wit::Instance) -> Result<(), String> {
    let mut wrong = Vec::new();
    for (what, g, c) in [
        ("instance type", &got.instance_type, &created.instance_type),
        ("zone", &got.zone, &created.zone),
        ("capacity type", &got.capacity_type, &created.capacity_type),
    ] {
        if g != c {
            wrong.push(format!("{what} {g:?}, but create launched {c:?}"));
        }
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(format!("get({}): {}", got.provider_id, wrong.join(", ")))
    }
}

fn ids(instances: &[wit::Instance]) -> String {
    instances
        .iter()
        .map(|i| i.provider_id.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// A NodeClaim name no earlier run used: NodeClaim names are DNS labels.
fn unique_name() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "conformance-{:x}",
        (nanos as u64) ^ u64::from(std::process::id())
    )
}
