//! `karpenter`: thin wiring of the subcommands; each lives in `cli/`.

use clap::Parser;

#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    no_huge_pages();
    #[cfg(feature = "mimalloc")]
    purge_freed_pages_at_once();
    let cli = karpenter::cli::Cli::parse();
    karpenter::cli::init_logging(&cli);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(karpenter::cli::run(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The heap is tens of thousands of small objects spread thin over the
/// allocator's arena. Backed by 2 MiB transparent huge pages (mimalloc asks
/// for them; some hosts give them unasked), every partly used region stays
/// resident whole, and the controller's RSS grows with them.
///
/// The setting is the process's, so it also covers the arena mapped before
/// `main`; a kernel without it refuses and nothing changes.
fn no_huge_pages() {
    #[cfg(target_os = "linux")]
    let _ = rustix::thread::disable_transparent_huge_pages(true);
}

/// `mi_option_purge_delay` in mimalloc.h (v3); libmimalloc-sys leaves option
/// numbers unexported and refers to the header.
#[cfg(feature = "mimalloc")]
const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// mimalloc hands freed pages back to the OS no sooner than a second after
/// they empty (`purge_delay`, 1,000 ms by default). The controller frees in
/// bursts (a disruption pass, a batch, a relist), and purging at once keeps
/// less of each burst resident.
///
/// Called first in `main`: the option is not thread-safe to set.
#[cfg(feature = "mimalloc")]
fn purge_freed_pages_at_once() {
    // SAFETY: sets a number mimalloc reads; no allocation is in flight on
    // another thread, as none has started.
    #[allow(unsafe_code)]
    unsafe {
        libmimalloc_sys::mi_option_set(PURGE_DELAY, 0)
    };
}

#[cfg(all(test, feature = "mimalloc"))]
mod tests {
    /// The number still names the purge delay: of mimalloc's options, only
    /// it defaults to 1,000 (ms).
    #[test]
    fn the_option_set_is_the_purge_delay() {
        #[allow(unsafe_code)]
        let default = unsafe { libmimalloc_sys::mi_option_get(super::PURGE_DELAY) };
        assert_eq!(default, 1000);
    }
}
