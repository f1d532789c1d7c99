//! Bulk background work yields the core to requests. The audit flusher, the limiter's
//! settlements and the events outbox run on threads of their own; on a core they share with the
//! request worker (and, in the one-core cell, with PostgreSQL and Redis) an equal share let a
//! batch being hashed and encoded hold a request behind it for milliseconds, the c=1 tail. Work
//! someone waits on keeps its priority: the cache writer (the next identical request looks for
//! its entry), the invalidation listener (a revoked key) and the health checks. Three nice levels below the worker halves their weight: they still
//! get about a third of a contended core, far more than they need, but a request that becomes
//! ready preempts them.

/// How many nice levels background threads sit below the process.
const BELOW: i32 = 3;

/// Lowers the calling thread's priority (on Linux `setpriority` with no pid applies to the calling
/// thread alone). A failure leaves it as it was: only latency is at stake.
pub fn background_thread() {
    let Ok(now) = rustix::process::getpriority_process(None) else { return };
    let lower = (now + BELOW).min(19);
    if let Err(e) = rustix::process::setpriority_process(None, lower) {
        log::debug!("background thread priority unchanged: {e}");
    }
}

/// Puts the calling thread at the lowest priority there is (nice 19): guardrail scans too heavy
/// for a request worker (`crate::scan_pool`) get what the workers leave of a contended core.
pub fn scan_thread() {
    if let Err(e) = rustix::process::setpriority_process(None, 19) {
        log::debug!("scan thread priority unchanged: {e}");
    }
}
