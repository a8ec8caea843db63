//! Builds the workspace's plugins for wasm32-wasip2 with the `plugin`
//! profile from a build script, as `make plugins` does and into the same
//! target directory, so either finds the other's build fresh. A nested cargo
//! in another profile and target locks other directories than the build
//! that runs the script, so the two do not wait on each other.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Builds the plugins `set` (short names: `kwok` for `karpenter-plugin-kwok`)
/// in one cargo invocation and copies each to `out/<name>.wasm`.
///
/// Build a set the way `make` builds it (`kwok azure nebius` together): the
/// same set resolves the same features, so neither build undoes the other's.
pub fn build(workspace_root: &Path, set: &[&str], out: &Path) {
    for dir in ["plugins", "wit", "vocabulary", "Cargo.lock", "Cargo.toml"] {
        println!(
            "cargo::rerun-if-changed={}",
            workspace_root.join(dir).display()
        );
    }
    println!("cargo::rerun-if-env-changed=CARGO_TARGET_DIR");
    let target = target_dir(workspace_root, Path::new(&env("OUT_DIR")));
    std::fs::create_dir_all(out).unwrap_or_else(|e| fail(&format!("{}: {e}", out.display())));
    let mut cargo = Command::new(env("CARGO"));
    cargo
        .current_dir(workspace_root)
        .args(["build", "--target", "wasm32-wasip2", "--profile", "plugin"])
        .env("CARGO_TARGET_DIR", &target)
        // Flags and wrappers meant for the outer build (host flags, clippy's
        // driver) would change these artifacts and rebuild them each time.
        // RUSTFLAGS stays: `make plugins` sees it too, so both build alike.
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("CLIPPY_ARGS");
    for p in set {
        cargo.args(["-p", &format!("karpenter-plugin-{p}")]);
    }
    let status = cargo
        .status()
        .unwrap_or_else(|e| fail(&format!("running cargo: {e}")));
    if !status.success() {
        fail(&format!(
            "building the plugins {set:?} for wasm32-wasip2 failed (is the target installed? `rustup target add wasm32-wasip2`)"
        ));
    }
    for p in set {
        let built = target.join(format!("wasm32-wasip2/plugin/karpenter_plugin_{p}.wasm"));
        std::fs::copy(&built, out.join(format!("{p}.wasm")))
            .unwrap_or_else(|e| fail(&format!("{}: {e}", built.display())));
    }
}

/// The target directory of the build running the script: `CARGO_TARGET_DIR`,
/// or the ancestor of `OUT_DIR` that cargo marked as one.
fn target_dir(root: &Path, out: &Path) -> PathBuf {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        let dir = PathBuf::from(dir);
        return if dir.is_absolute() {
            dir
        } else {
            root.join(dir)
        };
    }
    out.ancestors()
        .find(|d| d.join("CACHEDIR.TAG").is_file())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| root.join("target"))
}

/// A variable cargo sets for every build script.
pub fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| fail(&format!("{name} is not set")))
}

fn fail(msg: &str) -> ! {
    eprintln!("error: {msg}");
    std::process::exit(1)
}
