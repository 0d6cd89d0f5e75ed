//! Waiting on the async runtime from the loop's thread, with a deadline
//! that holds without the runtime. `Handle::block_on` with a Tokio timer
//! waits forever once the runtime is shutting down (its timers are no
//! longer driven): a pod that never exits on SIGTERM, a lease never handed
//! over. Here the work runs as a task and the loop's thread waits on a
//! plain channel with the standard library's clock: the answer, or `None`
//! at the deadline, or at once when the runtime drops the task unrun.

use std::future::Future;
use std::time::Duration;

/// `f`'s output, if it comes within `deadline`.
pub fn within<F>(rt: &tokio::runtime::Handle, deadline: Duration, f: F) -> Option<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    rt.spawn(async move {
        let _ = tx.send(f.await);
    });
    rx.recv_timeout(deadline).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deadline_holds_when_the_runtime_is_gone() {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let handle = rt.handle().clone();
        assert_eq!(within(&handle, Duration::from_secs(5), async { 7 }), Some(7));
        let t0 = std::time::Instant::now();
        let slow =
            within(&handle, Duration::from_millis(200), async { tokio::time::sleep(Duration::from_secs(60)).await });
        assert!(slow.is_none() && t0.elapsed() < Duration::from_secs(5));
        rt.shutdown_background();
        // The runtime is gone: no hang, whatever the future waits for.
        let t0 = std::time::Instant::now();
        let gone = within(&handle, Duration::from_secs(2), async { tokio::time::sleep(Duration::from_secs(60)).await });
        assert!(gone.is_none());
        assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    }
}
