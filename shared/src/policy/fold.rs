//! Text as the detectors read it: Unicode format characters (general category Cf: zero-width
//! spaces and joiners, soft hyphens, bidirectional controls, tag characters) dropped and every
//! other character in its compatibility form (NFKC), so `jane\u{200B}.roe@example.com` and a card
//! number in fullwidth digits are found like their plain spellings. A value found in the folded
//! text maps back to the original byte range it came from, zero-width characters inside it
//! included; redaction replaces that original range, so the rest of the text stays as written.
//!
//! NFKC is applied per character (compatibility decomposition, then composition, of each
//! character alone): every piece of folded text then comes from exactly one original character,
//! which keeps the map back exact and simple. What this misses, composition across characters (a
//! letter and a combining accent), changes no ASCII-only pattern a detector looks for.

use std::borrow::Cow;

use unicode_normalization::{is_nfkc_quick, IsNormalized, UnicodeNormalization};

/// General category Cf as of Unicode 16, as ranges.
const FORMAT: &[(u32, u32)] = &[
    (0x00AD, 0x00AD),
    (0x0600, 0x0605),
    (0x061C, 0x061C),
    (0x06DD, 0x06DD),
    (0x070F, 0x070F),
    (0x0890, 0x0891),
    (0x08E2, 0x08E2),
    (0x180E, 0x180E),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x2064),
    (0x2066, 0x206F),
    (0xFEFF, 0xFEFF),
    (0xFFF9, 0xFFFB),
    (0x110BD, 0x110BD),
    (0x110CD, 0x110CD),
    (0x13430, 0x1343F),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0001, 0xE0001),
    (0xE0020, 0xE007F),
];

/// Whether `c` is a format character (invisible, and dropped before detection).
pub fn is_format(c: char) -> bool {
    let c = c as u32;
    if c < 0xAD {
        return false;
    }
    let i = FORMAT.partition_point(|&(_, hi)| hi < c);
    FORMAT.get(i).is_some_and(|&(lo, _)| lo <= c)
}

/// Whether `c` folds to itself.
fn folds_to_itself(c: char) -> bool {
    if c.is_ascii() {
        return true;
    }
    if is_format(c) {
        return false;
    }
    match is_nfkc_quick(std::iter::once(c)) {
        IsNormalized::Yes => true,
        _ => std::iter::once(c).nfkc().eq(std::iter::once(c)),
    }
}

/// A stretch of the folded text whose bytes differ from the original's: one original character,
/// dropped (`folded_len` 0) or replaced by its compatibility form. Between pieces the two texts
/// are byte for byte the same.
#[derive(Debug, Clone, Copy)]
struct Piece {
    folded: usize,
    folded_len: usize,
    original: usize,
    original_len: usize,
}

impl Piece {
    /// The original offset of folded offset `at`, at or after the piece's end (the texts agree
    /// byte for byte until the next piece).
    fn after(&self, at: usize) -> usize {
        self.original + self.original_len + at.saturating_sub(self.folded + self.folded_len)
    }
}

/// A text folded for detection, with the way back to the original.
#[derive(Debug, Clone)]
pub struct Folded<'a> {
    original: &'a str,
    text: Cow<'a, str>,
    /// Sorted by `folded`; empty when nothing changed (then `text` borrows the original).
    pieces: Vec<Piece>,
}

/// `text` folded for detection. Text that folds to itself (all ASCII, the common case, is checked
/// first) is borrowed, not copied.
pub fn fold(text: &str) -> Folded<'_> {
    let unchanged = Folded { original: text, text: Cow::Borrowed(text), pieces: Vec::new() };
    if text.is_ascii() {
        return unchanged;
    }
    let Some((first, _)) = text.char_indices().find(|&(_, c)| !folds_to_itself(c)) else {
        return unchanged;
    };
    let mut out = String::with_capacity(text.len());
    out.push_str(&text[..first]);
    let mut pieces = Vec::new();
    for (i, c) in text[first..].char_indices() {
        let at = first + i;
        if c.is_ascii() {
            out.push(c);
            continue;
        }
        let start = out.len();
        if !is_format(c) {
            // The quick check settles almost every character without building its form.
            if is_nfkc_quick(std::iter::once(c)) == IsNormalized::Yes {
                out.push(c);
                continue;
            }
            out.extend(std::iter::once(c).nfkc().filter(|&f| !is_format(f)));
            let mut buf = [0u8; 4];
            if out[start..] == *c.encode_utf8(&mut buf) {
                continue;
            }
        }
        pieces.push(Piece { folded: start, folded_len: out.len() - start, original: at, original_len: c.len_utf8() });
    }
    Folded { original: text, text: Cow::Owned(out), pieces }
}

impl<'a> Folded<'a> {
    pub fn as_str(&self) -> &str {
        &self.text
    }

