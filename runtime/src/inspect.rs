//! Reading a plugin's contract version and imports from its component type,
//! before anything is instantiated.

use super::bindings::{PROVIDER_EXPORT, SUPPORTED_VERSIONS};
use anyhow::bail;
use wasmtime::component::Component;

/// The `karpenter:provider` version the component implements, if this host
/// supports it.
pub fn contract_version(component: &Component) -> anyhow::Result<String> {
    let engine = component.engine();
    let ty = component.component_type();
    let prefix = format!("{PROVIDER_EXPORT}@");
    let found: Vec<String> = ty
        .exports(engine)
        .filter_map(|(name, _)| name.strip_prefix(&prefix).map(str::to_string))
        .collect();
    match found.as_slice() {
        [] => bail!(
            "it does not export {PROVIDER_EXPORT}: it is not a karpenter provider (exports: {})",
            ty.exports(engine)
                .map(|(n, _)| n.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        [version] if SUPPORTED_VERSIONS.contains(&version.as_str()) => Ok(version.clone()),
        [version] => bail!(
            "it implements karpenter:provider@{version}, which this host does not support (supported: {})",
            SUPPORTED_VERSIONS.join(", ")
        ),
        many => bail!(
            "it exports several contract versions ({}); export one",
            many.join(", ")
        ),
    }
}

/// The interfaces the component imports, e.g. `wasi:http/outgoing-handler@0.2.12`.
pub fn imports(component: &Component) -> Vec<String> {
    sorted(
        component
            .component_type()
            .imports(component.engine())
            .map(|(n, _)| n),
    )
}

/// The interfaces the component exports, e.g. `karpenter:provider/provider@0.1.1`.
pub fn exports(component: &Component) -> Vec<String> {
    sorted(
        component
            .component_type()
            .exports(component.engine())
            .map(|(n, _)| n),
    )
}

fn sorted<'a>(names: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut names: Vec<String> = names.map(str::to_string).collect();
    names.sort();
    names
}
