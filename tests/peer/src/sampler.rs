//! The controller's memory and CPU from /proc, as the kernel counts them:
//! resident memory of its process tree sampled four times a second, and CPU
//! time of the tree (children that exited included).
//!
//! Memory is read two ways. RSS summed over the tree counts twice the pages
//! a parent and its child both map (the executable's, above all); PSS splits
//! each shared page among the processes that map it, so the tree's sum counts
//! it once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const PAGE: u64 = 4096;
const TICKS: f64 = 100.0;

pub struct Sampler {
    stop: Arc<AtomicBool>,
    samples: Arc<Mutex<Vec<Sample>>>,
    pid: u32,
    thread: Option<std::thread::JoinHandle<()>>,
}

#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct Usage {
    pub peak_rss_mb: f64,
    pub p95_rss_mb: f64,
    pub peak_pss_mb: f64,
    pub p95_pss_mb: f64,
    pub cpu_seconds: f64,
    /// Of `cpu_seconds`, what the controller's child processes used (ours
    /// compiles each plugin in one).
    pub children_cpu_seconds: f64,
}

/// The tree's memory at one instant, in bytes.
#[derive(Debug, Clone, Copy)]
struct Sample {
    rss: u64,
    pss: u64,
}

impl Sampler {
    pub fn start(pid: u32) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let samples = Arc::new(Mutex::new(Vec::new()));
        let (s, v) = (stop.clone(), samples.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                let pids = tree(pid);
                let rss: u64 = pids.iter().filter_map(|p| rss_bytes(*p)).sum();
                let pss: u64 = pids.iter().filter_map(|p| pss_bytes(*p)).sum();
                if rss > 0 {
                    v.lock().expect("samples").push(Sample { rss, pss });
                }
                std::thread::sleep(Duration::from_millis(250));
            }
        });
        Sampler {
            stop,
            samples,
            pid,
            thread: Some(thread),
        }
    }

    /// Call before the process exits: CPU time is read from the live tree.
    pub fn finish(mut self) -> Usage {
        let ticks: Vec<(u64, u64)> = tree(self.pid)
            .iter()
            .enumerate()
            .filter_map(|(i, p)| cpu_ticks(*p, i == 0))
            .collect();
        let cpu_seconds =
            ticks.iter().map(|(own, reaped)| own + reaped).sum::<u64>() as f64 / TICKS;
        let children_cpu_seconds = ticks
            .iter()
            .enumerate()
            .map(|(i, (own, reaped))| if i == 0 { *reaped } else { *own })
            .sum::<u64>() as f64
            / TICKS;
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let samples = self.samples.lock().expect("samples").clone();
        let (peak_rss_mb, p95_rss_mb) = peak_and_p95(samples.iter().map(|s| s.rss).collect());
        let (peak_pss_mb, p95_pss_mb) = peak_and_p95(samples.iter().map(|s| s.pss).collect());
        Usage {
            peak_rss_mb,
            p95_rss_mb,
            peak_pss_mb,
            p95_pss_mb,
            cpu_seconds,
            children_cpu_seconds,
        }
    }
}

/// The highest and the 95th percentile of byte counts, in MB.
fn peak_and_p95(mut bytes: Vec<u64>) -> (f64, f64) {
    bytes.sort_unstable();
    let mb = |b: u64| b as f64 / (1024.0 * 1024.0);
    let p95 = bytes
        .get(((bytes.len() as f64 * 0.95).ceil() as usize).saturating_sub(1))
        .copied()
        .unwrap_or(0);
    (mb(bytes.last().copied().unwrap_or(0)), mb(p95))
}

/// The process and its live descendants, the process first.
fn tree(root: u32) -> Vec<u32> {
    let mut parents: Vec<(u32, u32)> = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for entry in dir.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            if let Some(ppid) = stat_fields(pid).and_then(|f| f.get(1).and_then(|s| s.parse().ok()))
            {
                parents.push((pid, ppid));
            }
        }
    }
    let mut out = vec![root];
    let mut i = 0;
    while i < out.len() {
        let p = out[i];
        out.extend(parents.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    out
}

/// Fields of /proc/PID/stat after the command name: state is [0], ppid [1],
/// utime [11], stime [12], cutime [13], cstime [14].
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &text[text.rfind(')')? + 2..];
    Some(after.split_whitespace().map(str::to_string).collect())
}

/// A process's own CPU ticks, and those of its children it has reaped when
/// asked for them.
fn cpu_ticks(pid: u32, with_reaped_children: bool) -> Option<(u64, u64)> {
    let f = stat_fields(pid)?;
    let n = |i: usize| f.get(i).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0);
    let reaped = if with_reaped_children {
        n(13) + n(14)
    } else {
        0
    };
    Some((n(11) + n(12), reaped))
}

fn rss_bytes(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/statm")).ok()?;
    Some(text.split_whitespace().nth(1)?.parse::<u64>().ok()? * PAGE)
}

fn pss_bytes(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    let kib = text
        .lines()
        .find_map(|l| l.strip_prefix("Pss:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse::<u64>()
        .ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_proportional_share_is_at_most_its_resident_memory() {
        let pid = std::process::id();
        let pss = pss_bytes(pid).expect("smaps_rollup");
        let rss = rss_bytes(pid).expect("statm");
        assert!(pss > 0 && pss <= rss, "pss {pss} rss {rss}");
    }

    #[test]
    fn the_p95_of_twenty_samples_is_the_nineteenth() {
        let mb = 1024 * 1024;
        let (peak, p95) = peak_and_p95((1..=20).rev().map(|i| i * mb).collect());
        assert_eq!((peak, p95), (20.0, 19.0));
    }
}
