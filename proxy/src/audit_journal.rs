//! The audit journal: every answered request's row, appended to a file in the process's spool
//! folder before the answer's last bytes go out, so a process killed with rows still queued for
//! Postgres (or in a batch being written) loses none of an answered request.
//!
//! The row travels on through the audit queue as before; the journal is only read after a crash.
//! Each row holds a [`Ticket`] on its journal file until the flusher has written it to Postgres
//! or to the spool and releases it; a file no longer appended to is removed when its last ticket
//! is released. A ticket dropped without release (its row neither written nor spooled: a full
//! spool, a task that died) keeps the file, for the next process on the folder to replay. A process that finds journal files in a folder it opens (its own after a
//! restart, or one it adopts) replays them like spooled segments (`audit_spool`): a replay skips
//! rows already written, so rows written before the crash are not duplicated.
//!
//! One `write` per row, unsynced: the rows survive the process, not the machine (as the spool).

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use gw_shared::audit::AuditEntry;

use crate::audit_spool::{frame, SpoolError, JOURNAL_SUFFIX};
use crate::logline::RateLimitedLog;
use crate::metrics::Metrics;

/// A journal file's size (a crash replays at most the files whose rows are not all written yet).
/// Larger when rows may be larger (bodies kept in rows, JSON-escaped at worst six bytes a byte).
fn segment_bytes(max_body: usize) -> usize {
    (4 << 20).max(max_body.saturating_mul(12).saturating_add(1 << 20))
}

/// One journal file. Removed when the journal has moved past it and every row's ticket on it was
/// released.
struct Segment {
    path: PathBuf,
    /// A ticket was dropped without release: a row in the file may be nowhere else.
    keep: AtomicBool,
}

impl Drop for Segment {
    fn drop(&mut self) {
        if self.keep.load(Ordering::Relaxed) {
            log::warn!("keeping the audit journal file {}: some of its rows were not written", self.path.display());
            return;
        }
        if let Err(e) = std::fs::remove_file(&self.path) {
            log::warn!("removing the audit journal file {}: {e}", self.path.display());
        }
    }
}

/// Held by a journaled row until it is written to Postgres or spooled ([`Ticket::release`]): its
/// file stays until then, and for good if the ticket is dropped instead.
pub struct Ticket(Option<Arc<Segment>>);

impl Ticket {
    /// The row is in Postgres or the spool: the journal's copy is no longer needed.
    pub fn release(mut self) {
        self.0 = None;
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if let Some(segment) = self.0.take() {
            segment.keep.store(true, Ordering::Relaxed);
        }
    }
}

/// The file being appended to: allocated to its full size when started, so a row's write moves
/// neither the file's size nor its allocation (no filesystem journal transaction per row).
struct Current {
    segment: Arc<Segment>,
    file: File,
    len: usize,
}

pub struct Journal {
    dir: PathBuf,
    /// Longest body an audit row keeps (the rows journaled are the rows written).
    pub max_body: usize,
    segment_bytes: usize,
    state: Mutex<State>,
    metrics: Arc<Metrics>,
    log: RateLimitedLog,
}

struct State {
    current: Option<Current>,
    next_id: u64,
    /// The flusher has stopped: rows go straight to the spool, the journal takes no more.
    closed: bool,
}

impl Journal {
    /// A journal in `dir`, the process's own spool folder (which it has locked, and whose old
    /// journal files `Spool::open` has already taken over).
    pub fn new(dir: &Path, max_body: usize, metrics: Arc<Metrics>) -> Journal {
        Journal {
            dir: dir.to_path_buf(),
            max_body,
            segment_bytes: segment_bytes(max_body),
            state: Mutex::new(State { current: None, next_id: 1, closed: false }),
            metrics,
            log: RateLimitedLog::new(module_path!(), std::time::Duration::from_secs(5)),
        }
    }

    /// [`Self::append`]; a failure (a full or broken disk) is counted and logged, and the row
    /// goes on through the queue without the journal's protection.
    pub fn keep(&self, entry: &AuditEntry) -> Option<Ticket> {
        match self.append(entry) {
            Ok(ticket) => ticket,
            Err(e) => {
                self.metrics.audit_journal_failures.inc();
                self.log.error(|| format!("audit journal write failed ({e}): the row is queued unprotected"));
                None
            }
        }
    }

