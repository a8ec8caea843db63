//! Compiling a plugin to machine code, in this process or in a child.
//!
//! The controller compiles in a child process running its own executable
//! (`karpenter plugin compile`). Cranelift's code, its worker threads and its
//! allocations then never become resident in the long-lived process, which
//! otherwise keeps more after a start with an empty precompiled cache than
//! after one from the cache; in the chart (an emptyDir) every start is such
//! a start. A plugin that crashes or exhausts the compiler
//! takes the child down, not the controller.

use super::runtime::{engine_config, quick_engine_config};
use anyhow::Context;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use wasmtime::Engine;
use wasmtime::component::Component;

/// A compile that takes longer is abandoned and the plugin reported broken;
/// generous, since a JavaScript or Python plugin is tens of MB of code.
const CHILD_DEADLINE: Duration = Duration::from_secs(300);

#[derive(Debug, Clone, Default)]
pub enum Compiler {
    /// Cranelift in this process: short-lived commands.
    #[default]
    InProcess,
    /// `<executable> plugin compile`, the wasm on its stdin and the
    /// serialized component on its stdout.
    Child(PathBuf),
}

impl Compiler {
    /// A child running the current executable, which must be `karpenter`.
    pub fn current_executable() -> anyhow::Result<Self> {
        let exe = std::env::current_exe().context("locating the karpenter executable")?;
        Ok(Compiler::Child(exe))
    }
}

/// Which compiler: Winch's quick one, or Cranelift's optimizing one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tier {
    Quick,
    Optimized,
}

impl Tier {
    fn config(self) -> wasmtime::Config {
        match self {
            Tier::Quick => quick_engine_config(),
            Tier::Optimized => engine_config(),
        }
    }
}

/// A compiled component and, when it was compiled here, its serialized form
/// for the precompiled cache.
pub struct Compiled {
    pub component: Component,
    pub serialized: Option<Vec<u8>>,
}

/// `engine` must be built from `tier`'s configuration.
pub async fn compile(
    compiler: &Compiler,
    engine: &Engine,
    wasm: &[u8],
    tier: Tier,
) -> anyhow::Result<Compiled> {
    match compiler {
        Compiler::InProcess => {
            // Off the async threads: a large plugin takes seconds, and the
            // optimized compile runs while the quick code serves calls.
            let (engine, wasm) = (engine.clone(), wasm.to_vec());
            tokio::task::spawn_blocking(move || {
                let component = Component::new(&engine, &wasm)?;
                let serialized = component
                    .serialize()
                    .inspect_err(
                        |e| tracing::warn!(error = %e, "could not serialize compiled plugin"),
                    )
                    .ok();
                Ok(Compiled {
                    component,
                    serialized,
                })
            })
            .await
            .context("the compiler thread")?
        }
        Compiler::Child(exe) => {
            let serialized = in_child(exe, wasm, tier).await?;
            let component = super::precompiled::deserialize(engine, &serialized)
                .context("loading the child compiler's output")?;
            Ok(Compiled {
                component,
                serialized: Some(serialized),
            })
        }
    }
}

async fn in_child(exe: &Path, wasm: &[u8], tier: Tier) -> anyhow::Result<Vec<u8>> {
    let mut child = tokio::process::Command::new(exe)
        .args(["plugin", "compile"])
        .args((tier == Tier::Quick).then_some("--quick"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting the compiler {}", exe.display()))?;
    let mut stdin = child.stdin.take().context("the compiler's stdin")?;
    let wasm = wasm.to_vec();
    // Feed stdin while reading stdout, or a large plugin fills both pipes.
    let feed = tokio::spawn(async move {
        let written = stdin.write_all(&wasm).await;
        drop(stdin);
        written
    });
    let output = tokio::time::timeout(CHILD_DEADLINE, child.wait_with_output())
        .await
        .map_err(|_| anyhow::anyhow!("the compiler took longer than {CHILD_DEADLINE:?}"))?
        .context("waiting for the compiler")?;
    // A compiler that exits early closes its stdin: its status says why.
    let fed = feed.await.context("feeding the compiler")?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let message = stderr.trim().trim_start_matches("error: ");
        anyhow::bail!("{message} (compiler {})", output.status);
    }
    fed.context("writing the plugin to the compiler")?;
    Ok(output.stdout)
}

/// `karpenter plugin compile [--quick]`: the child's side.
pub fn compile_stdin_to_stdout(tier: Tier) -> anyhow::Result<()> {
    use std::io::{Read, Write};
    let mut wasm = Vec::new();
    std::io::stdin()
        .read_to_end(&mut wasm)
        .context("reading the plugin from stdin")?;
    let engine = Engine::new(&tier.config())?;
    let serialized = Component::new(&engine, &wasm)?.serialize()?;
    let mut out = std::io::stdout().lock();
    out.write_all(&serialized)
        .and_then(|()| out.flush())
        .context("writing the compiled plugin to stdout")
}
