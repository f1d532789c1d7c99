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

/// The background services holding data a stop must not lose (the audit flusher, the limiter's
/// settlements, the event outbox): each, wrapped in [`Tracked`], counts as running until its own
/// shutdown steps have returned.
#[derive(Clone, Default)]
pub struct Finishing(Arc<(AtomicUsize, tokio::sync::Notify)>);

impl Finishing {
    /// Wraps `inner`, counted as running from now until its `start` returns.
    pub fn track<S: BackgroundService + Send + Sync + 'static>(&self, inner: S) -> Tracked<S> {
        self.0 .0.fetch_add(1, Ordering::AcqRel);
        Tracked { inner, finishing: self.clone() }
    }

    fn running(&self) -> usize {
        self.0 .0.load(Ordering::Acquire)
    }

    async fn all_done(&self) {
        loop {
            let notified = self.0 .1.notified();
            if self.running() == 0 {
                return;
            }
            notified.await;
        }
    }
}

/// A background service whose end [`Drain`] waits for.
pub struct Tracked<S> {
    inner: S,
    finishing: Finishing,
}

#[async_trait]
impl<S: BackgroundService + Send + Sync> BackgroundService for Tracked<S> {
    async fn start(&self, shutdown: ShutdownWatch) {
        self.inner.start(shutdown).await;
        self.finishing.0 .0.fetch_sub(1, Ordering::AcqRel);
        self.finishing.0 .1.notify_waiters();
    }
}

/// Ends the process once, after shutdown began, nothing is in flight and every tracked service
/// has finished its own shutdown (the audit flusher has written or spooled every row; a request
/// that came in meanwhile spools its row, the queue being closed). Pingora's grace period bounds
/// the wait.
pub struct Drain {
    pub finishing: Finishing,
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
        loop {
            self.finishing.all_done().await;
            while self.in_flight.count() > 0 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            // A moment for services that take no data with them (their sockets closing), then
            // look again: a request may have come in meanwhile.
            tokio::time::sleep(Duration::from_millis(100)).await;
            if self.in_flight.count() == 0 {
                break;
            }
        }
        log::info!("gw-proxy stopped: nothing in flight, audit rows, settlements and events written or spooled");
        std::process::exit(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Quick;

    #[async_trait]
    impl BackgroundService for Quick {
        async fn start(&self, _shutdown: ShutdownWatch) {}
    }

    #[tokio::test]
    async fn tracked_services_count_until_they_return() {
        let f = Finishing::default();
        let a = f.track(Quick);
        let b = f.track(Quick);
        assert_eq!(f.running(), 2);
        let (_tx, rx) = tokio::sync::watch::channel(false);
        a.start(rx.clone()).await;
        assert_eq!(f.running(), 1);
        b.start(rx).await;
        f.all_done().await;
        assert_eq!(f.running(), 0);
    }

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
