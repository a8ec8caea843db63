//! Benchmarks behind `karpenter bench`: the figures the project promises,
//! measured the same way every time.

pub mod disruption;
pub mod plugins;
pub mod scheduling;
pub mod slow_server;

/// The virtual pods of a CapacityBuffer of `replicas` chunks of 1 CPU and
/// 1 GiB.
pub fn buffer_pods(replicas: usize) -> Vec<engine::Pod> {
    let template = std::sync::Arc::new(engine::PodTemplate {
        requests: [("cpu".to_string(), 1000), ("memory".to_string(), 1 << 30)]
            .into_iter()
            .collect(),
        ..engine::PodTemplate::default()
    });
    let buffer = engine::buffer::Buffer {
        namespace: "default",
        name: "spare",
        uid: "spare",
        creation: 0,
    };
    let count = i32::try_from(replicas).unwrap_or(i32::MAX);
    engine::buffer::virtual_pods(buffer, count, template)
}
