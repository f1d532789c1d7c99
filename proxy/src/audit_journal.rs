//! The audit journal: every answered request's row, appended to a file in the process's spool
//! folder before the answer's last bytes go out, so a process killed with rows still queued for
//! Postgres (or in a batch being written) loses none of an answered request.
//!
//! The row travels on through the audit queue as before; the journal is only read after a crash.
//! Each row holds a [`Ticket`] on its journal file until the flusher has written it to Postgres
//! or to the spool; a file no longer appended to (past [`SEGMENT_BYTES`]) is removed when its
//! last ticket is gone. A process that finds journal files in a folder it opens (its own after a
//! restart, or one it adopts) replays them like spooled segments (`audit_spool`): a replay skips
//! rows already written, so rows written before the crash are not duplicated.
//!
//! One `write` per row, unsynced: the rows survive the process, not the machine (as the spool).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use gw_shared::audit::AuditEntry;

use crate::audit_spool::{frame, SpoolError, JOURNAL_SUFFIX};
use crate::logline::RateLimitedLog;
use crate::metrics::Metrics;

/// A file is no longer appended to past this size (a crash replays at most the files whose rows
/// are not all written yet).
const SEGMENT_BYTES: u64 = 4 * 1024 * 1024;

/// One journal file. Removed when the journal has moved past it and no row's ticket holds it.
struct Segment {
    path: PathBuf,
}

impl Drop for Segment {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_file(&self.path) {
            log::warn!("removing the audit journal file {}: {e}", self.path.display());
        }
    }
}

/// Held by a journaled row until it is written to Postgres or spooled: its file stays until then.
pub struct Ticket(#[allow(dead_code)] Arc<Segment>);

struct Current {
    segment: Arc<Segment>,
    file: File,
    len: u64,
}

pub struct Journal {
    dir: PathBuf,
    /// Longest body an audit row keeps (the rows journaled are the rows written).
    pub max_body: usize,
    state: Mutex<State>,
    metrics: Arc<Metrics>,
    log: RateLimitedLog,
}

struct State {
    current: Option<Current>,
    next_id: u64,
}

impl Journal {
    /// A journal in `dir`, the process's own spool folder (which it has locked, and whose old
    /// journal files `Spool::open` has already taken over).
    pub fn new(dir: &Path, max_body: usize, metrics: Arc<Metrics>) -> Journal {
        Journal {
            dir: dir.to_path_buf(),
            max_body,
            state: Mutex::new(State { current: None, next_id: 1 }),
            metrics,
            log: RateLimitedLog::new(module_path!(), std::time::Duration::from_secs(5)),
        }
    }

    /// [`Self::append`]; a failure (a full or broken disk) is counted and logged, and the row
    /// goes on through the queue without the journal's protection.
    pub fn keep(&self, entry: &AuditEntry) -> Option<Ticket> {
        match self.append(entry) {
            Ok(ticket) => Some(ticket),
            Err(e) => {
                self.metrics.audit_journal_failures.inc();
                self.log.error(|| format!("audit journal write failed ({e}): the row is queued unprotected"));
                None
            }
        }
    }

    /// Appends one row; its ticket keeps the file until the row is written elsewhere.
    pub fn append(&self, entry: &AuditEntry) -> Result<Ticket, SpoolError> {
        let frame = frame(std::slice::from_ref(entry))?;
        let mut st = self.state.lock().map_err(|_| std::io::Error::other("audit journal lock poisoned"))?;
        if st.current.as_ref().is_none_or(|c| c.len >= SEGMENT_BYTES) {
            st.current = None;
            st.current = Some(self.start(&mut st.next_id)?);
        }
        let Some(current) = st.current.as_mut() else { return Err(std::io::Error::other("no journal file").into()) };
        if let Err(e) = current.file.write_all(&frame) {
            // A partial frame may be on disk: never append after it (replay stops at a torn frame).
            st.current = None;
            return Err(e.into());
        }
        current.len += frame.len() as u64;
        Ok(Ticket(current.segment.clone()))
    }

    fn start(&self, next_id: &mut u64) -> Result<Current, SpoolError> {
        loop {
            let path = self.dir.join(format!("{:020}{JOURNAL_SUFFIX}", *next_id));
            *next_id += 1;
            match OpenOptions::new().create_new(true).append(true).open(&path) {
                Ok(file) => return Ok(Current { segment: Arc::new(Segment { path }), file, len: 0 }),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Every queued row is written or spooled (the flusher has stopped): the current file goes
    /// once its last ticket does.
    pub fn close(&self) {
        if let Ok(mut st) = self.state.lock() {
            st.current = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit_spool::Spool;
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
        let first = journal.append(&entry(1)).unwrap();
        let second = journal.append(&entry(2)).unwrap();
        assert_eq!(files(&d, JOURNAL_SUFFIX), 1);
        drop(first);
        drop(second);
        assert_eq!(files(&d, JOURNAL_SUFFIX), 1, "the file being appended to stays");
        let third = journal.append(&entry(3)).unwrap();
        journal.close();
        assert_eq!(files(&d, JOURNAL_SUFFIX), 1, "a row not yet written keeps its file");
        drop(third);
        assert_eq!(files(&d, JOURNAL_SUFFIX), 0);
    }

    #[test]
    fn a_full_file_is_left_for_a_new_one() {
        let d = dir();
        let journal = Journal::new(&d, 1024, Arc::new(Metrics::new().unwrap()));
        let mut held = Vec::new();
        let mut written = 0u64;
        while written < SEGMENT_BYTES {
            written += frame(&[entry(0)]).unwrap().len() as u64;
            held.push(journal.append(&entry(0)).unwrap());
        }
        held.push(journal.append(&entry(0)).unwrap());
        assert_eq!(files(&d, JOURNAL_SUFFIX), 2);
        held.clear();
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
                std::mem::forget(journal.append(&entry(n)).unwrap());
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
            let journal = Journal::new(&d, 1024, Arc::new(Metrics::new().unwrap()));
            std::mem::forget(journal.append(&entry(1)).unwrap());
            std::mem::forget(journal.append(&entry(2)).unwrap());
            std::mem::forget(journal);
        }
        let path = std::fs::read_dir(&d)
            .unwrap()
            .flatten()
            .find(|e| e.file_name().to_str().unwrap().ends_with(JOURNAL_SUFFIX))
            .unwrap()
            .path();
        let len = std::fs::metadata(&path).unwrap().len();
        std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(len - 3).unwrap();
        let spool = Spool::adopt(&d, metrics).unwrap();
        let taken = spool.take(100).unwrap().unwrap();
        assert_eq!(taken.entries.iter().map(|e| e.record.prompt_tokens).collect::<Vec<_>>(), [1]);
    }
}
