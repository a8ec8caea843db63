//! Batching of provisioning triggers: a window opens on the first trigger,
//! stays open while triggers keep arriving within `idle`, and closes at `max`
//! at the latest. One batch means one scheduling run for many pods.

use std::time::Duration;
use tokio::sync::broadcast::{Receiver, error::RecvError};
use tokio::time::{Instant, timeout_at};

#[derive(Debug, Clone, Copy)]
pub struct Window {
    pub idle: Duration,
    pub max: Duration,
}

impl Default for Window {
    fn default() -> Self {
        Window {
            idle: Duration::from_secs(1),
            max: Duration::from_secs(10),
        }
    }
}

/// Waits for the next batch to close. `None` when the triggers' sender is
/// gone. A `wake` deadline opens a window without a trigger (a periodic
/// recheck).
pub async fn next_batch(
    triggers: &mut Receiver<()>,
    window: Window,
    wake: Option<Instant>,
) -> Option<()> {
    // A lagged receiver missed triggers: that is a trigger too.
    match wake {
        Some(at) => {
            if let Ok(Err(RecvError::Closed)) = timeout_at(at, triggers.recv()).await {
                return None;
            }
        }
        None => {
            if let Err(RecvError::Closed) = triggers.recv().await {
                return None;
            }
        }
    }
    let closes = Instant::now() + window.max;
    loop {
        let idle = (Instant::now() + window.idle).min(closes);
        match timeout_at(idle, triggers.recv()).await {
            Ok(Err(RecvError::Closed)) => return None,
            Ok(_) if Instant::now() < closes => continue,
            _ => return Some(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::broadcast::channel;

    fn window() -> Window {
        Window {
            idle: Duration::from_secs(1),
            max: Duration::from_secs(10),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn closes_one_idle_period_after_the_last_trigger() {
        let (tx, mut rx) = channel(16);
        let start = Instant::now();
        tokio::spawn(async move {
            for _ in 0..3 {
                tx.send(()).expect("receiver alive");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            std::future::pending::<()>().await;
        });
        next_batch(&mut rx, window(), None).await.expect("a batch");
        // Triggers at 0, 0.5, 1.0 s: the window closes at 2.0 s.
        assert_eq!(start.elapsed(), Duration::from_secs(2));
    }

    #[tokio::test(start_paused = true)]
    async fn closes_at_max_under_a_steady_stream() {
        let (tx, mut rx) = channel(16);
        let start = Instant::now();
        tokio::spawn(async move {
            loop {
                let _ = tx.send(());
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        });
        next_batch(&mut rx, window(), None).await.expect("a batch");
        assert!(start.elapsed() <= Duration::from_millis(10_300));
        assert!(start.elapsed() >= Duration::from_secs(10));
    }

    #[tokio::test(start_paused = true)]
    async fn a_wake_deadline_opens_a_window_without_a_trigger() {
        let (_tx, mut rx) = channel::<()>(16);
        let start = Instant::now();
        next_batch(&mut rx, window(), Some(start + Duration::from_secs(5)))
            .await
            .expect("a batch");
        assert_eq!(start.elapsed(), Duration::from_secs(6));
    }
}
