//! The audit spool: an append-only local log of audit batches Postgres could not take (down,
//! slow, or the queue full), replayed in order once it takes them again.
//!
//! A proxy's `audit_spool_dir` holds one folder per running process (`0`, `1`, ...): a process
//! claims the first whose lock is free, so a new process started beside the old one (a graceful
//! upgrade) spools apart from it, and each process adopts the folders no process holds any more
//! (a process stopped, crashed or upgraded away) and replays them ([`claim`], [`orphans`]).
//!
//! The folder also holds the process's audit journal (`*.journal`, see `audit_journal`): every
//! answered request's row, written before the answer's last bytes. A folder opened by a process
//! that did not write it (a restart, an adoption) takes its journal files over as segments to
//! replay: the process that wrote them died before all their rows were written.
//!
//! Segment files `NNNNNNNNNNNNNNNNNNNN.spool` in one folder, locked by one proxy process. Each
//! holds frames `[length u32 LE][crc32 u32 LE][JSON array of audit entries]`. A frame is written
//! whole with one `write` under the spool's lock, so a process crash leaves at most a torn last
//! frame, which replay recognizes (length or checksum) and discards. Replay is idempotent on the
//! request id (the writer skips rows already present), so replaying a frame twice after a crash
//! never duplicates a row. Writes are not fsynced: a process crash loses nothing written here,
//! a machine crash may lose what the kernel had not yet flushed.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use gw_shared::audit::AuditEntry;

use crate::metrics::Metrics;

/// A segment is closed and a new one started past this size.
const SEGMENT_BYTES: u64 = 64 * 1024 * 1024;
const HEADER: u64 = 8;
/// Largest frame accepted back (a corrupt length must not make replay allocate gigabytes).
const MAX_FRAME: u64 = 256 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    #[error("audit spool {0} is held by another process")]
    Busy(String),
    #[error("audit spool full ({0} bytes)")]
    Full(u64),
    #[error("audit spool: {0}")]
    Io(#[from] std::io::Error),
    #[error("audit spool: {0}")]
    Encode(#[from] serde_json::Error),
}

struct Segment {
    id: u64,
    path: PathBuf,
    /// Bytes written (whole frames only).
    len: u64,
    /// Bytes already replayed.
    read: u64,
}

struct State {
    segments: VecDeque<Segment>,
    /// The newest segment, open for appending (always `segments.back()`).
    writer: Option<File>,
    next_id: u64,
    /// Bytes written and not yet replayed, over every segment.
    pending: u64,
    records: u64,
}

pub struct Spool {
    dir: PathBuf,
    max_bytes: u64,
    state: Mutex<State>,
    metrics: Arc<Metrics>,
    /// Whether this is the process's own spool (it sets the spool gauge; an adopted one does not).
    own: bool,
    /// Held for the process's lifetime: one proxy per spool folder.
    _lock: File,
}

/// Folders a spool directory may hold at most (processes at once on one directory).
const MAX_INSTANCES: usize = 16;

/// Claims the first of `root`'s instance folders (`root/0`, `root/1`, ...) no process holds.
pub fn claim(root: &Path, max_bytes: u64, metrics: Arc<Metrics>) -> Result<Spool, SpoolError> {
    std::fs::create_dir_all(root)?;
    for n in 0..MAX_INSTANCES {
        match Spool::open(&root.join(n.to_string()), max_bytes, metrics.clone()) {
            Err(SpoolError::Busy(_)) => continue,
            other => return other,
        }
    }
    Err(SpoolError::Busy(format!("{} (all {MAX_INSTANCES} instance folders)", root.display())))
}

/// Folders under `root` no process holds that still hold segments: `root` itself (where a
/// version before instance folders spooled) and its instance folders other than `own`.
pub fn orphans(root: &Path, own: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut candidates = vec![root.to_path_buf()];
    if let Ok(entries) = std::fs::read_dir(root) {
        for e in entries.flatten() {
            let numbered = e.file_name().to_str().is_some_and(|n| n.parse::<usize>().is_ok());
            if numbered && e.path() != own && e.path().is_dir() {
                candidates.push(e.path());
            }
        }
    }
    for dir in candidates {
        let has_segments = std::fs::read_dir(&dir)
            .map(|it| {
                it.flatten().any(|e| {
                    e.file_name().to_str().is_some_and(|n| n.ends_with(".spool") || n.ends_with(JOURNAL_SUFFIX))
                })
            })
            .unwrap_or(false);
        if !has_segments {
            continue;
        }
        // Free when its lock can be taken now (released at once: `Spool::adopt` takes it again).
        let free = OpenOptions::new().write(true).open(dir.join("LOCK")).map(|f| f.try_lock().is_ok()).unwrap_or(true);
        if free {
            found.push(dir);
        }
    }
    found
}

/// Frames read for replay: their entries, and where the replay stops once they are written.
pub struct Taken {
    pub entries: Vec<AuditEntry>,
    segment: u64,
    end: u64,
    records: u64,
}

fn segment_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id:020}.spool"))
}

