//! A catalog that crosses as tables (contract 0.1.4) reaches the engine as
//! the same instance types the plugin lists: the controller reads the
//! tables in place, so nothing of the listed path checks it for free.

use crate::common;
use karpenter_controller::records;
use karpenter_controller::snapshot::instance_types::catalog;
use karpenter_runtime::{InstanceTypes, PluginConfig, wit};

#[tokio::test]
async fn kwok_tables_reach_the_engine_as_its_listed_types() {
    let plugin = common::runtime()
        .load(
            "kwok",
            &common::plugin_wasm("kwok"),
            PluginConfig::default(),
        )
        .await
        .expect("kwok loads");
    let pool = records::bare_node_pool(
        "default",
        wit::NodeClassRef {
            group: "karpenter.kwok.sh".into(),
            kind: "KWOKNodeClass".into(),
            name: "default".into(),
        },
    );
    let class = wit::NodeClass {
        name: "default".into(),
        generation: 1,
        json: "{}".into(),
    };
    let types = plugin
        .get_instance_types(&pool, &class)
        .await
        .expect("get-instance-types");
    assert!(matches!(types, InstanceTypes::Table(_)), "{types:?}");
    let from_table = catalog(types).expect("tables convert");
    let listed = plugin
        .listed_instance_types(&pool, &class)
        .await
        .expect("listed");
    let from_listed = catalog(InstanceTypes::Listed(listed)).expect("listed converts");
    assert_eq!(from_table.len(), 144);
    assert_eq!(from_table, from_listed);
}
