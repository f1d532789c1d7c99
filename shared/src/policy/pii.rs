//! Personal and secret values in free text: e-mail addresses, phone numbers, payment cards, US
//! social security numbers, IBANs, IP addresses and credentials.
//!
//! Each kind has one regex that finds candidates; a candidate is only reported once it passes the
//! checks a regex cannot express (Luhn, IBAN mod 97, issuer prefixes, octet ranges, what sits next
//! to it). A false positive mangles an ordinary prompt, so every rule leans towards "looks exactly
//! like the real thing" rather than "could be one".
//!
//! The patterns are ASCII-only and avoid `\b`, `\d` and `\s`: their Unicode forms would force the
//! regex engine off its lazy DFA on non-ASCII text, and a value's edges are checked by hand on
//! ASCII bytes anyway.

use std::net::Ipv6Addr;
use std::sync::LazyLock;

use regex::Regex;
use serde::{Deserialize, Serialize};

/// A kind of personal or secret value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Entity {
    Email,
    Phone,
    CreditCard,
    Ssn,
    Iban,
    IpAddress,
    Secret,
}

impl Entity {
    pub const ALL: [Entity; 7] = [
        Entity::Email,
        Entity::Phone,
        Entity::CreditCard,
        Entity::Ssn,
        Entity::Iban,
        Entity::IpAddress,
        Entity::Secret,
    ];

    /// Placeholder label: "EMAIL", "PHONE", "CREDIT_CARD", "SSN", "IBAN", "IP_ADDRESS", "SECRET".
    pub fn label(self) -> &'static str {
        match self {
            Entity::Email => "EMAIL",
            Entity::Phone => "PHONE",
            Entity::CreditCard => "CREDIT_CARD",
            Entity::Ssn => "SSN",
            Entity::Iban => "IBAN",
            Entity::IpAddress => "IP_ADDRESS",
            Entity::Secret => "SECRET",
        }
    }

    /// The name as serde spells it.
    pub fn name(self) -> &'static str {
        match self {
            Entity::Email => "email",
            Entity::Phone => "phone",
            Entity::CreditCard => "credit_card",
            Entity::Ssn => "ssn",
            Entity::Iban => "iban",
            Entity::IpAddress => "ip_address",
            Entity::Secret => "secret",
        }
    }

    pub fn from_name(s: &str) -> Option<Entity> {
        Entity::ALL.into_iter().find(|e| e.name() == s)
    }

    const fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

/// A set of entities.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EntitySet(u8);

impl EntitySet {
    // A const item, so an eighth variant overflows the shift and fails the build instead of
    // silently falling out of "all" (the set needs a wider integer by then).
    const ALL_BITS: u8 = (1u8 << Entity::ALL.len()) - 1;

    pub const fn all() -> Self {
        EntitySet(Self::ALL_BITS)
    }

    pub const fn empty() -> Self {
        EntitySet(0)
    }

    pub fn with(self, e: Entity) -> Self {
        EntitySet(self.0 | e.bit())
    }

    pub fn contains(self, e: Entity) -> bool {
        self.0 & e.bit() != 0
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    pub fn iter(self) -> impl Iterator<Item = Entity> {
        Entity::ALL.into_iter().filter(move |e| self.contains(*e))
    }
}

impl FromIterator<Entity> for EntitySet {
    fn from_iter<I: IntoIterator<Item = Entity>>(iter: I) -> Self {
        iter.into_iter().fold(EntitySet::empty(), EntitySet::with)
    }
}

/// One detected value: byte offsets into the scanned text (always on char boundaries).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub start: usize,
    pub end: usize,
    pub entity: Entity,
}

/// No span [`Detector::find`] returns is longer than this, private key blocks aside (a streaming
/// caller holds those from [`PRIVATE_KEY_BEGIN`] until they close). JWTs set it: every other
/// value is capped far lower (e-mail 318 bytes, provider keys 512).
pub const MAX_VALUE_LEN: usize = 4096;
/// Marker that opens a PEM private key block.
pub const PRIVATE_KEY_BEGIN: &str = "-----BEGIN";

/// Longest JWT reported. Longer ones exist (tokens stuffed with group claims) but are rare, and
/// every byte of this cap is look-behind a streaming caller must hold.
const MAX_JWT_LEN: usize = MAX_VALUE_LEN;
/// Longest provider key reported (OpenAI project keys, the longest, are about 170).
const MAX_TOKEN_LEN: usize = 512;
/// Longest private key body searched for its end line (an 8192-bit RSA key is about 6.5 KB).
const KEY_BODY_MAX: usize = 16 * 1024;
/// Base64 characters a closed key block must hold: a block of prose between the two marker lines
/// (documentation explaining the format) is not a key.
const KEY_MIN_BASE64: usize = 32;
/// Base64 characters an unclosed key block must hold before its start is redacted: the rest of a
/// truncated key is still a leak, a lone marker line is not.
const KEY_OPEN_MIN_BASE64: usize = 64;
/// What may sit between `-----BEGIN ` and `PRIVATE KEY-----`.
const KEY_KINDS: [&str; 6] = ["", "RSA ", "EC ", "DSA ", "OPENSSH ", "ENCRYPTED "];

// Every unbounded repetition below (`+`, `{n,}`) has its cap enforced on the candidate instead: a
// bounded repetition of hundreds makes the lazy DFA build one state per counted character, and it
// gives up and falls back to a far slower engine on exactly the long tokens we look for.

/// The local part may start with dots only so they can be trimmed off (`...john@x.com`); the
/// 64-byte local and 253-byte domain limits are checked on the candidate.
const EMAIL: &str = r"[A-Za-z0-9._%+\-]+@(?:[A-Za-z0-9\-]+\.)+[A-Za-z]{2,}";

/// E.164: `+`, then digit groups with single separators; one group may be a parenthesized area
/// code (`+49 (30) 1234567`, `+44 (0) 20 …`). Only the first group after the country code may be a
/// single digit (`+33 1 23 45 67 89`), so a stray digit after a number (`… 2671 2 times`) is left
/// out. 8..=15 digits is checked on the candidate.
const PHONE_INTL: &str =
    r"\+[0-9]{1,15}(?:[ .\-]?\([0-9]{1,5}\)[ .\-]?[0-9]{1,14}|[ .\-][0-9]{1,14})?(?:[ .\-][0-9]{2,14}){0,7}";

/// National formats, always with separators: a bare run of digits is far more often an order
/// number or a timestamp than a phone. North American numbers need an area code starting 2-9 (as
/// real ones do), which keeps `100-200-3000`-style ranges out.
const PHONE_NATIONAL: &str = concat!(
    r"(?:1[ .\-]?)?\([2-9][0-9]{2}\) ?[0-9]{3}[ .\-][0-9]{4}",
    r"|(?:1-)?[2-9][0-9]{2}-[0-9]{3}-[0-9]{4}",
    r"|(?:1\.)?[2-9][0-9]{2}\.[0-9]{3}\.[0-9]{4}",
    r"|(?:1 )?[2-9][0-9]{2} [0-9]{3} [0-9]{4}",
    // UK: 020 7946 0958, 0161 496 0000, 07700 900123, 07700 900 123
    r"|0[0-9]{2} [0-9]{4} [0-9]{4}",
    r"|0[0-9]{3} [0-9]{3} [0-9]{4}",
    r"|0[0-9]{4} [0-9]{3} ?[0-9]{3}",
    // France: 01 23 45 67 89, 01.23.45.67.89
    r"|0[1-9](?: [0-9]{2}){4}",
    r"|0[1-9](?:\.[0-9]{2}){4}",
);

