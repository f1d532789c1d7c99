//! One streamed text's held tail: what may leave, and when the tail is worth scanning again.
//!
//! Scanning the whole held text on every piece would be quadratic where the text is held long:
//! a run without whitespace, or an open private key block, is held whole up to [`MAX_HOLD`].
//! So the held text keeps what decides whether anything could be cut (where its first
//! whitespace is, whether a key block is open, and the length it must reach after a value held
//! everything back), updated from each new piece alone; while nothing could be released, a
//! piece is only appended. Nothing leaves without a scan, so a value that blocks is still seen
//! before any of it goes out.

use super::super::engine::{OutSpan, OutputBlocked, OutputGuard};

/// Bytes held back behind the newest text (about 24 tokens).
pub const WINDOW: usize = 96;
/// A run without whitespace, or an open private key block, longer than this is no longer held
/// whole: it is let through in redacted form (a value that long is a blob, not a secret to find).
/// So is a match (of an organization's own pattern) still growing past it.
pub const MAX_HOLD: usize = 64 * 1024;
const KEY_BEGIN: &str = "-----BEGIN";
const KEY_END: &str = "-----END";

pub(super) fn floor_boundary(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// Where the text may be cut: everything before is final.
fn safe_cut(buf: &str, spans: &[OutSpan], hold: usize) -> usize {
    let mut cut = floor_boundary(buf, buf.len().saturating_sub(hold));
    // Not inside a run without whitespace.
    if cut > 0 && cut < buf.len() {
        let run_start =
            buf[..cut].rfind(char::is_whitespace).map_or(0, |i| i + buf[i..].chars().next().map_or(1, char::len_utf8));
        let next_is_space = buf[cut..].chars().next().is_some_and(char::is_whitespace);
        if !next_is_space && buf.len() - run_start <= MAX_HOLD {
            cut = run_start;
        }
    }
    // Not after the start of an open private key block.
    if let Some(p) = buf.rfind(KEY_BEGIN) {
        if !buf[p..].contains(KEY_END) && buf.len() - p <= MAX_HOLD {
            cut = cut.min(p);
        }
    }
    // Not inside a value (unless holding it would mean holding more than MAX_HOLD).
    for s in spans.iter().rev() {
        if s.start < cut && s.end > cut {
            cut = if buf.len() - s.start > MAX_HOLD { s.end } else { s.start };
        }
    }
    cut
}

/// A text's held tail.
#[derive(Debug, Default, Clone)]
pub struct Held {
    text: String,
    /// Where the first whitespace character starts.
    first_space: Option<usize>,
    /// Where the last private key block still open starts.
    open_key: Option<usize>,
    /// After a scan a value held everything back: no scan before the text is this long (the
    /// window past the value's end, plus an eighth of it, so a value that keeps growing is
    /// rescanned at geometrically spaced lengths).
    rescan_at: usize,
}

impl Held {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    pub fn is_empty(&self) -> bool {
        self.text.is_empty()
    }

    fn append(&mut self, piece: &str) {
        let old = self.text.len();
        self.text.push_str(piece);
        if self.first_space.is_none() {
            self.first_space = piece.find(char::is_whitespace).map(|i| old + i);
        }
        self.track_keys(old);
    }

    /// Follows the key markers that end after `seen` (a marker split over pieces included).
    fn track_keys(&mut self, seen: usize) {
        let from = floor_boundary(&self.text, seen.saturating_sub(KEY_BEGIN.len() - 1));
        let region = &self.text[from..];
        if !region.contains("-----") {
            return;
        }
        let mut marks: Vec<(usize, bool)> = region
            .match_indices(KEY_BEGIN)
            .map(|(i, m)| (i, m.len(), true))
            .chain(region.match_indices(KEY_END).map(|(i, m)| (i, m.len(), false)))
            .filter(|&(i, len, _)| from + i + len > seen)
            .map(|(i, _, begin)| (from + i, begin))
            .collect();
        marks.sort_unstable();
        for (at, begin) in marks {
            if begin {
                self.open_key = Some(at);
            } else if self.open_key.is_some_and(|p| p < at) {
                self.open_key = None;
            }
        }
    }

    /// The held text becomes `rest`.
    fn reset(&mut self, rest: String) {
        self.first_space = rest.find(char::is_whitespace);
        self.text = rest;
        self.open_key = None;
        self.rescan_at = 0;
        self.track_keys(0);
    }

    /// Whether a cut could release anything; false only when [`safe_cut`] would cut nothing.
    /// A text within the window is always scanned, so a value that blocks stops the stream as
    /// soon as it is whole, held or not.
    fn may_release(&self, hold: usize) -> bool {
        let len = self.text.len();
        if len <= hold {
            return true;
        }
        if len < self.rescan_at {
            return false;
        }
        let mut cut = floor_boundary(&self.text, len - hold);
        // No whitespace at or before the cut: the run it is in starts at the beginning.
        if self.first_space.is_none_or(|w| w > cut) && len <= MAX_HOLD {
            cut = 0;
        }
        if let Some(p) = self.open_key.filter(|&p| len - p <= MAX_HOLD) {
            cut = cut.min(p);
        }
        cut > 0
    }
}

#[cfg(test)]
thread_local! {
    /// Bytes scanned on this thread, for tests that count work.
    pub(super) static SCANNED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

fn scan(guard: &OutputGuard, text: &str) -> Vec<OutSpan> {
    #[cfg(test)]
    SCANNED.with(|s| s.set(s.get() + text.len()));
    guard.scan(text)
}

/// Streams a text through the guard in pieces: what may leave of it now.
pub fn push(guard: &mut OutputGuard, held: &mut Held, piece: &str) -> Result<String, OutputBlocked> {
    held.append(piece);
    let hold = WINDOW.max(guard.placeholder_len());
    if !held.may_release(hold) {
        return Ok(String::new());
    }
    let spans = scan(guard, &held.text);
    // A value that blocks stops the stream as soon as it is seen whole, held or not.
    if let Some(b) = spans.iter().find(|s| s.blocks()) {
        guard.apply(&held.text, std::slice::from_ref(b))?;
    }
    let cut = safe_cut(&held.text, &spans, hold);
    if cut == 0 {
        if held.text.len() > hold {
            // Held back by a value starting the text: nothing changes before the window passes it.
            if let Some(s) = spans.first().filter(|s| s.start == 0) {
                held.rescan_at = s.end + hold + s.end / 8;
            }
        }
        return Ok(String::new());
    }
    let done: Vec<_> = spans.into_iter().filter(|s| s.end <= cut).collect();
    let out = guard.apply(&held.text[..cut], &done)?;
    let rest = held.text.split_off(cut);
    held.reset(rest);
    Ok(out)
}

/// The rest of a text, at its end.
pub fn finish(guard: &mut OutputGuard, held: &mut Held) -> Result<String, OutputBlocked> {
    let text = std::mem::take(held).text;
    let spans = scan(guard, &text);
    guard.apply(&text, &spans)
}
