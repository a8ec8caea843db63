//! While a batch writes its NodeClaims, launches wait.
//!
//! A launch costs the API server several requests (the NodeClaim read
//! afresh, the NodeClass, the instance's Node on some clouds, the status,
//! an event), and registration as many again. Started while a batch of
//! 1,000 is still being created, they compete with the creates and slow
//! the whole batch; held until it is written, the batch lands sooner and
//! so does its last NodeClaim's launch. The wait is bounded, so a batch on
//! a struggling API server never stalls launches for long.

use std::time::Duration;
use tokio::sync::watch;

/// How long a launch waits at most for a batch to finish writing.
const MAX_WAIT: Duration = Duration::from_secs(15);

pub struct BatchWrites {
    writing: watch::Sender<bool>,
}

/// Held while a batch creates its NodeClaims.
pub struct Writing<'a>(&'a BatchWrites);

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        self.0.writing.send_replace(false);
    }
}

impl Default for BatchWrites {
    fn default() -> Self {
        BatchWrites {
            writing: watch::channel(false).0,
        }
    }
}

impl BatchWrites {
    pub fn start(&self) -> Writing<'_> {
        self.writing.send_replace(true);
        Writing(self)
    }

    /// Returns once no batch is writing, or after [`MAX_WAIT`].
    pub async fn settled(&self) {
        let mut rx = self.writing.subscribe();
        let _ = tokio::time::timeout(MAX_WAIT, rx.wait_for(|writing| !writing)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn launches_wait_for_the_batch_and_no_longer_than_the_bound() {
        let writes = BatchWrites::default();
        // Nothing writing: no wait.
        tokio::time::timeout(Duration::from_millis(1), writes.settled())
            .await
            .expect("no wait");

        let started = tokio::time::Instant::now();
        let writing = writes.start();
        let wait = async {
            writes.settled().await;
            started.elapsed()
        };
        let finish = async {
            tokio::time::sleep(Duration::from_secs(3)).await;
            drop(writing);
        };
        let (waited, ()) = tokio::join!(wait, finish);
        assert_eq!(waited, Duration::from_secs(3));

        let _stuck = writes.start();
        let started = tokio::time::Instant::now();
        writes.settled().await;
        assert_eq!(started.elapsed(), MAX_WAIT);
    }
}