/// Ungrouped, groups of four (the last one short), or Amex/Diners 4-6-5 and 4-6-4; one kind of
/// separator per number. The trailing short group may be a CVV or an expiry month that follows
/// the number; such groups are dropped again if the whole fails (see [`longest_grouped`]).
const CARD: &str = concat!(
    r"[0-9]{13,19}",
    r"|[0-9]{4}(?: [0-9]{4}){2,3}(?: [0-9]{1,4})?",
    r"|[0-9]{4}(?:-[0-9]{4}){2,3}(?:-[0-9]{1,4})?",
    r"|[0-9]{4} [0-9]{6} [0-9]{4,5}",
    r"|[0-9]{4}-[0-9]{6}-[0-9]{4,5}",
);

/// Only with separators: nine bare digits are mostly not social security numbers (order numbers,
/// phone numbers without an area code, zip+4), and a false hit there mangles ordinary text.
const SSN: &str = r"[0-9]{3}-[0-9]{2}-[0-9]{4}|[0-9]{3} [0-9]{2} [0-9]{4}";

/// Uppercase only: IBANs are printed that way, and requiring it keeps lowercase words followed
/// by digits from ever becoming candidates (the mod-97 check would catch most, not all).
const IBAN: &str = r"[A-Z]{2}[0-9]{2}(?:[A-Z0-9]{11,30}|(?: [A-Z0-9]{4}){2,7}(?: [A-Z0-9]{1,4})?)";

/// The octet alternatives refuse leading zeros (`01.2.3.4` could be anything but an address).
const IPV4: &str = concat!(
    r"(?:(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9][0-9]|[0-9])\.){3}",
    r"(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9][0-9]|[0-9])",
);

/// A loose run of hex digits, colons and dots holding a colon; `Ipv6Addr` and
/// [`ipv6_plausible`] decide.
const IPV6: &str = r"[0-9A-Fa-f]{0,4}:[0-9A-Fa-f.:]+";

/// Provider keys by their fixed prefixes (which also gives the regex engine literals to skip
/// ahead with), and JWTs (`eyJ` is base64 for `{"`).
const SECRET: &str = concat!(
    r"sk-[A-Za-z0-9_\-]{20,}",
    r"|(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}",
    r"|pk_live_[A-Za-z0-9]{16,}",
    r"|(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}",
    r"|gh[pousr]_[A-Za-z0-9]{36,}",
    r"|github_pat_[A-Za-z0-9_]{22,}",
    r"|xox[abposr]-[A-Za-z0-9\-]{10,}",
    r"|AIza[0-9A-Za-z_\-]{35}",
    r"|glpat-[A-Za-z0-9_\-]{20,}",
    r"|eyJ[A-Za-z0-9_\-]{5,}\.eyJ[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]{10,}",
);

/// Separators that join a number to a longer numeric structure: a value with one of these and
/// then a digit next to it is a piece of a version, a date or an ID, not a value of its own.
const DIGIT_SEPS: &[u8] = b".-";

/// Compiled once, shared by every request.
#[derive(Debug)]
pub struct Detector {
    email: Regex,
    phone_intl: Regex,
    phone_national: Regex,
    card: Regex,
    ssn: Regex,
    iban: Regex,
    ipv4: Regex,
    ipv6: Regex,
    secret: Regex,
}

impl Detector {
    /// Compiles the built-in patterns. They are constants, so an error is a programming error;
    /// the caller decides how to fail.
    pub fn new() -> Result<Self, regex::Error> {
        Ok(Detector {
            email: Regex::new(EMAIL)?,
            phone_intl: Regex::new(PHONE_INTL)?,
            phone_national: Regex::new(PHONE_NATIONAL)?,
            card: Regex::new(CARD)?,
            ssn: Regex::new(SSN)?,
            iban: Regex::new(IBAN)?,
            ipv4: Regex::new(IPV4)?,
            ipv6: Regex::new(IPV6)?,
            secret: Regex::new(SECRET)?,
        })
    }

    /// Every value of the given entities in `text`, sorted by start and non-overlapping: on
    /// overlap the earlier-starting value wins, at the same start the longer one.
    pub fn find(&self, text: &str, entities: EntitySet) -> Vec<Span> {
        let mut spans = Vec::new();
        if entities.is_empty() || text.is_empty() {
            return spans;
        }
        let scan = Scan::of(text);
        if entities.contains(Entity::Email) && scan.at {
            self.emails(text, &mut spans);
        }
        if entities.contains(Entity::Phone) {
            if scan.plus && scan.cluster >= 8 {
                self.intl_phones(text, &mut spans);
            }
            if scan.cluster >= 10 {
                self.national_phones(text, &mut spans);
            }
        }
        if entities.contains(Entity::CreditCard) && scan.cluster >= 13 {
            self.cards(text, &mut spans);
        }
        if entities.contains(Entity::Ssn) && scan.cluster >= 9 {
            self.ssns(text, &mut spans);
        }
        if entities.contains(Entity::Iban) && scan.upper && scan.digits >= 4 {
            self.ibans(text, &mut spans);
        }
        if entities.contains(Entity::IpAddress) {
            if scan.dot && scan.cluster >= 4 {
                self.ipv4s(text, &mut spans);
            }
            if scan.colon && scan.digits > 0 {
                self.ipv6s(text, &mut spans);
            }
        }
        if entities.contains(Entity::Secret) {
            self.secrets(text, &mut spans);
            private_keys(text, &mut spans);
        }
        resolve_overlaps(spans)
    }

    fn emails(&self, text: &str, out: &mut Vec<Span>) {
        let bytes = text.as_bytes();
        for m in self.email.find_iter(text) {
            let candidate = m.as_str().trim_start_matches('.');
            let start = m.end() - candidate.len();
            let before_ok = !byte_before(bytes, start).is_some_and(|b| is_word(*b));
            // A `-` right after the TLD means the domain goes on with an invalid label.
            let after_ok = !bytes.get(m.end()).is_some_and(|&b| is_word(b) || b == b'-');
            if before_ok && after_ok && email_valid(candidate) {
                out.push(Span { start, end: m.end(), entity: Entity::Email });
            }
        }
    }

    fn intl_phones(&self, text: &str, out: &mut Vec<Span>) {
        let bytes = text.as_bytes();
        for m in self.phone_intl.find_iter(text) {
            let s = m.as_str();
            let digits = s.bytes().filter(u8::is_ascii_digit).count();
            if (8..=15).contains(&digits) && !thousands_grouped(s) && bounded(bytes, m.start(), m.end(), DIGIT_SEPS) {
                out.push(Span { start: m.start(), end: m.end(), entity: Entity::Phone });
            }
        }
    }

    fn national_phones(&self, text: &str, out: &mut Vec<Span>) {
        let bytes = text.as_bytes();
        for m in self.phone_national.find_iter(text) {
            if bounded(bytes, m.start(), m.end(), DIGIT_SEPS) {
                out.push(Span { start: m.start(), end: m.end(), entity: Entity::Phone });
            }
        }
    }

