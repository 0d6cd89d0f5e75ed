//! Where a plugin's stderr goes: a tail that keeps the last bytes written
//! (for the fault report's "guest said", e.g. a panic message) and never
//! refuses a write. A plugin that writes a line per call runs as long as
//! it likes; nothing it writes can trap it or grow the host's memory.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamError};

/// The last `capacity` bytes a guest wrote.
#[derive(Debug, Clone)]
pub(crate) struct Tail {
    capacity: usize,
    bytes: Arc<Mutex<VecDeque<u8>>>,
}

/// The most a single write may hand over (a permit, not a cap on output).
const PERMIT: usize = 64 * 1024;

impl Tail {
    pub(crate) fn new(capacity: usize) -> Self {
        Self { capacity, bytes: Arc::default() }
    }

    fn push(&self, data: &[u8]) {
        let mut b = self.bytes.lock().unwrap_or_else(|p| p.into_inner());
        let data = &data[data.len().saturating_sub(self.capacity)..];
        let over = (b.len() + data.len()).saturating_sub(self.capacity);
        b.drain(..over);
        b.extend(data);
    }

    /// What was kept.
    pub(crate) fn contents(&self) -> Vec<u8> {
        self.bytes.lock().unwrap_or_else(|p| p.into_inner()).iter().copied().collect()
    }
}

#[wasmtime_wasi::async_trait]
impl OutputStream for Tail {
    fn write(&mut self, bytes: Bytes) -> Result<(), StreamError> {
        self.push(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> Result<(), StreamError> {
        Ok(())
    }

    fn check_write(&mut self) -> Result<usize, StreamError> {
        Ok(PERMIT)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for Tail {
    async fn ready(&mut self) {}
}

impl tokio::io::AsyncWrite for Tail {
    fn poll_write(self: Pin<&mut Self>, _cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        self.push(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl IsTerminal for Tail {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for Tail {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_keeps_the_last_bytes_and_never_refuses() {
        let mut t = Tail::new(8);
        for i in 0..1000u32 {
            t.write(Bytes::from(format!("{i}\n"))).unwrap();
            assert_eq!(t.check_write().unwrap(), PERMIT);
        }
        assert_eq!(String::from_utf8(t.contents()).unwrap(), "998\n999\n");
        t.write(Bytes::from(vec![b'x'; 100])).unwrap();
        assert_eq!(t.contents(), vec![b'x'; 8]);
    }
}