    pub fn original(&self) -> &'a str {
        self.original
    }

    /// Whether the folded text is the original itself.
    pub fn is_unchanged(&self) -> bool {
        self.pieces.is_empty()
    }

    /// The last piece starting at or before folded offset `at`.
    fn piece_at(&self, at: usize) -> Option<&Piece> {
        let n = self.pieces.partition_point(|p| p.folded <= at);
        n.checked_sub(1).and_then(|i| self.pieces.get(i))
    }

    /// Original offset of the character at folded offset `at` (or of the end, at the end).
    fn start_of(&self, at: usize) -> usize {
        let pos = match self.piece_at(at) {
            Some(p) if at < p.folded + p.folded_len => p.original,
            Some(p) => p.after(at),
            None => at,
        };
        floor_boundary(self.original, pos)
    }

    /// Original offset just past the character that ends at folded offset `at`.
    fn end_of(&self, at: usize) -> usize {
        let Some(last) = at.checked_sub(1) else { return self.start_of(0) };
        let pos = match self.piece_at(last) {
            Some(p) if last < p.folded + p.folded_len => p.original + p.original_len,
            Some(p) => p.after(at),
            None => at,
        };
        ceil_boundary(self.original, pos)
    }

    /// The original byte range a folded range `start..end` came from: every original character
    /// that contributed to it, format characters between them included, never part of one.
    pub fn original_range(&self, start: usize, end: usize) -> (usize, usize) {
        if self.pieces.is_empty() {
            return (start, end);
        }
        if end <= start {
            let at = self.start_of(start);
            return (at, at);
        }
        let (s, e) = (self.start_of(start), self.end_of(end));
        (s, e.max(s))
    }

    /// The original with each folded range in `spans` (sorted, non-overlapping) replaced by
    /// `with(index, folded value)`. Ranges that map onto one original character are merged
    /// rather than dropped, so no part of a value survives.
    pub fn replace(&self, spans: &[(usize, usize)], mut with: impl FnMut(usize, &str) -> String) -> String {
        let original = self.original;
        let mut out = String::with_capacity(original.len());
        let mut at = 0;
        for (i, &(start, end)) in spans.iter().enumerate() {
            let Some(value) = self.text.get(start..end) else { continue };
            let (mut s, e) = self.original_range(start, end);
            if e <= at {
                continue;
            }
            s = s.max(at);
            out.push_str(&original[at..s]);
            out.push_str(&with(i, value));
            at = e;
        }
        out.push_str(&original[at..]);
        out
    }
}

fn floor_boundary(s: &str, mut i: usize) -> usize {
    i = i.min(s.len());
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn ceil_boundary(s: &str, mut i: usize) -> usize {
    i = i.min(s.len());
    while i < s.len() && !s.is_char_boundary(i) {
        i += 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn ascii_is_borrowed() {
        let f = fold("plain text, jane@example.com");
        assert!(matches!(f.text, Cow::Borrowed(_)));
        assert!(f.is_unchanged());
        assert_eq!(f.original_range(3, 9), (3, 9));
        let f = fold("déjà vu, 日本");
        assert!(matches!(f.text, Cow::Borrowed(_)), "non-ASCII that folds to itself is borrowed too");
    }

    #[test]
    fn drops_format_characters_and_maps_back() {
        let text = "mail jane\u{200B}.roe@exa\u{200D}mple.com\u{FEFF} now";
        let f = fold(text);
        assert_eq!(f.as_str(), "mail jane.roe@example.com now");
        let start = f.as_str().find('j').unwrap();
        let end = f.as_str().find(" now").unwrap();
        let (s, e) = f.original_range(start, end);
        // The value's inner zero-width characters are covered; the one after it is not.
        assert_eq!(&text[s..e], "jane\u{200B}.roe@exa\u{200D}mple.com");
        assert_eq!(f.replace(&[(start, end)], |_, v| format!("<{v}>")), "mail <jane.roe@example.com>\u{FEFF} now");
    }

    #[test]
    fn compatibility_forms() {
        let text = "card ４１１１ １１１１ ﬁx ①";
        let f = fold(text);
        assert_eq!(f.as_str(), "card 4111 1111 fix 1");
        // A range starting inside an expanded character widens to the whole character.
        let i = f.as_str().find("ix").unwrap();
        let (s, e) = f.original_range(i, i + 2);
        assert_eq!(&text[s..e], "ﬁx");
        let (s, e) = f.original_range(5, 14);
        assert_eq!(&text[s..e], "４１１１ １１１１");
    }

    #[test]
    fn format_table() {
        for c in ['\u{AD}', '\u{200B}', '\u{200F}', '\u{202A}', '\u{2060}', '\u{2066}', '\u{FEFF}', '\u{E0041}'] {
            assert!(is_format(c), "{:X}", c as u32);
        }
        for c in ['a', ' ', '\u{AC}', '\u{AE}', '\u{200A}', '\u{2010}', '\u{FEFE}', 'é'] {
            assert!(!is_format(c), "{:X}", c as u32);
        }
        assert!(FORMAT.windows(2).all(|w| w[0].1 < w[1].0));
    }

    fn piece() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-z0-9@. ]{1,4}",
            Just("\u{200B}".to_string()),
            Just("\u{AD}".to_string()),
            Just("\u{E0041}".to_string()),
            Just("４２".to_string()),
            Just("ﬁ".to_string()),
            Just("é".to_string()),
            Just("e\u{301}".to_string()),
            Just("㎒".to_string()),
            Just("\u{FDFA}".to_string()),
            Just("½".to_string()),
            Just("日".to_string()),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Any range on the folded text's character boundaries maps onto the original's character
        /// boundaries, in order, and never shrinks below what folds into the range.
        #[test]
        fn ranges_map_back_on_boundaries(parts in proptest::collection::vec(piece(), 0..12), a in 0usize..64, b in 0usize..64) {
            let text: String = parts.concat();
            let f = fold(&text);
            let folded = f.as_str();
            let bounds: Vec<usize> = (0..=folded.len()).filter(|&i| folded.is_char_boundary(i)).collect();
            let (a, b) = (bounds[a % bounds.len()], bounds[b % bounds.len()]);
            let (start, end) = (a.min(b), a.max(b));
            let (s, e) = f.original_range(start, end);
            prop_assert!(s <= e && e <= text.len());
            prop_assert!(text.is_char_boundary(s) && text.is_char_boundary(e));
            // Folding the original range gives back at least the folded range.
            prop_assert!(fold(&text[s..e]).as_str().contains(&folded[start..end]));
            if text.is_ascii() {
                prop_assert_eq!((s, e), (start, end));
            }
        }
    }
}