    fn cards(&self, text: &str, out: &mut Vec<Span>) {
        let bytes = text.as_bytes();
        for m in self.card.find_iter(text) {
            let start = m.start();
            let found = longest_grouped(m.as_str(), |c| {
                card_number_valid(c) && bounded(bytes, start, start + c.len(), DIGIT_SEPS)
            });
            if let Some(len) = found {
                out.push(Span { start, end: start + len, entity: Entity::CreditCard });
            }
        }
    }

    fn ssns(&self, text: &str, out: &mut Vec<Span>) {
        let bytes = text.as_bytes();
        for m in self.ssn.find_iter(text) {
            let s = m.as_str();
            let mut parts = s.split(['-', ' ']);
            let (Some(area), Some(group), Some(serial)) = (parts.next(), parts.next(), parts.next()) else {
                continue;
            };
            // Never issued: area 000, 666 and 900-999, group 00, serial 0000.
            let issued = area != "000" && area != "666" && !area.starts_with('9') && group != "00" && serial != "0000";
            // Spaced triples inside a longer spaced run of numbers are a table, not an SSN.
            let seps: &[u8] = if s.contains(' ') { b".- " } else { DIGIT_SEPS };
            if issued && bounded(bytes, m.start(), m.end(), seps) {
                out.push(Span { start: m.start(), end: m.end(), entity: Entity::Ssn });
            }
        }
    }

    fn ibans(&self, text: &str, out: &mut Vec<Span>) {
        let bytes = text.as_bytes();
        for m in self.iban.find_iter(text) {
            let start = m.start();
            let found =
                longest_grouped(m.as_str(), |c| iban_text_valid(c) && bounded(bytes, start, start + c.len(), b""));
            if let Some(len) = found {
                out.push(Span { start, end: start + len, entity: Entity::Iban });
            }
        }
    }

    fn ipv4s(&self, text: &str, out: &mut Vec<Span>) {
        let bytes = text.as_bytes();
        for m in self.ipv4.find_iter(text) {
            // Only dots: `10.0.0.1:8080` and `10.0.0.0/8` are addresses, `1.2.3.4.5` is not.
            if bounded(bytes, m.start(), m.end(), b".") {
                out.push(Span { start: m.start(), end: m.end(), entity: Entity::IpAddress });
            }
        }
    }

    fn ipv6s(&self, text: &str, out: &mut Vec<Span>) {
        let bytes = text.as_bytes();
        for m in self.ipv6.find_iter(text) {
            // The loose pattern takes in sentence punctuation and a label's colon
            // (`Server:fe80::1`, `is ::1.`), which no address starts or ends with.
            let mut candidate = m.as_str().trim_end_matches('.');
            let mut start = m.start();
            if let Some(rest) = candidate.strip_prefix(':').filter(|r| !r.starts_with(':')) {
                candidate = rest;
                start += 1;
            }
            if let Some(rest) = candidate.strip_suffix(':').filter(|r| !r.ends_with(':')) {
                candidate = rest;
            }
            if byte_before(bytes, start).is_some_and(|&b| is_word(b)) {
                // `node:2001:db8::1`: the pattern started on the hex letters that end the label.
                match candidate.split_once(':') {
                    Some((head, rest)) if !rest.starts_with(':') => {
                        start += head.len() + 1;
                        candidate = rest;
                    }
                    _ => continue,
                }
            }
            let end = start + candidate.len();
            if ipv6_plausible(candidate) && bounded(bytes, start, end, b"") {
                out.push(Span { start, end, entity: Entity::IpAddress });
            }
        }
    }

    fn secrets(&self, text: &str, out: &mut Vec<Span>) {
        let bytes = text.as_bytes();
        for m in self.secret.find_iter(text) {
            // A prefix inside a word is not a prefix: `task-force`, `ask-me-…`, `XAKIA…`.
            let inside_word = byte_before(bytes, m.start()).is_some_and(u8::is_ascii_alphanumeric)
                || bytes.get(m.end()).is_some_and(u8::is_ascii_alphanumeric);
            if !inside_word && secret_shape_ok(m.as_str()) {
                out.push(Span { start: m.start(), end: m.end(), entity: Entity::Secret });
            }
        }
    }
}

/// Shared instance, compiled on first use. `None` only if the built-in patterns failed to compile,
/// which a unit test rules out.
pub fn detector() -> Option<&'static Detector> {
    static DETECTOR: LazyLock<Option<Detector>> = LazyLock::new(|| Detector::new().ok());
    DETECTOR.as_ref()
}

/// Luhn checksum over ASCII digits; anything else (or nothing) fails.
pub fn luhn_valid(digits: &[u8]) -> bool {
    if digits.is_empty() {
        return false;
    }
    let mut sum = 0u32;
    for (i, &b) in digits.iter().rev().enumerate() {
        if !b.is_ascii_digit() {
            return false;
        }
        let mut d = u32::from(b - b'0');
        if i % 2 == 1 {
            d *= 2;
            if d > 9 {
                d -= 9;
            }
        }
        sum += d;
    }
    sum.is_multiple_of(10)
}

/// IBAN check on an IBAN without spaces, in uppercase: structure, the country's length for the
/// common countries (15..=34 for the others), and mod 97.
pub fn iban_valid(iban: &str) -> bool {
    let b = iban.as_bytes();
    let &[c0, c1, k0, k1, ref bban @ ..] = b else {
        return false;
    };
    if !(c0.is_ascii_uppercase() && c1.is_ascii_uppercase() && k0.is_ascii_digit() && k1.is_ascii_digit()) {
        return false;
    }
    if !bban.iter().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit()) {
        return false;
    }
    let len_ok = match iban_length([c0, c1]) {
        Some(n) => b.len() == n,
        None => (15..=34).contains(&b.len()),
    };
    // Issued check digits are 98 - (n mod 97), so 02..=98; 00, 01 and 99 pass mod 97 only as
    // aliases of 97, 98 and 02.
    if !len_ok || matches!((k0, k1), (b'0', b'0' | b'1') | (b'9', b'9')) {
        return false;
    }
    let head = [c0, c1, k0, k1];
    let mut rem = 0u32;
    for &c in bban.iter().chain(&head) {
        rem = if c.is_ascii_digit() {
            (rem * 10 + u32::from(c - b'0')) % 97
        } else {
            (rem * 100 + u32::from(c - b'A') + 10) % 97
        };
    }
    rem == 1
}

fn iban_length(country: [u8; 2]) -> Option<usize> {
    Some(match &country {
        b"NO" => 15,
        b"BE" => 16,
        b"NL" | b"DK" | b"FI" => 18,
        b"AT" | b"LU" => 20,
        b"CH" => 21,
        b"DE" | b"GB" | b"IE" => 22,
        b"ES" | b"SE" => 24,
        b"PT" => 25,
        b"FR" | b"IT" => 27,
        b"PL" => 28,
        _ => return None,
    })
}

/// What the text holds, in one pass, so the kinds that cannot occur skip their regex scan.
#[derive(Default)]
struct Scan {
    digits: usize,
    /// Most digits in one cluster: digits with at most two other bytes between neighbours, which
    /// covers every separator the patterns allow (`) `, ` (`).
    cluster: usize,
    at: bool,
    colon: bool,
    plus: bool,
    dot: bool,
    upper: bool,
}

