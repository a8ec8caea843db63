//! The plugins that misbehave on purpose; the providers come built from
//! `karpenter-plugin-bundle`. Each set lands in a directory of its own, so a
//! registry opened on the providers loads no plugin broken on purpose.

use std::path::PathBuf;

fn main() {
    let root = PathBuf::from(karpenter_plugin_build::env("CARGO_MANIFEST_DIR")).join("../..");
    let out = PathBuf::from(karpenter_plugin_build::env("OUT_DIR")).join("test-plugins");
    karpenter_plugin_build::build(&root, &["misbehave", "broken"], &out);
}
