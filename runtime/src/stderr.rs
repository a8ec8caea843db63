//! A plugin's stderr: where a Rust panic's message, a Python traceback or a
//! JavaScript exception lands. The host keeps the last bytes written during
//! a call, bounded, and never refuses a write: a guest that floods stderr
//! loses its oldest output, not its call.

use bytes::Bytes;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

/// What a call's stderr keeps: the end of a traceback is its cause.
pub const KEPT_BYTES: usize = 8 << 10;

/// One instance's stderr, shared by the streams the guest opens on it.
#[derive(Clone, Default)]
pub struct GuestStderr {
    tail: Arc<Mutex<Tail>>,
}

#[derive(Default)]
struct Tail {
    bytes: Vec<u8>,
    /// Bytes written and no longer kept.
    dropped: usize,
}

impl GuestStderr {
    fn append(&self, mut data: &[u8]) {
        let mut t = self.tail.lock().unwrap_or_else(|e| e.into_inner());
        if data.len() > KEPT_BYTES {
            t.dropped += data.len() - KEPT_BYTES;
            data = &data[data.len() - KEPT_BYTES..];
        }
        let over = (t.bytes.len() + data.len()).saturating_sub(KEPT_BYTES);
        if over > 0 {
            t.bytes.drain(..over);
            t.dropped += over;
        }
        t.bytes.extend_from_slice(data);
    }

    /// What was written since the last `take`, as text: the kept tail,
    /// prefixed by how much came before it.
    pub fn take(&self) -> Option<String> {
        let mut t = self.tail.lock().unwrap_or_else(|e| e.into_inner());
        let tail = std::mem::take(&mut *t);
        let text = String::from_utf8_lossy(&tail.bytes);
        let text = text.trim();
        if text.is_empty() {
            return None;
        }
        Some(match tail.dropped {
            0 => text.to_string(),
            n => format!("[{n} earlier bytes dropped] {text}"),
        })
    }
}

impl IsTerminal for GuestStderr {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for GuestStderr {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl OutputStream for GuestStderr {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.append(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(KEPT_BYTES)
    }
}

impl Pollable for GuestStderr {
    fn ready<'a, 'b>(&'a mut self) -> Pin<Box<dyn Future<Output = ()> + Send + 'b>>
    where
        'a: 'b,
        Self: 'b,
    {
        Box::pin(std::future::ready(()))
    }
}

impl tokio::io::AsyncWrite for GuestStderr {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.append(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// The stderr text for an error message: its lines joined, without the
/// hints a runtime adds for a developer at a terminal.
pub fn for_error(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("note: run with `RUST_BACKTRACE=1`"))
        .collect::<Vec<_>>()
        .join(" | ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_last_bytes_and_says_how_many_went() {
        let s = GuestStderr::default();
        s.append(&vec![b'a'; KEPT_BYTES]);
        s.append(b"the cause");
        let text = s.take().expect("text");
        assert!(text.starts_with("[9 earlier bytes dropped] "), "{text}");
        assert!(text.ends_with("the cause"));
        assert_eq!(s.take(), None, "taken");
        s.append(&vec![b'b'; 3 * KEPT_BYTES]);
        let text = s.take().expect("text");
        assert!(
            text.starts_with(&format!("[{} earlier bytes dropped]", 2 * KEPT_BYTES)),
            "{}",
            &text[..40]
        );
    }

    #[test]
    fn an_error_gets_the_lines_without_terminal_hints() {
        let panic = "thread '<unnamed>' panicked at src/lib.rs:171:24:\nboom\nnote: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n";
        assert_eq!(
            for_error(panic),
            "thread '<unnamed>' panicked at src/lib.rs:171:24: | boom"
        );
    }
}