impl Scan {
    fn of(text: &str) -> Self {
        let mut scan = Scan::default();
        let mut run = 0usize;
        let mut gap = 3usize;
        for &b in text.as_bytes() {
            if b.is_ascii_digit() {
                scan.digits += 1;
                run = if gap > 2 { 1 } else { run + 1 };
                gap = 0;
                scan.cluster = scan.cluster.max(run);
            } else {
                gap = gap.saturating_add(1);
                match b {
                    b'@' => scan.at = true,
                    b':' => scan.colon = true,
                    b'+' => scan.plus = true,
                    b'.' => scan.dot = true,
                    b'A'..=b'Z' => scan.upper = true,
                    _ => {}
                }
            }
        }
        scan
    }
}

/// ASCII only on purpose: a non-ASCII letter cannot continue an ASCII value, and CJK text puts
/// values right against its words with no space in between.
fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

fn byte_before(bytes: &[u8], i: usize) -> Option<&u8> {
    i.checked_sub(1).and_then(|j| bytes.get(j))
}

/// Whether `start..end` stands on its own: no word character next to it, and no separator from
/// `seps` that joins it to another digit (`1.2.3.4.5`, `2024-415-555-2671`).
fn bounded(bytes: &[u8], start: usize, end: usize, seps: &[u8]) -> bool {
    if let Some(&b) = byte_before(bytes, start) {
        let joined =
            seps.contains(&b) && start.checked_sub(2).and_then(|j| bytes.get(j)).is_some_and(u8::is_ascii_digit);
        if is_word(b) || joined {
            return false;
        }
    }
    if let Some(&b) = bytes.get(end) {
        let joined = seps.contains(&b) && bytes.get(end + 1).is_some_and(u8::is_ascii_digit);
        if is_word(b) || joined {
            return false;
        }
    }
    true
}

/// Length of the longest prefix of a grouped candidate, cut only between groups, that `ok`
/// accepts. Greedy grouping may take in a CVV, an expiry month or a word after the value
/// (`4111 1111 1111 1111 123`); the value is still there once that group is dropped.
fn longest_grouped(s: &str, mut ok: impl FnMut(&str) -> bool) -> Option<usize> {
    let mut end = s.len();
    loop {
        let candidate = s.get(..end)?;
        if ok(candidate) {
            return Some(end);
        }
        end = candidate.rfind([' ', '-'])?;
    }
}

fn email_valid(s: &str) -> bool {
    let Some((local, domain)) = s.split_once('@') else {
        return false;
    };
    if local.is_empty() || local.len() > 64 || local.ends_with('.') || local.contains("..") {
        return false;
    }
    let Some((host, tld)) = domain.rsplit_once('.') else {
        return false;
    };
    let labels_ok = host.split('.').all(|l| (1..=63).contains(&l.len()) && !l.starts_with('-') && !l.ends_with('-'));
    domain.len() <= 253 && (2..=24).contains(&tld.len()) && labels_ok && !retina_asset(host, tld)
}

/// `icon@2x.png`: the high-density image naming convention, everywhere in web code.
fn retina_asset(host: &str, tld: &str) -> bool {
    let density = host.strip_suffix('x').is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    density && matches!(tld.to_ascii_lowercase().as_str(), "png" | "jpg" | "jpeg" | "gif" | "webp" | "svg" | "avif")
}

/// `+12.345.678`: a signed number with thousands separators, not a phone.
fn thousands_grouped(s: &str) -> bool {
    s.contains('.') && !s.contains([' ', '-', '(']) && s.split('.').skip(1).all(|g| g.len() == 3)
}

fn card_number_valid(s: &str) -> bool {
    let n = s.bytes().filter(u8::is_ascii_digit).count();
    if !(13..=19).contains(&n) {
        return false;
    }
    let mut digits = [0u8; 19];
    for (slot, b) in digits.iter_mut().zip(s.bytes().filter(u8::is_ascii_digit)) {
        *slot = b;
    }
    let digits = &digits[..n];
    card_brand_ok(digits) && luhn_valid(digits)
}

/// A known issuer prefix with one of its lengths: a Luhn-valid number alone is one in ten of all
/// order numbers and IDs.
fn card_brand_ok(d: &[u8]) -> bool {
    let prefix = |k: usize| d.iter().take(k).fold(0u32, |acc, &b| acc * 10 + u32::from(b - b'0'));
    let n = d.len();
    match prefix(1) {
        4 => matches!(n, 13 | 16 | 19),
        // Mastercard 2-series
        2 => n == 16 && (2221..=2720).contains(&prefix(4)),
        3 => {
            let (p2, p3, p4) = (prefix(2), prefix(3), prefix(4));
            let amex = n == 15 && (p2 == 34 || p2 == 37);
            let jcb = n >= 16 && (3528..=3589).contains(&p4);
            let diners = n >= 14 && (p2 == 36 || p2 == 38 || (300..=305).contains(&p3));
            amex || jcb || diners
        }
        5 => {
            let p2 = prefix(2);
            let mastercard = n == 16 && (51..=55).contains(&p2);
            let maestro = p2 == 50 || (56..=59).contains(&p2);
            mastercard || maestro
        }
        // Maestro's 56-69 covers the whole 6 block, Discover and UnionPay included.
        6 => true,
        _ => false,
    }
}

fn iban_text_valid(s: &str) -> bool {
    let n = s.bytes().filter(|&b| b != b' ').count();
    if n > 34 {
        return false;
    }
    let mut buf = [0u8; 34];
    for (slot, b) in buf.iter_mut().zip(s.bytes().filter(|&b| b != b' ')) {
        *slot = b;
    }
    std::str::from_utf8(&buf[..n]).is_ok_and(iban_valid)
}

/// Beyond parsing as an address: at least one digit, so Rust and C++ paths (`std::vec`,
/// `Foo::bar`, `a::b`, and the valid-but-wordy `dead::beef`) stay out; and either the loopback
/// `::1`, a group of three or more characters, or three groups, so slices (`x[1::2]`, `a[::2]`,
/// `[10::20]`) stay out while `fe80::1`, `2001:db8::1` and `::ffff:1.2.3.4` get in.
fn ipv6_plausible(c: &str) -> bool {
    if c.len() > 45 || c.bytes().filter(|&b| b == b':').count() < 2 || !c.bytes().any(|b| b.is_ascii_digit()) {
        return false;
    }
    if c.parse::<Ipv6Addr>().is_err() {
        return false;
    }
    if c == "::1" {
        return true;
    }
    let groups = c.split(':').filter(|g| !g.is_empty());
    groups.clone().any(|g| g.len() >= 3) || groups.count() >= 3
}

fn secret_shape_ok(s: &str) -> bool {
    if s.starts_with("eyJ") {
        return s.len() <= MAX_JWT_LEN;
    }
    if s.len() > MAX_TOKEN_LEN {
        return false;
    }
    // Real keys are random and carry digits; hyphenated words after these short prefixes
    // (`sk-learn-compatible-…`, `xoxo-…`) do not.
    match s.strip_prefix("sk-").or_else(|| s.strip_prefix("xox")) {
        Some(body) => body.bytes().any(|b| b.is_ascii_digit()),
        None => true,
    }
}

/// PEM private key blocks, found by hand: a regex spanning up to 16 KB of body would be a
/// counting automaton of that size.
fn private_keys(text: &str, out: &mut Vec<Span>) {
    let mut from = 0;
    while let Some(found) = text.get(from..).and_then(|rest| rest.find(PRIVATE_KEY_BEGIN)) {
        let start = from + found;
        let marker_end = start + PRIVATE_KEY_BEGIN.len();
        match key_block_end(text, marker_end) {
            Some(end) => {
                out.push(Span { start, end, entity: Entity::Secret });
                from = end;
            }
            None => from = marker_end,
        }
    }
}