/// How the audit journal's files end (`audit_journal`).
pub const JOURNAL_SUFFIX: &str = ".journal";

/// One frame: `[length u32 LE][crc32 u32 LE][JSON array of entries]`, written whole with one
/// `write` so that a crash leaves at most a torn last frame.
pub fn frame(entries: &[AuditEntry]) -> Result<Vec<u8>, SpoolError> {
    let mut frame = Vec::with_capacity(512 * entries.len() + HEADER as usize);
    frame.extend_from_slice(&[0u8; HEADER as usize]);
    serde_json::to_writer(&mut frame, entries)?;
    let payload = &frame[HEADER as usize..];
    let len = u32::try_from(payload.len()).map_err(|_| std::io::Error::other("audit frame over 4 GiB"))?;
    let crc = crc32fast::hash(payload);
    frame[..4].copy_from_slice(&len.to_le_bytes());
    frame[4..HEADER as usize].copy_from_slice(&crc.to_le_bytes());
    Ok(frame)
}

/// The length of a journal file's frames: a journal file is allocated ahead and its unused tail
/// is zeros, which end it (a frame torn by a crash is caught by its checksum when read).
pub fn used_length(bytes: &[u8]) -> usize {
    let h = HEADER as usize;
    let mut pos = 0;
    while pos + h <= bytes.len() {
        let len = u32::from_le_bytes([bytes[pos], bytes[pos + 1], bytes[pos + 2], bytes[pos + 3]]) as usize;
        if len == 0 || pos + h + len > bytes.len() {
            break;
        }
        pos += h + len;
    }
    pos
}

/// Renames the journal files a dead process left in `dir` into segments after `last` (the
/// newest segment id), oldest first; returns the new newest id.
fn adopt_journals(dir: &Path, mut last: u64) -> Result<u64, SpoolError> {
    let mut journals: Vec<(u64, PathBuf)> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .filter_map(|e| Some((e.file_name().to_str()?.strip_suffix(JOURNAL_SUFFIX)?.parse().ok()?, e.path())))
        .collect();
    journals.sort_unstable();
    for (_, path) in journals {
        // Its unused tail (zeros: a journal file is allocated ahead) is not frames.
        let used = used_length(&std::fs::read(&path)?);
        OpenOptions::new().write(true).open(&path)?.set_len(used as u64)?;
        last += 1;
        std::fs::rename(&path, segment_path(dir, last))?;
    }
    Ok(last)
}

fn poisoned() -> std::io::Error {
    std::io::Error::other("spool lock poisoned")
}

