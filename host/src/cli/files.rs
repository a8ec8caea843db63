//! Reading the files named on the command line, and the host's cache
//! directory.

use anyhow::Context;
use cap_std::ambient_authority;
use cap_std::fs::Dir;
use std::path::{Path, PathBuf};

/// The directory holding `path` as a capability, and the file's name in it.
pub fn open_parent(path: &Path) -> anyhow::Result<(Dir, String)> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path
        .file_name()
        .with_context(|| format!("{} names no file", path.display()))?
        .to_string_lossy()
        .into_owned();
    let dir = Dir::open_ambient_dir(&parent, ambient_authority())
        .with_context(|| format!("opening directory {}", parent.display()))?;
    Ok((dir, name))
}

pub fn read(path: &Path) -> anyhow::Result<Vec<u8>> {
    let (dir, name) = open_parent(path)?;
    dir.read(&name)
        .with_context(|| format!("reading {}", path.display()))
}

/// A plugin file's name (without `.wasm` or `.wasm.zst`) and its component,
/// decompressed when it is `.wasm.zst`.
pub fn read_plugin(path: &Path) -> anyhow::Result<(String, Vec<u8>)> {
    let bytes = read(path)?;
    let file = path
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    if let Some(name) = file.strip_suffix(".wasm.zst") {
        let wasm = karpenter_runtime::decompress_plugin(&bytes)
            .with_context(|| format!("decompressing {}", path.display()))?;
        return Ok((name.to_string(), wasm));
    }
    let name = file.strip_suffix(".wasm").unwrap_or(&file);
    Ok((
        if name.is_empty() { "plugin" } else { name }.to_string(),
        bytes,
    ))
}

pub fn read_to_string(path: &Path) -> anyhow::Result<String> {
    let (dir, name) = open_parent(path)?;
    dir.read_to_string(&name)
        .with_context(|| format!("reading {}", path.display()))
}

/// `$XDG_CACHE_HOME/karpenter-wasm` (or `~/.cache/karpenter-wasm`), created
/// if missing; None when there is no home to put it in.
pub fn cache_dir() -> Option<Dir> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    let path = base.join("karpenter-wasm");
    std::fs::create_dir_all(&path).ok()?;
    Dir::open_ambient_dir(&path, ambient_authority()).ok()
}

/// `<cache_dir>/precompiled`, where compiled plugins are kept across runs.
pub fn precompiled_dir() -> Option<Dir> {
    subdir(&cache_dir()?, "precompiled")
}

/// `<precompiled>/pulled`, where plugins pulled from registries are kept
/// by digest beside their compiled code.
pub fn pulled_dir(precompiled: Option<&Dir>) -> Option<Dir> {
    subdir(precompiled?, "pulled")
}

fn subdir(parent: &Dir, name: &str) -> Option<Dir> {
    parent.create_dir_all(name).ok()?;
    parent.open_dir(name).ok()
}
