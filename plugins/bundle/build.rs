use std::path::PathBuf;

fn main() {
    let root = PathBuf::from(karpenter_plugin_build::env("CARGO_MANIFEST_DIR")).join("../..");
    let out = PathBuf::from(karpenter_plugin_build::env("OUT_DIR")).join("plugins");
    karpenter_plugin_build::build(&root, &["kwok", "azure", "nebius"], &out);
}