impl Spool {
    /// Opens (creating) the folder, locks it, and picks up segments a previous run left.
    pub fn open(dir: &Path, max_bytes: u64, metrics: Arc<Metrics>) -> Result<Spool, SpoolError> {
        std::fs::create_dir_all(dir)?;
        let lock = OpenOptions::new().create(true).truncate(false).write(true).open(dir.join("LOCK"))?;
        if lock.try_lock().is_err() {
            return Err(SpoolError::Busy(dir.display().to_string()));
        }
        let spooled = |dir: &Path| -> Result<Vec<u64>, SpoolError> {
            let mut ids: Vec<u64> = std::fs::read_dir(dir)?
                .filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().to_str()?.strip_suffix(".spool")?.parse().ok())
                .collect();
            ids.sort_unstable();
            Ok(ids)
        };
        // The journal behind the spool: its rows were answered after the spooled ones were queued.
        adopt_journals(dir, spooled(dir)?.last().copied().unwrap_or(0))?;
        let ids = spooled(dir)?;
        let mut segments = VecDeque::new();
        let mut pending = 0;
        for id in &ids {
            let path = segment_path(dir, *id);
            let len = std::fs::metadata(&path)?.len();
            pending += len;
            segments.push_back(Segment { id: *id, path, len, read: 0 });
        }
        if !segments.is_empty() {
            log::warn!("audit spool {} holds {pending} bytes from an earlier run: replaying", dir.display());
        }
        let next_id = ids.last().map_or(1, |id| id + 1);
        let spool = Spool {
            dir: dir.to_path_buf(),
            max_bytes,
            state: Mutex::new(State { segments, writer: None, next_id, pending, records: 0 }),
            metrics,
            own: true,
            _lock: lock,
        };
        spool.metrics.audit_spool_bytes.set(pending as i64);
        Ok(spool)
    }

    /// Opens another process's folder to replay it (see [`orphans`]): nothing is appended to it.
    pub fn adopt(dir: &Path, metrics: Arc<Metrics>) -> Result<Spool, SpoolError> {
        let gauge = metrics.audit_spool_bytes.get();
        let mut spool = Spool::open(dir, u64::MAX, metrics)?;
        spool.own = false;
        spool.metrics.audit_spool_bytes.set(gauge);
        Ok(spool)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn is_empty(&self) -> bool {
        self.state.lock().map(|s| s.pending == 0).unwrap_or(false)
    }

    /// Appends one frame holding `entries`.
    pub fn append(&self, entries: &[AuditEntry]) -> Result<(), SpoolError> {
        if entries.is_empty() {
            return Ok(());
        }
        let frame = frame(entries)?;
        let size = frame.len() as u64;
        let mut st = self.state.lock().map_err(|_| poisoned())?;
        if st.pending + size > self.max_bytes {
            return Err(SpoolError::Full(st.pending));
        }
        let rotate = st.segments.back().is_none_or(|s| s.len >= SEGMENT_BYTES) || st.writer.is_none();
        if rotate {
            let id = st.next_id;
            st.next_id += 1;
            let path = segment_path(&self.dir, id);
            let file = OpenOptions::new().create_new(true).append(true).open(&path)?;
            st.writer = Some(file);
            st.segments.push_back(Segment { id, path, len: 0, read: 0 });
        }
        let Some(file) = st.writer.as_mut() else { return Err(std::io::Error::other("no spool segment").into()) };
        if let Err(e) = file.write_all(&frame) {
            // A partial frame may be on disk: never append after it.
            st.writer = None;
            return Err(e.into());
        }
        if let Some(seg) = st.segments.back_mut() {
            seg.len += size;
        }
        st.pending += size;
        st.records += entries.len() as u64;
        if self.own {
            self.metrics.audit_spool_bytes.set(st.pending as i64);
        }
        self.metrics.audit_spilled.inc_by(entries.len() as u64);
        Ok(())
    }

    /// Reads the oldest frames not yet replayed, from one segment, up to about `max_entries`
    /// entries. `None` when the spool is empty.
    pub fn take(&self, max_entries: usize) -> Result<Option<Taken>, SpoolError> {
        loop {
            let (id, path, start, len) = {
                let mut st = self.state.lock().map_err(|_| poisoned())?;
                let is_writer = st.segments.len() == 1 && st.writer.is_some();
                let Some(seg) = st.segments.front() else { return Ok(None) };
                if seg.read >= seg.len {
                    if is_writer {
                        return Ok(None); // caught up with the writer
                    }
                    self.drop_front(&mut st);
                    continue;
                }
                (seg.id, seg.path.clone(), seg.read, seg.len)
            };
            let mut file = File::open(&path)?;
            file.seek(SeekFrom::Start(start))?;
            let mut entries = Vec::new();
            let mut pos = start;
            while pos < len && entries.len() < max_entries {
                let mut header = [0u8; HEADER as usize];
                let frame_len = if len - pos >= HEADER && file.read_exact(&mut header).is_ok() {
                    u64::from(u32::from_le_bytes([header[0], header[1], header[2], header[3]]))
                } else {
                    u64::MAX
                };
                let crc = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
                if frame_len > MAX_FRAME || pos + HEADER + frame_len > len {
                    self.torn(id, pos, len)?;
                    break;
                }
                let mut payload = vec![0u8; frame_len as usize];
                file.read_exact(&mut payload)?;
                if crc32fast::hash(&payload) != crc {
                    self.torn(id, pos, len)?;
                    break;
                }
                let batch: Vec<AuditEntry> = match serde_json::from_slice(&payload) {
                    Ok(b) => b,
                    Err(e) => {
                        log::error!("audit spool frame at {}:{pos} unreadable ({e}): skipped", path.display());
                        Vec::new()
                    }
                };
                entries.extend(batch);
                pos += HEADER + frame_len;
            }
            if pos == start {
                continue; // the segment's rest was torn and dropped
            }
            let records = entries.len() as u64;
            return Ok(Some(Taken { entries, segment: id, end: pos, records }));
        }
    }

    /// The frames of `taken` are in Postgres: move past them.
    pub fn done(&self, taken: &Taken) {
        let Ok(mut st) = self.state.lock() else { return };
        let Some(seg) = st.segments.front_mut() else { return };
        if seg.id != taken.segment || taken.end <= seg.read {
            return;
        }
        let advanced = taken.end - seg.read;
        seg.read = taken.end;
        st.pending = st.pending.saturating_sub(advanced);
        st.records = st.records.saturating_sub(taken.records);
        self.metrics.audit_replayed.inc_by(taken.records);
        let finished = st.segments.front().is_some_and(|s| s.read >= s.len);
        if finished && (st.segments.len() > 1 || st.writer.is_none()) {
            self.drop_front(&mut st);
        } else if finished && st.pending == 0 {
            // Caught up with the segment being written: start the next append afresh.
            st.writer = None;
            self.drop_front(&mut st);
        }
        if self.own {
            self.metrics.audit_spool_bytes.set(st.pending as i64);
        }
    }

    fn drop_front(&self, st: &mut State) {
        if let Some(seg) = st.segments.pop_front() {
            st.pending = st.pending.saturating_sub(seg.len - seg.read.min(seg.len));
            if let Err(e) = std::fs::remove_file(&seg.path) {
                log::warn!("removing replayed spool segment {}: {e}", seg.path.display());
            }
        }
    }

    /// A torn or corrupt frame (a crash mid-write): what follows it in the segment cannot be
    /// framed, so the segment ends there.
    fn torn(&self, id: u64, pos: u64, len: u64) -> Result<(), SpoolError> {
        log::error!("audit spool segment {id} is torn at byte {pos} of {len}: the rest of it is discarded");
        let mut st = self.state.lock().map_err(|_| poisoned())?;
        if let Some(seg) = st.segments.iter_mut().find(|s| s.id == id) {
            let lost = seg.len - pos;
            seg.len = pos;
            st.pending = st.pending.saturating_sub(lost);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
