//! Stopping without dropping anything: requests in flight are counted, and a stopping process
//! (SIGTERM, or SIGQUIT after handing its listening sockets to a new process) ends as soon as
//! they have finished and the audit flusher has written or spooled their rows, at the latest
//! after `proxy.shutdown_grace_secs` (Pingora's grace period, which it would otherwise sleep
//! whole).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use tokio::sync::watch;

/// Requests in flight in this process.
#[derive(Clone, Default)]
pub struct InFlight(Arc<AtomicUsize>);

/// One request in flight, until dropped (with its context, whatever way the request ended).
pub struct Guard(Arc<AtomicUsize>);

impl InFlight {
    pub fn enter(&self) -> Guard {
        self.0.fetch_add(1, Ordering::AcqRel);
        Guard(self.0.clone())
    }

    pub fn count(&self) -> usize {
        self.0.load(Ordering::Acquire)
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Set once the process is told to stop or to hand its sockets over: from then on every answer
/// says `Connection: close`, so clients stop reusing their connections to it before it stops
/// reading them (a request sent on an idle connection as the process drops it would fail).
#[derive(Clone, Default)]
pub struct Closing(Arc<std::sync::atomic::AtomicBool>);

impl Closing {
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    /// Watches the server's phases (on a thread of its own: the runtimes are not up yet).
    pub fn watch(&self, mut phases: tokio::sync::broadcast::Receiver<pingora::server::ExecutionPhase>) {
        use pingora::server::ExecutionPhase as P;
        let flag = self.0.clone();
        let spawned = std::thread::Builder::new().name("gw-phases".into()).spawn(move || loop {
            match phases.blocking_recv() {
                Ok(P::GracefulUpgradeTransferringFds | P::GracefulUpgradeCloseTimeout | P::GracefulTerminate)
                | Ok(P::ShutdownStarted) => flag.store(true, Ordering::Release),
                Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            }
        });
        if let Err(e) = spawned {
            log::warn!("cannot watch the server's phases ({e}): connections are not closed ahead of a stop");
        }
    }
}

/// Set by the audit flusher once, after shutdown began, nothing is in flight and every row is
/// written or spooled.
pub fn flushed_signal() -> (watch::Sender<bool>, watch::Receiver<bool>) {
    watch::channel(false)
}

/// Ends the process once the flusher says everything is flushed after shutdown began (and no
/// request came in meanwhile: its row goes to the spool, since the queue is closed).
pub struct Drain {
    pub flushed: watch::Receiver<bool>,
    pub in_flight: InFlight,
}

#[async_trait]
impl BackgroundService for Drain {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        while !*shutdown.borrow() {
            if shutdown.changed().await.is_err() {
                return;
            }
        }
        let mut flushed = self.flushed.clone();
        while !*flushed.borrow() {
            if flushed.changed().await.is_err() {
                return;
            }
        }
        while self.in_flight.count() > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // The other services' own shutdown steps (leaving the limiter's replica set) started
        // with the signal: a moment for them, then the end.
        tokio::time::sleep(Duration::from_millis(200)).await;
        log::info!("gw-proxy stopped: nothing in flight, every audit row written or spooled");
        std::process::exit(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_counts_until_its_guard_is_dropped() {
        let f = InFlight::default();
        let a = f.enter();
        let b = f.enter();
        assert_eq!(f.count(), 2);
        drop(a);
        assert_eq!(f.count(), 1);
        drop(b);
        assert_eq!(f.count(), 0);
    }
}