/// The rest of `s` after ` <kind>PRIVATE KEY-----`, if `s` starts with that.
fn after_key_label(s: &str) -> Option<&str> {
    let s = s.strip_prefix(' ')?;
    KEY_KINDS.iter().find_map(|kind| s.strip_prefix(*kind)?.strip_prefix("PRIVATE KEY-----"))
}

/// Bytes a key body may hold: base64, line breaks (also JSON-escaped ones, `\n`), and the
/// `Proc-Type: 4,ENCRYPTED` / `DEK-Info: AES-128-CBC,…` headers of legacy encrypted keys.
fn key_body_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric()
        || matches!(b, b'+' | b'/' | b'=' | b'\r' | b'\n' | b'\t' | b' ' | b':' | b',' | b'-' | b'.' | b'\\')
}

fn base64_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'=')
}

/// Where the key block whose `-----BEGIN` ends at `marker_end` ends: after its END line, or, for a
/// block that never closes (a truncated paste), after the base64 lines that follow the header.
fn key_block_end(text: &str, marker_end: usize) -> Option<usize> {
    let body = after_key_label(text.get(marker_end..)?)?;
    let body_start = text.len() - body.len();
    let bytes = text.as_bytes();
    let limit = text.len().min(body_start + KEY_BODY_MAX);
    let mut base64 = 0usize;
    // An unclosed block only extends over strict base64 lines: the wider body alphabet would
    // also run on through the prose after a lone marker line.
    let mut strict_base64 = 0usize;
    let mut strict_end: Option<usize> = None;
    let mut i = body_start;
    while i < limit {
        let b = bytes[i];
        if b == b'-' {
            let tail = text.get(i..).unwrap_or_default();
            if let Some(after) = tail.strip_prefix("-----END").and_then(after_key_label) {
                return (base64 >= KEY_MIN_BASE64).then_some(text.len() - after.len());
            }
            if tail.starts_with(PRIVATE_KEY_BEGIN) {
                break;
            }
        }
        if !key_body_byte(b) {
            break;
        }
        let is_base64 = base64_byte(b);
        if is_base64 {
            base64 += 1;
        }
        if strict_end.is_none() {
            if is_base64 {
                strict_base64 += 1;
            } else if !matches!(b, b'\r' | b'\n' | b'\\') {
                strict_end = Some(i);
            }
        }
        i += 1;
    }
    if strict_base64 < KEY_OPEN_MIN_BASE64 {
        return None;
    }
    let mut end = strict_end.unwrap_or(i);
    while end > body_start && matches!(bytes[end - 1], b'\r' | b'\n' | b'\\') {
        end -= 1;
    }
    Some(end)
}

