//! What a pod requests, counted as Kubernetes counts it (and Karpenter with
//! it, `resourcehelper.PodRequests`): the containers' sum, sidecars (init
//! containers that restart `Always`) added to it; at least what any init
//! container needs while it runs beside the sidecars started before it;
//! pod-level requests (Kubernetes 1.34+) in place of all that for the
//! resources they name (cpu, memory, hugepages); then the pod overhead.

use super::{add, max_into, resource_list};
use crate::slim;
use anyhow::Context;
use engine::ResourceList;
use k8s_openapi::api::core::v1 as core;
use vocabulary::resources::{CPU, MEMORY};

/// Resources a pod may request at pod level.
fn pod_level(name: &str) -> bool {
    name == CPU || name == MEMORY || name.starts_with("hugepages-")
}

pub fn requests(spec: &slim::PodSpec) -> anyhow::Result<ResourceList> {
    let container = |c: &slim::pod::Container, what: &str| {
        resource_list(c.resources.as_ref().and_then(|r| r.requests.as_ref()))
            .with_context(|| format!("{what} {}", c.name))
    };
    let mut sum = ResourceList::new();
    for c in &spec.containers {
        add(&mut sum, &container(c, "container")?);
    }
    let mut sidecars = ResourceList::new();
    let mut init = ResourceList::new();
    for c in spec.init_containers.iter().flatten() {
        let own = container(c, "init container")?;
        if c.restart_policy.as_deref() == Some("Always") {
            add(&mut sum, &own);
            add(&mut sidecars, &own);
            max_into(&mut init, &sidecars);
        } else {
            let mut running = own;
            add(&mut running, &sidecars);
            max_into(&mut init, &running);
        }
    }
    max_into(&mut sum, &init);
    let pod = resource_list(spec.resources.as_ref().and_then(|r| r.requests.as_ref()))
        .context("pod-level resources")?;
    for (name, quantity) in pod.iter().filter(|(name, _)| pod_level(name)) {
        sum.insert(name.clone(), *quantity);
    }
    add(
        &mut sum,
        &resource_list(spec.overhead.as_ref()).context("overhead")?,
    );
    Ok(sum)
}

/// Gives a pod template's containers the requests its pods will have: the
/// API server defaults a missing request to the container's limit when it
/// makes a pod, not in a template, so a DaemonSet's overhead is read after
/// this.
pub fn default_requests_to_limits(spec: &mut core::PodSpec) {
    let init = spec.init_containers.iter_mut().flatten();
    for c in spec.containers.iter_mut().chain(init) {
        if let Some(r) = c.resources.as_mut()
            && let Some(limits) = &r.limits
        {
            let requests = r.requests.get_or_insert_with(Default::default);
            for (name, q) in limits {
                requests.entry(name.clone()).or_insert_with(|| q.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(json: serde_json::Value) -> slim::PodSpec {
        serde_json::from_value(json).expect("pod spec")
    }

    fn cpu_mem(spec: &slim::PodSpec) -> (i64, i64) {
        let r = requests(spec).expect("requests");
        (
            r.get(CPU).copied().unwrap_or(0),
            r.get(MEMORY).copied().unwrap_or(0),
        )
    }

    const MI: i64 = 1 << 20;

    #[test]
    fn containers_add_up_and_an_init_container_sets_a_floor() {
        let s = spec(serde_json::json!({
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "500m", "memory": "100Mi"}}},
                {"name": "b", "resources": {"requests": {"cpu": "250m"}}}
            ],
            "initContainers": [
                {"name": "migrate", "resources": {"requests": {"cpu": "1", "memory": "50Mi"}}}
            ]
        }));
        assert_eq!(cpu_mem(&s), (1000, 100 * MI));
    }

    #[test]
    fn sidecars_run_beside_everything_after_them() {
        let s = spec(serde_json::json!({
            "containers": [{"name": "app", "resources": {"requests": {"cpu": "500m"}}}],
            "initContainers": [
                {"name": "proxy", "restartPolicy": "Always", "resources": {"requests": {"cpu": "200m"}}},
                {"name": "setup", "resources": {"requests": {"cpu": "900m"}}}
            ]
        }));
        // The app and its sidecar: 700m; setup beside the sidecar: 1100m.
        assert_eq!(cpu_mem(&s).0, 1100);
        let small_setup = spec(serde_json::json!({
            "containers": [{"name": "app", "resources": {"requests": {"cpu": "500m"}}}],
            "initContainers": [
                {"name": "proxy", "restartPolicy": "Always", "resources": {"requests": {"cpu": "200m"}}},
                {"name": "setup", "resources": {"requests": {"cpu": "100m"}}}
            ]
        }));
        assert_eq!(cpu_mem(&small_setup).0, 700);
    }

    #[test]
    fn pod_level_requests_replace_the_containers_sum_for_what_they_name() {
        let s = spec(serde_json::json!({
            "resources": {"requests": {"cpu": "2", "memory": "1Gi", "nvidia.com/gpu": "1"}},
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "500m", "memory": "100Mi"}}},
                {"name": "b", "resources": {"requests": {"ephemeral-storage": "1Gi"}}}
            ],
            "overhead": {"cpu": "100m"}
        }));
        let r = requests(&s).expect("requests");
        assert_eq!(r.get(CPU), Some(&2100), "pod level, then the overhead");
        assert_eq!(r.get(MEMORY), Some(&(1024 * MI)));
        assert_eq!(r.get("ephemeral-storage"), Some(&(1024 * MI)));
        assert_eq!(
            r.get("nvidia.com/gpu"),
            None,
            "not a pod-level resource: only containers request it"
        );
    }

    #[test]
    fn a_template_requests_its_limits_where_it_names_no_request() {
        let json = serde_json::json!({
            "containers": [
                {"name": "a", "resources": {"limits": {"cpu": "200m", "memory": "64Mi"}}},
                {"name": "b", "resources": {"requests": {"cpu": "100m"}, "limits": {"cpu": "1", "memory": "32Mi"}}}
            ]
        });
        let s = spec(json.clone());
        // A pod is defaulted by the API server; its own spec is read as is.
        assert_eq!(cpu_mem(&s), (100, 0));
        let mut template: core::PodSpec = serde_json::from_value(json).expect("pod spec");
        default_requests_to_limits(&mut template);
        assert_eq!(cpu_mem(&slim::PodSpec::from(template)), (300, 96 * MI));
    }
}
