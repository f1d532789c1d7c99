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
        if entities.contains(Entity::Secret) && scan.secretish {
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

mod checks;
#[cfg(test)]
pub(crate) mod tests;

use checks::*;
pub use checks::{iban_valid, luhn_valid};
