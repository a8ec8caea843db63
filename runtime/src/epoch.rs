//! The clock plugin CPU budgets are counted on: a thread that advances the
//! engines' epochs every [`TICK`] while any plugin call is under way, and is
//! parked while none is, so an idle controller does not wake 200 times a
//! second with nothing to count.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::Thread;
use std::time::Duration;
use wasmtime::Engine;

/// One epoch tick: the granularity of CPU deadlines.
pub const TICK: Duration = Duration::from_millis(5);

pub(super) struct EpochTicker(Arc<Shared>);

#[derive(Default)]
struct Shared {
    calls: AtomicUsize,
    stopped: AtomicBool,
    thread: OnceLock<Thread>,
    /// Ticks so far, counted before the engines' epochs advance.
    ticks: AtomicU64,
}

impl Shared {
    fn wake(&self) {
        if let Some(thread) = self.thread.get() {
            thread.unpark();
        }
    }
}

/// Keeps the epochs advancing for as long as it lives.
pub(super) struct Ticking(Arc<Shared>);

/// Reads how many ticks there have been.
#[derive(Clone)]
pub(super) struct Clock(Arc<Shared>);

impl Clock {
    /// Never behind the engines' epochs: an epoch callback always sees the
    /// tick that woke it.
    pub fn now(&self) -> u64 {
        self.0.ticks.load(Ordering::SeqCst)
    }
}

impl Drop for Ticking {
    fn drop(&mut self) {
        self.0.calls.fetch_sub(1, Ordering::SeqCst);
    }
}

impl EpochTicker {
    /// Starts the thread for these engines; it ends when the ticker is
    /// dropped.
    pub fn start(engine: &Engine, quick: Option<&Engine>) -> EpochTicker {
        let engines: Vec<_> = std::iter::once(engine)
            .chain(quick)
            .map(Engine::weak)
            .collect();
        Self::start_with(move || {
            for engine in engines.iter().filter_map(|e| e.upgrade()) {
                engine.increment_epoch();
            }
        })
    }

    fn start_with(tick: impl Fn() + Send + 'static) -> EpochTicker {
        let shared = Arc::new(Shared::default());
        let theirs = shared.clone();
        let spawned = std::thread::Builder::new()
            .name("wasm-epoch".into())
            .spawn(move || {
                while !theirs.stopped.load(Ordering::SeqCst) {
                    if theirs.calls.load(Ordering::SeqCst) == 0 {
                        // A call that starts meanwhile unparks first, and
                        // park then returns at once.
                        std::thread::park();
                        continue;
                    }
                    std::thread::sleep(TICK);
                    theirs.ticks.fetch_add(1, Ordering::SeqCst);
                    tick();
                }
            });
        match spawned {
            Ok(handle) => {
                let _ = shared.thread.set(handle.thread().clone());
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot start the epoch ticker: plugin CPU deadlines are off")
            }
        }
        EpochTicker(shared)
    }

    pub fn clock(&self) -> Clock {
        Clock(self.0.clone())
    }

    /// Advances the epochs from now until the guard drops: a call's first
    /// tick comes a whole [`TICK`] after it woke an idle ticker.
    pub fn ticking(&self) -> Ticking {
        if self.0.calls.fetch_add(1, Ordering::SeqCst) == 0 {
            self.0.wake();
        }
        Ticking(self.0.clone())
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.0.stopped.store(true, Ordering::SeqCst);
        self.0.wake();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_epochs_advance_only_while_a_call_is_under_way() {
        let ticks = Arc::new(AtomicUsize::new(0));
        let counted = ticks.clone();
        let ticker = EpochTicker::start_with(move || {
            counted.fetch_add(1, Ordering::SeqCst);
        });
        let count = |wait: u32| {
            std::thread::sleep(wait * TICK);
            ticks.load(Ordering::SeqCst)
        };
        assert_eq!(count(20), 0, "no call, no tick");
        let during = {
            let _a = ticker.ticking();
            let _b = ticker.ticking();
            count(20)
        };
        assert!(during >= 5, "{during} ticks in 20 ticks' time of calls");
        let settled = count(2);
        assert_eq!(count(20), settled, "no tick once the last call ended");
        let _c = ticker.ticking();
        assert!(count(20) > settled, "a new call wakes it");
        drop(_c);
        let counted = count(2);
        assert_eq!(
            ticker.clock().now() as usize,
            counted,
            "the clock counts every tick"
        );
    }
}
