//! Narrow copies of Kubernetes objects the controller keeps many of in
//! memory, deserialized straight from the API server's JSON with only the
//! fields its decisions read.

pub mod node;
pub mod pod;
pub mod shared;

pub use node::Node;
pub use pod::{Pod, PodSpec};
pub use shared::Shared;

use std::collections::BTreeMap;

/// `kube::Resource` for a slim type of the core v1 group: the kind is the
/// type's name, and `metadata` its `ObjectMeta`.
macro_rules! core_v1_resource {
    ($t:ident, $scope:ident, $plural:literal) => {
        impl kube::Resource for $t {
            type DynamicType = ();
            type Scope = k8s_openapi::$scope;

            fn kind(_: &()) -> std::borrow::Cow<'_, str> {
                stringify!($t).into()
            }
            fn group(_: &()) -> std::borrow::Cow<'_, str> {
                "".into()
            }
            fn version(_: &()) -> std::borrow::Cow<'_, str> {
                "v1".into()
            }
            fn plural(_: &()) -> std::borrow::Cow<'_, str> {
                $plural.into()
            }
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}
use core_v1_resource;

/// Annotations as kept in memory: without kubectl's last-applied copy of
/// the whole object, and `None` when nothing else is left.
pub fn stored_annotations(
    annotations: Option<BTreeMap<String, String>>,
) -> Option<BTreeMap<String, String>> {
    let mut a = annotations?;
    a.remove("kubectl.kubernetes.io/last-applied-configuration");
    (!a.is_empty()).then_some(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_annotations_drop_kubectls_copy_and_keep_the_rest() {
        let last = "kubectl.kubernetes.io/last-applied-configuration".to_string();
        let only: BTreeMap<_, _> = [(last.clone(), "{}".to_string())].into();
        assert_eq!(stored_annotations(Some(only)), None);
        let both: BTreeMap<_, _> = [(last, "{}".into()), ("team".into(), "a".into())].into();
        let kept = stored_annotations(Some(both)).expect("team is kept");
        assert_eq!(kept.keys().collect::<Vec<_>>(), ["team"]);
        assert_eq!(stored_annotations(None), None);
    }
}