    /// Appends one row; its ticket keeps the file until the row is written elsewhere. `None` once
    /// the journal is closed.
    pub fn append(&self, entry: &AuditEntry) -> Result<Option<Ticket>, SpoolError> {
        let frame = frame(std::slice::from_ref(entry))?;
        if frame.len() > self.segment_bytes {
            return Err(std::io::Error::other("an audit row larger than a journal file").into());
        }
        let mut st = self.state.lock().map_err(|_| std::io::Error::other("audit journal lock poisoned"))?;
        if st.closed {
            return Ok(None);
        }
        if st.current.as_ref().is_none_or(|c| c.len + frame.len() > self.segment_bytes) {
            st.current = None;
            st.current = Some(self.start(&mut st.next_id)?);
        }
        let Some(current) = st.current.as_mut() else { return Err(std::io::Error::other("no journal file").into()) };
        if let Err(e) = current.file.write_all_at(&frame, current.len as u64) {
            // A partial frame may be on disk: never append after it (replay stops at a torn frame).
            st.current = None;
            return Err(e.into());
        }
        current.len += frame.len();
        Ok(Some(Ticket(Some(current.segment.clone()))))
    }

    fn start(&self, next_id: &mut u64) -> Result<Current, SpoolError> {
        loop {
            let path = self.dir.join(format!("{:020}{JOURNAL_SUFFIX}", *next_id));
            *next_id += 1;
            let file = match OpenOptions::new().create_new(true).write(true).open(&path) {
                Ok(file) => file,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e.into()),
            };
            let segment = Arc::new(Segment { path, keep: AtomicBool::new(false) });
            let size = self.segment_bytes as u64;
            if rustix::fs::fallocate(&file, rustix::fs::FallocateFlags::empty(), 0, size).is_err() {
                file.set_len(size)?; // a filesystem without fallocate: a sparse file
            }
            return Ok(Current { segment, file, len: 0 });
        }
    }

    /// Every queued row is written or spooled (the flusher has stopped): the current file goes
    /// once its last ticket does.
    pub fn close(&self) {
        if let Ok(mut st) = self.state.lock() {
            st.current = None;
            st.closed = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit_spool::{used_length, Spool};
    use crate::metrics::Metrics;

    fn entry(n: i32) -> AuditEntry {
        let record = gw_shared::audit::AuditRecord { id: uuid::Uuid::now_v7(), prompt_tokens: n, ..Default::default() };
        AuditEntry { record, user_agent: None }
    }

    fn dir() -> PathBuf {
        let d = std::env::temp_dir().join(format!("gw-journal-test-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn files(dir: &Path, suffix: &str) -> usize {
        std::fs::read_dir(dir).unwrap().flatten().filter(|e| e.file_name().to_str().unwrap().ends_with(suffix)).count()
    }

    #[test]
    fn a_file_goes_once_the_journal_moved_past_it_and_its_rows_are_written() {
        let d = dir();
        let journal = Journal::new(&d, 1024, Arc::new(Metrics::new().unwrap()));
        let first = journal.append(&entry(1)).unwrap().unwrap();
        let second = journal.append(&entry(2)).unwrap().unwrap();
        assert_eq!(files(&d, JOURNAL_SUFFIX), 1);
        first.release();
        second.release();
        assert_eq!(files(&d, JOURNAL_SUFFIX), 1, "the file being appended to stays");
        let third = journal.append(&entry(3)).unwrap().unwrap();
        journal.close();
        assert_eq!(files(&d, JOURNAL_SUFFIX), 1, "a row not yet written keeps its file");
        third.release();
        assert_eq!(files(&d, JOURNAL_SUFFIX), 0);
        assert!(journal.append(&entry(4)).unwrap().is_none(), "a closed journal takes no more");
        assert_eq!(files(&d, JOURNAL_SUFFIX), 0);
    }

    #[test]
    fn a_ticket_dropped_without_release_keeps_its_file() {
        let d = dir();
        let journal = Journal::new(&d, 1024, Arc::new(Metrics::new().unwrap()));
        let written = journal.append(&entry(1)).unwrap().unwrap();
        let lost = journal.append(&entry(2)).unwrap().unwrap();
        written.release();
        drop(lost); // a full spool refused it: the journal holds the only copy
        journal.close();
        assert_eq!(files(&d, JOURNAL_SUFFIX), 1);
    }

    #[test]
    fn a_full_file_is_left_for_a_new_one() {
        let d = dir();
        let journal = Journal::new(&d, 1024, Arc::new(Metrics::new().unwrap()));
        let mut held = Vec::new();
        let mut written = 0;
        let size = frame(&[entry(0)]).unwrap().len();
        while written + size <= segment_bytes(1024) {
            written += size;
            held.push(journal.append(&entry(0)).unwrap().unwrap());
        }
        assert_eq!(files(&d, JOURNAL_SUFFIX), 1);
        held.push(journal.append(&entry(0)).unwrap().unwrap());
        assert_eq!(files(&d, JOURNAL_SUFFIX), 2);
        held.into_iter().for_each(Ticket::release);
        assert_eq!(files(&d, JOURNAL_SUFFIX), 1, "the full file went with its last row");
    }

    #[test]
    fn a_dead_process_s_journal_is_replayed_after_its_spool() {
        let d = dir();
        let metrics = Arc::new(Metrics::new().unwrap());
        {
            let spool = Spool::open(&d, u64::MAX, metrics.clone()).unwrap();
            spool.append(&[entry(1)]).unwrap();
            let journal = Journal::new(&d, 1024, Arc::new(Metrics::new().unwrap()));
            for n in 2..=4 {
                // The process dies with the rows queued: tickets and files are never let go.
                std::mem::forget(journal.append(&entry(n)).unwrap().unwrap());
            }
            std::mem::forget(journal);
        }
        let spool = Spool::adopt(&d, metrics).unwrap();
        assert_eq!(files(&d, JOURNAL_SUFFIX), 0, "the journal became segments");
        let mut replayed = Vec::new();
        while let Some(taken) = spool.take(100).unwrap() {
            replayed.extend(taken.entries.iter().map(|e| e.record.prompt_tokens));
            spool.done(&taken);
        }
        assert_eq!(replayed, [1, 2, 3, 4]);
        assert!(spool.is_empty());
    }

    #[test]
    fn a_torn_last_row_is_dropped_and_the_rest_replayed() {
        let d = dir();
        let metrics = Arc::new(Metrics::new().unwrap());
        {
            let journal = Journal::new(&d, 1024, metrics.clone());
            std::mem::forget(journal.append(&entry(1)).unwrap().unwrap());
            std::mem::forget(journal.append(&entry(2)).unwrap().unwrap());
            std::mem::forget(journal);
        }
        let path = std::fs::read_dir(&d)
            .unwrap()
            .flatten()
            .find(|e| e.file_name().to_str().unwrap().ends_with(JOURNAL_SUFFIX))
            .unwrap()
            .path();
        // The second row's last byte never made it (the process died copying it).
        let mut bytes = std::fs::read(&path).unwrap();
        let end = used_length(&bytes);
        assert_eq!(end, 2 * frame(&[entry(1)]).unwrap().len());
        bytes[end - 1] ^= 0xff;
        std::fs::write(&path, &bytes).unwrap();
        let spool = Spool::adopt(&d, metrics).unwrap();
        let taken = spool.take(100).unwrap().unwrap();
        assert_eq!(taken.entries.iter().map(|e| e.record.prompt_tokens).collect::<Vec<_>>(), [1]);
    }

    #[test]
    fn the_used_length_ends_at_the_zeros() {
        let one = frame(&[entry(1)]).unwrap();
        let mut bytes = one.clone();
        bytes.extend_from_slice(&one);
        bytes.extend_from_slice(&[0u8; 100]);
        assert_eq!(used_length(&bytes), 2 * one.len());
        assert_eq!(used_length(&bytes[..one.len() + 3]), one.len(), "a header past the end is not a frame");
        assert_eq!(used_length(&[]), 0);
    }
}