fn resolve_overlaps(mut spans: Vec<Span>) -> Vec<Span> {
    spans.sort_unstable_by(|a, b| a.start.cmp(&b.start).then(b.end.cmp(&a.end)).then(a.entity.cmp(&b.entity)));
    let mut out: Vec<Span> = Vec::with_capacity(spans.len());
    for s in spans {
        if out.last().is_none_or(|last| s.start >= last.end) {
            out.push(s);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn det() -> &'static Detector {
        detector().expect("the built-in patterns compile")
    }

    fn found(text: &str) -> Vec<(Entity, &str)> {
        det().find(text, EntitySet::all()).into_iter().map(|s| (s.entity, &text[s.start..s.end])).collect()
    }

    fn found_one(text: &str, entity: Entity) -> Vec<&str> {
        det().find(text, EntitySet::empty().with(entity)).into_iter().map(|s| &text[s.start..s.end]).collect()
    }

    fn group4(s: &str, sep: &str) -> String {
        s.as_bytes().chunks(4).map(|c| std::str::from_utf8(c).expect("ascii")).collect::<Vec<_>>().join(sep)
    }

    #[test]
    fn detector_compiles() {
        fn shared_across_threads<T: Send + Sync>() {}
        shared_across_threads::<Detector>();
        assert!(detector().is_some());
        assert!(Detector::new().is_ok());
    }

    #[test]
    fn entity_names_labels_and_serde_agree() {
        for e in Entity::ALL {
            assert_eq!(Entity::from_name(e.name()), Some(e));
            assert_eq!(serde_json::to_string(&e).expect("serializes"), format!("\"{}\"", e.name()));
            assert_eq!(e.label(), e.name().to_ascii_uppercase());
        }
        assert_eq!(Entity::from_name("EMAIL"), None);
        assert_eq!(Entity::from_name("passport"), None);
    }

    #[test]
    fn entity_set_ops() {
        assert!(EntitySet::empty().is_empty());
        assert_eq!(EntitySet::all().iter().collect::<Vec<_>>(), Entity::ALL.to_vec());
        let s: EntitySet = [Entity::Iban, Entity::Email].into_iter().collect();
        assert!(s.contains(Entity::Email) && s.contains(Entity::Iban) && !s.contains(Entity::Phone));
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![Entity::Email, Entity::Iban]);
        assert_eq!(EntitySet::default(), EntitySet::empty());
        assert_eq!(Entity::ALL.into_iter().collect::<EntitySet>(), EntitySet::all());
    }

    #[test]
    fn only_requested_entities_are_reported() {
        let text = "mail john@example.com, call 415-555-2671, ip 10.0.0.1";
        assert_eq!(found_one(text, Entity::Email), vec!["john@example.com"]);
        assert_eq!(found_one(text, Entity::Phone), vec!["415-555-2671"]);
        assert_eq!(found_one(text, Entity::IpAddress), vec!["10.0.0.1"]);
        assert!(det().find(text, EntitySet::empty()).is_empty());
        assert!(det().find("", EntitySet::all()).is_empty());
    }

    #[test]
    fn luhn() {
        assert!(luhn_valid(b"4111111111111111"));
        assert!(luhn_valid(b"378282246310005"));
        assert!(!luhn_valid(b"4111111111111112"));
        assert!(!luhn_valid(b""));
        assert!(!luhn_valid(b"4111-1111"));
    }

    #[test]
    fn iban_check() {
        assert!(iban_valid("DE89370400440532013000"));
        assert!(iban_valid("GB82WEST12345698765432"));
        assert!(iban_valid("FR1420041010050500013M02606"));
        assert!(iban_valid("NO9386011117947"));
        assert!(!iban_valid("DE89370400440532013001"));
        // Wrong length for Germany.
        assert!(!iban_valid("DE8937040044053201300"));
        assert!(!iban_valid("DE89 3704 0044 0532 0130 00"));
        assert!(!iban_valid("de89370400440532013000"));
        assert!(!iban_valid("DE8"));
        assert!(!iban_valid(""));
    }

    #[test]
    fn emails() {
        assert_eq!(found_one("write to john.doe@example.com.", Entity::Email), vec!["john.doe@example.com"]);
        assert_eq!(found_one("<a href=\"mailto:john@x.com\">", Entity::Email), vec!["john@x.com"]);
        assert_eq!(found_one("https://x.com/?email=john@x.com&a=1", Entity::Email), vec!["john@x.com"]);
        assert_eq!(found_one("xa@b.co", Entity::Email), vec!["xa@b.co"]);
        assert_eq!(found_one("...john@x.com", Entity::Email), vec!["john@x.com"]);
        assert!(found_one("user@localhost", Entity::Email).is_empty());
        assert!(found_one("foo@bar", Entity::Email).is_empty());
        assert!(found_one("john.@x.com", Entity::Email).is_empty());
        assert!(found_one("icon@2x.png", Entity::Email).is_empty());
        assert!(found_one("john@x.com2", Entity::Email).is_empty());
        assert!(found_one(&format!("{}@x.com", "a".repeat(65)), Entity::Email).is_empty());
        let local = "a".repeat(64);
        let email = format!("{local}@x.com");
        assert_eq!(found_one(&email, Entity::Email), vec![email.as_str()]);
    }

    #[test]
    fn phones() {
        for p in [
            "+1 415 555 2671",
            "+44 20 7946 0958",
            "+14155552671",
            "+49 (30) 1234567",
            "+1 (415) 555-2671",
            "+44 (0) 20 7946 0958",
            "+33 1 23 45 67 89",
            "(415) 555-2671",
            "415-555-2671",
            "415.555.2671",
            "415 555 2671",
            "1-800-555-0199",
            "020 7946 0958",
            "07700 900123",
            "01 23 45 67 89",
        ] {
            assert_eq!(found_one(&format!("call {p} now"), Entity::Phone), vec![p], "{p}");
        }
        for not in [
            "1700000000",
            "4155552671",
            "2024",
            "1,234,567",
            "2024-01-15",
            "15.01.2024",
            "12:30:45",
            "1.2.3",
            "192.168.1.1",
            "+1234567",
            "+12.345.678",
            "a+14155552671",
            "+14155552671x",
            "123-456-7890",
            "2-415-555-2671",
            "415-555-2671-9",
        ] {
            assert!(found_one(&format!("see {not} here"), Entity::Phone).is_empty(), "{not}");
        }
    }

    #[test]
    fn cards() {
        for c in [
            "4111 1111 1111 1111",
            "4111-1111-1111-1111",
            "4111111111111111",
            "378282246310005",
            "3782 822463 10005",
            "5555555555554444",
            "6011111111111117",
            "3530111333300000",
            "30569309025904",
            "2221000000000009",
        ] {
            assert_eq!(found_one(&format!("card {c}."), Entity::CreditCard), vec![c], "{c}");
        }
        for not in [
            "4111 1111 1111 1112",
            "1234567890123452",
            "12345678901234567890",
            "41111111111111111",
            "x4111111111111111",
            "1.4111111111111111",
        ] {
            assert!(found_one(&format!("n {not} n"), Entity::CreditCard).is_empty(), "{not}");
        }
        // A CVV or expiry month after a grouped number is not part of it.
        assert_eq!(found_one("4111 1111 1111 1111 123", Entity::CreditCard), vec!["4111 1111 1111 1111"]);
    }

    #[test]
    fn ssns() {
        assert_eq!(found_one("SSN 078-05-1120.", Entity::Ssn), vec!["078-05-1120"]);
        assert_eq!(found_one("ssn: 123 45 6789", Entity::Ssn), vec!["123 45 6789"]);
        for not in
            ["000-12-3456", "666-12-3456", "900-12-3456", "999-12-3456", "123-00-4567", "123-45-0000", "123456789"]
        {
            assert!(found_one(&format!("id {not} ok"), Entity::Ssn).is_empty(), "{not}");
        }
        assert!(found_one("1123-45-6789", Entity::Ssn).is_empty());
        assert!(found_one("123-45-6789-1", Entity::Ssn).is_empty());
        assert!(found_one("12 123 45 6789", Entity::Ssn).is_empty());
    }

    #[test]
    fn ibans() {
        for i in [
            "DE89 3704 0044 0532 0130 00",
            "DE89370400440532013000",
            "GB82WEST12345698765432",
            "GB82 WEST 1234 5698 7654 32",
            "FR1420041010050500013M02606",
            "NL91ABNA0417164300",
            "BE68539007547034",
            "CH9300762011623852957",
        ] {
            assert_eq!(found_one(&format!("pay to {i}, thanks"), Entity::Iban), vec![i], "{i}");
        }
        for not in [
            "DE89 3704 0044 0532 0130 01",
            "DE89370400440532013001",
            "de89370400440532013000",
            "XDE89370400440532013000",
        ] {
            assert!(found_one(&format!("pay to {not}"), Entity::Iban).is_empty(), "{not}");
        }
        assert_eq!(found_one("DE89 3704 0044 0532 0130 00 ABCD", Entity::Iban), vec!["DE89 3704 0044 0532 0130 00"]);
    }

    #[test]
    fn ip_addresses() {
        for ip in [
            "192.168.1.10",
            "10.0.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "::1",
            "fe80::1",
            "fe80::1ff:fe23:4567:890a",
            "2001:db8::8a2e:370:7334",
            "2001:0db8:85a3:0000:0000:8a2e:0370:7334",
            "::ffff:192.168.1.1",
        ] {
            assert_eq!(found_one(&format!("host {ip}."), Entity::IpAddress), vec![ip], "{ip}");
        }
        assert_eq!(found_one("http://10.0.0.1:8080/x", Entity::IpAddress), vec!["10.0.0.1"]);
        assert_eq!(found_one("http://[2001:db8::1]:8080/", Entity::IpAddress), vec!["2001:db8::1"]);
        assert_eq!(found_one("Server:fe80::1", Entity::IpAddress), vec!["fe80::1"]);
        assert_eq!(found_one("node:2001:db8::1", Entity::IpAddress), vec!["2001:db8::1"]);
        for not in [
            "1.2.3.4.5",
            "10.0.0.1.2",
            "v1.2.3.4",
            "256.1.1.1",
            "1.2.3.04",
            "01.2.3.4",
            "1.2.3",
            "12:30:45",
            "std::vec::Vec",
            "Foo::bar",
            "a::b",
            "dead::beef",
            "x[1::2]",
            "a[::2]",
            "u8::MAX",
            "00:1A:2B:3C:4D:5E",
            "::",
        ] {
            assert!(found_one(&format!("see {not} here"), Entity::IpAddress).is_empty(), "{not}");
        }
    }

    #[test]
    fn secrets() {
        let jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U";
        for s in [
            "sk-proj-abc123DEF456ghi789JKL012mno",
            "sk-ant-api03-abcdefghij0123456789",
            concat!("sk", "_live_", "abcdefghij0123456789"),
            concat!("rk", "_live_", "abcdefghij012345"),
            concat!("sk", "_test_", "abcdefghij012345"),
            "AKIAIOSFODNN7EXAMPLE",
            concat!("gh", "p_", "0123456789abcdefghijABCDEFGHIJ012345"),
            concat!("github", "_pat_", "11ABCDEFG0123456789_abcdefgh"),
            concat!("xo", "xb-", "1234567890-abcdefghij"),
            "AIzaSyA-1234567890abcdefghijklmnopqrstu",
            "glpat-abcdefghij0123456789",
            jwt,
        ] {
            assert_eq!(found_one(&format!("key={s} end"), Entity::Secret), vec![s], "{s}");
        }
        for not in [
            "sk-learn",
            "task-force",
            "ask-me-anything-please-now",
            "sk-this-is-a-hyphenated-phrase",
            "AKIA",
            "XAKIAIOSFODNN7EXAMPLE",
            "AKIAIOSFODNN7EXAMPLE2",
            "eyJhbGciOi",
            "ghp_short",
            "xoxo-hugs-and-kisses-forever",
        ] {
            assert!(found_one(&format!("a {not} b"), Entity::Secret).is_empty(), "{not}");
        }
    }

    #[test]
    fn token_caps() {
        let jwt_of = |len: usize| format!("eyJ{}.eyJbbbbb.cccccccccc", "a".repeat(len - 23));
        let longest = jwt_of(MAX_JWT_LEN);
        assert_eq!(longest.len(), MAX_JWT_LEN);
        assert_eq!(found_one(&longest, Entity::Secret), vec![longest.as_str()]);
        assert!(found_one(&jwt_of(MAX_JWT_LEN + 1), Entity::Secret).is_empty());
        let key = format!("sk-1{}", "a".repeat(MAX_TOKEN_LEN - 4));
        assert_eq!(found_one(&key, Entity::Secret), vec![key.as_str()]);
        assert!(found_one(&format!("{key}a"), Entity::Secret).is_empty());
    }

    #[test]
    fn private_key_blocks() {
        let body = "MIIBOgIBAAJBAKj34GkxFhD90vcNLYLInFEX6Ppy1tPf9Cnzj4p4WGeKLs1Pt8Qu\nKUpRKfFLfRYC9AIKjbJTWit+CqvjWYzvQwECAwEAAQ==";
        for kind in ["", "RSA ", "EC ", "OPENSSH ", "ENCRYPTED "] {
            let block = format!("-----BEGIN {kind}PRIVATE KEY-----\n{body}\n-----END {kind}PRIVATE KEY-----");
            let text = format!("here: {block}\nthanks");
            assert_eq!(found(&text), vec![(Entity::Secret, block.as_str())], "{kind}");
        }
        // JSON-escaped line breaks, as in a raw request body.
        let escaped =
            format!("-----BEGIN PRIVATE KEY-----\\n{}\\n-----END PRIVATE KEY-----", body.replace('\n', "\\n"));
        assert_eq!(found_one(&format!("\"{escaped}\""), Entity::Secret), vec![escaped.as_str()]);
        // A truncated paste: the header and the base64 that follows.
        let open = format!("-----BEGIN RSA PRIVATE KEY-----\n{body}");
        assert_eq!(found_one(&format!("{open}\n"), Entity::Secret), vec![open.as_str()]);
        // Prose about the format is not a key.
        assert!(found_one(
            "keys start with -----BEGIN PRIVATE KEY----- and end with -----END PRIVATE KEY----- lines",
            Entity::Secret
        )
        .is_empty());
        assert!(found_one("-----BEGIN PRIVATE KEY----- is the first line of a key file", Entity::Secret).is_empty());
        assert!(found_one("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----", Entity::Secret).is_empty());
    }

    #[test]
    fn overlaps_keep_the_earlier_then_longer_value() {
        // The IPv4 inside the IPv6 address and the national number inside the E.164 one go.
        assert_eq!(found("::ffff:192.168.1.1"), vec![(Entity::IpAddress, "::ffff:192.168.1.1")]);
        assert_eq!(found("+1 415 555 2671"), vec![(Entity::Phone, "+1 415 555 2671")]);
        // Same start: the e-mail is longer than the phone number in its local part.
        assert_eq!(found("+14155552671@example.com"), vec![(Entity::Email, "+14155552671@example.com")]);
        let spans = det().find("a 10.0.0.1 b john@x.com c 4111111111111111", EntitySet::all());
        assert!(spans.windows(2).all(|w| w[0].end <= w[1].start));
    }

    #[test]
    fn corpus() {
        use Entity::*;
        let jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U";
        let jwt_text = format!("Authorization: Bearer {jwt}");
        let rows: Vec<(&str, Vec<(Entity, &str)>)> = vec![
            // e-mail
            ("Contact john.doe@example.com today", vec![(Email, "john.doe@example.com")]),
            ("mailto:john@x.com", vec![(Email, "john@x.com")]),
            ("https://x.com/?email=john@x.com&a=1", vec![(Email, "john@x.com")]),
            ("user@localhost is local", vec![]),
            ("foo@bar", vec![]),
            ("xa@b.co", vec![(Email, "xa@b.co")]),
            ("Ünïcödé john@example.com 日本語", vec![(Email, "john@example.com")]),
            ("連絡先はjohn@example.comです", vec![(Email, "john@example.com")]),
            ("first.last+tag@sub.example.co.uk", vec![(Email, "first.last+tag@sub.example.co.uk")]),
            ("john..doe@example.com", vec![]),
            ("background: url(logo@2x.png)", vec![]),
            // phones
            ("Call +1 415 555 2671 now", vec![(Phone, "+1 415 555 2671")]),
            ("UK office: +44 20 7946 0958.", vec![(Phone, "+44 20 7946 0958")]),
            ("Berlin +49 (30) 1234567", vec![(Phone, "+49 (30) 1234567")]),
            ("(415) 555-2671", vec![(Phone, "(415) 555-2671")]),
            ("call 415.555.2671 or 020 7946 0958", vec![(Phone, "415.555.2671"), (Phone, "020 7946 0958")]),
            ("mobile 07700 900123", vec![(Phone, "07700 900123")]),
            ("Téléphone : 01 23 45 67 89 ☎", vec![(Phone, "01 23 45 67 89")]),
            ("phone 1-800-555-0199", vec![(Phone, "1-800-555-0199")]),
            ("call 4155552671", vec![]),
            ("order 1700000000 shipped", vec![]),
            ("+12.345.678 visitors", vec![]),
            // dates, times, versions, prices
            ("on 2024-01-15 at 12:30:45", vec![]),
            ("date 15.01.2024", vec![]),
            ("version 1.2.3 released", vec![]),
            ("price $1,234,567 and 12,345.67", vec![]),
            ("The year 2023 had 365 days and 12 months", vec![]),
            ("ISBN 978-3-16-148410-0", vec![]),
            // IP addresses
            ("Server at 192.168.1.10, backup 10.0.0.1.", vec![(IpAddress, "192.168.1.10"), (IpAddress, "10.0.0.1")]),
            ("1.2.3.4.5", vec![]),
            ("v10.0.0.1", vec![]),
            ("build 10.0.0.1.2", vec![]),
            ("host 256.1.1.1", vec![]),
            ("IP 1.2.3.04", vec![]),
            ("fe80::1ff:fe23:4567:890a", vec![(IpAddress, "fe80::1ff:fe23:4567:890a")]),
            (
                "loopback ::1 and 2001:db8::8a2e:370:7334",
                vec![(IpAddress, "::1"), (IpAddress, "2001:db8::8a2e:370:7334")],
            ),
            ("IPv4-mapped ::ffff:192.168.1.1", vec![(IpAddress, "::ffff:192.168.1.1")]),
            ("use std::vec::Vec; impl Foo::bar for a::b", vec![]),
            ("at 12:30:45 and 10:30", vec![]),
            ("x[1::2] and arr[::2]", vec![]),
            ("MAC 00:1A:2B:3C:4D:5E", vec![]),
            ("dead::beef", vec![]),
            ("Hash a3f5:9b2c", vec![]),
            // cards
            ("Card 4111 1111 1111 1111 on file", vec![(CreditCard, "4111 1111 1111 1111")]),
            ("4111-1111-1111-1111", vec![(CreditCard, "4111-1111-1111-1111")]),
            ("amex 378282246310005.", vec![(CreditCard, "378282246310005")]),
            ("bad 4111 1111 1111 1112", vec![]),
            ("order id 1234567890123452", vec![]),
            ("ref 12345678901234567890", vec![]),
            ("Timestamp 1700000000123", vec![]),
            ("card 4111111111111111 exp 12/25 cvv 123", vec![(CreditCard, "4111111111111111")]),
            ("4111 1111 1111 1111 123", vec![(CreditCard, "4111 1111 1111 1111")]),
            (
                "4012888888881881 and 5555555555554444",
                vec![(CreditCard, "4012888888881881"), (CreditCard, "5555555555554444")],
            ),
            // SSNs
            ("SSN 078-05-1120", vec![(Ssn, "078-05-1120")]),
            ("ssn 078 05 1120.", vec![(Ssn, "078 05 1120")]),
            ("000-12-3456 666-12-3456 900-12-3456", vec![]),
            ("123-00-4567 and 123-45-0000", vec![]),
            // IBANs
            ("IBAN DE89 3704 0044 0532 0130 00 please", vec![(Iban, "DE89 3704 0044 0532 0130 00")]),
            ("GB82WEST12345698765432", vec![(Iban, "GB82WEST12345698765432")]),
            ("NO9386011117947", vec![(Iban, "NO9386011117947")]),
            ("DE89 3704 0044 0532 0130 01", vec![]),
            ("lowercase de89370400440532013000 is not matched", vec![]),
            // secrets
            ("key sk-proj-abc123DEF456ghi789JKL012mno", vec![(Secret, "sk-proj-abc123DEF456ghi789JKL012mno")]),
            ("use sk-learn for ML", vec![]),
            ("the task-force met", vec![]),
            ("ask-me-anything-please-now", vec![]),
            ("AKIA alone", vec![]),
            ("aws AKIAIOSFODNN7EXAMPLE key", vec![(Secret, "AKIAIOSFODNN7EXAMPLE")]),
            ("token eyJhbGciOi alone", vec![]),
            ("ghp_short", vec![]),
            (jwt_text.as_str(), vec![(Secret, jwt)]),
            (
                concat!("slack ", "xo", "xb-", "1234567890-abcdefghij"),
                vec![(Secret, concat!("xo", "xb-", "1234567890-abcdefghij"))],
            ),
            // mixed
            (
                "Mail ann@corp.io or +44 20 7946 0958 from 10.1.2.3",
                vec![(Email, "ann@corp.io"), (Phone, "+44 20 7946 0958"), (IpAddress, "10.1.2.3")],
            ),
        ];
        assert!(rows.len() >= 40);
        for (input, expected) in rows {
            assert_eq!(found(input), expected, "{input}");
        }
    }

    const WORDS: &str = "[a-z ]{0,30}";

    fn card_number() -> impl Strategy<Value = String> {
        let brands: Vec<(&'static str, usize)> = vec![
            ("4", 13),
            ("4", 16),
            ("4", 19),
            ("51", 16),
            ("55", 16),
            ("2221", 16),
            ("2720", 16),
            ("34", 15),
            ("37", 15),
            ("6011", 16),
            ("6011", 19),
            ("65", 16),
            ("644", 16),
            ("649", 19),
            ("3528", 16),
            ("3589", 19),
            ("36", 14),
            ("38", 16),
            ("300", 14),
            ("305", 16),
            ("62", 16),
            ("62", 19),
            ("50", 16),
            ("56", 13),
            ("69", 19),
        ];
        (prop::sample::select(brands), prop::collection::vec(0u8..10, 19)).prop_map(|((prefix, len), fill)| {
            let mut s = String::from(prefix);
            s.extend(fill.into_iter().take(len - 1 - prefix.len()).map(|d| char::from(b'0' + d)));
            let check = (b'0'..=b'9')
                .find(|&d| {
                    let mut t = s.as_bytes().to_vec();
                    t.push(d);
                    luhn_valid(&t)
                })
                .expect("some check digit completes a Luhn-valid number");
            s.push(char::from(check));
            s
        })
    }

    fn iban_number() -> impl Strategy<Value = String> {
        let countries: Vec<(&'static str, usize)> = vec![
            ("DE", 22),
            ("GB", 22),
            ("FR", 27),
            ("ES", 24),
            ("IT", 27),
            ("NL", 18),
            ("BE", 16),
            ("CH", 21),
            ("AT", 20),
            ("PL", 28),
            ("SE", 24),
            ("NO", 15),
            ("DK", 18),
            ("FI", 18),
            ("IE", 22),
            ("PT", 25),
            ("LU", 20),
        ];
        (prop::sample::select(countries), prop::collection::vec(0u8..10, 30)).prop_map(|((cc, len), fill)| {
            let bban: String = fill.into_iter().take(len - 4).map(|d| char::from(b'0' + d)).collect();
            let mut rem = 0u32;
            for c in format!("{bban}{cc}00").chars() {
                let v = c.to_digit(36).expect("alphanumeric");
                rem = if v < 10 { (rem * 10 + v) % 97 } else { (rem * 100 + v) % 97 };
            }
            format!("{cc}{:02}{bban}", 98 - rem)
        })
    }

    fn local_part() -> impl Strategy<Value = String> {
        "[a-z0-9_+-]([a-z0-9._+-]{0,10}[a-z0-9_+-])?".prop_filter("no consecutive dots", |s| !s.contains(".."))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn generated_cards_are_found(
            before in WORDS,
            after in WORDS,
            card in card_number(),
            sep in prop::sample::select(vec!["", " ", "-"])
        ) {
            let value = if card.len() == 16 && !sep.is_empty() { group4(&card, sep) } else { card };
            let text = format!("{before} {value} {after}");
            prop_assert_eq!(found(&text), vec![(Entity::CreditCard, value.as_str())]);
        }

        #[test]
        fn generated_ibans_are_found(before in WORDS, after in WORDS, iban in iban_number(), grouped in any::<bool>()) {
            prop_assert!(iban_valid(&iban));
            let value = if grouped { group4(&iban, " ") } else { iban };
            let text = format!("{before} {value} {after}");
            prop_assert_eq!(found(&text), vec![(Entity::Iban, value.as_str())]);
        }

        #[test]
        fn generated_emails_are_found(
            before in WORDS,
            after in WORDS,
            local in local_part(),
            labels in prop::collection::vec("[a-z0-9]{1,10}", 1..4),
            tld in "[a-z]{2,6}"
        ) {
            let email = format!("{local}@{}.{tld}", labels.join("."));
            let text = format!("{before} {email} {after}");
            prop_assert_eq!(found(&text), vec![(Entity::Email, email.as_str())]);
        }

        #[test]
        fn prose_has_no_values(text in "[a-z éüß日本,.!?;:'\"()]{0,200}") {
            prop_assert_eq!(found(&text), Vec::<(Entity, &str)>::new());
        }

        #[test]
        fn spans_are_sorted_disjoint_and_on_char_boundaries(text in "[a-zA-Z0-9 .:@+()_é日-]{0,160}") {
            let spans = det().find(&text, EntitySet::all());
            for w in spans.windows(2) {
                prop_assert!(w[0].end <= w[1].start);
            }
            for s in &spans {
                prop_assert!(s.start < s.end && s.end - s.start <= MAX_VALUE_LEN);
                prop_assert!(text.is_char_boundary(s.start) && text.is_char_boundary(s.end));
            }
        }
    }
}
