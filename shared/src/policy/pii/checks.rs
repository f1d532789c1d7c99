//! The checks a regex cannot express: checksums (Luhn, IBAN mod 97), issuer prefixes, edges,
//! plausibility of IPv6 and secrets, and PEM private key blocks, found without a regex.

use super::*;

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

pub(super) fn iban_length(country: [u8; 2]) -> Option<usize> {
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
pub(super) struct Scan {
    pub(super) digits: usize,
    /// Most digits in one cluster: digits with at most two other bytes between neighbours, which
    /// covers every separator the patterns allow (`) `, ` (`).
    pub(super) cluster: usize,
    pub(super) at: bool,
    pub(super) colon: bool,
    pub(super) plus: bool,
    pub(super) dot: bool,
    pub(super) upper: bool,
    /// A run of at least [`SECRET_RUN`] key characters (`[A-Za-z0-9_-]`) holding a `_`, a `-` or an
    /// uppercase letter after its first character. Every secret pattern starts such a run (`sk-`,
    /// `sk_live_`, `AKIA`, `AIza`, `eyJ`, `-----BEGIN`, …); ordinary prose has none.
    pub(super) secretish: bool,
}

/// The shortest marked run a secret starts: a JWT's `eyJ` and five more characters.
pub(super) const SECRET_RUN: usize = 8;

impl Scan {
    pub(super) fn of(text: &str) -> Self {
        let mut scan = Scan::default();
        let mut run = 0usize;
        let mut gap = 3usize;
        let mut key_run = 0usize;
        let mut marked = false;
        for &b in text.as_bytes() {
            if b.is_ascii_alphanumeric() || b == b'_' || b == b'-' {
                marked |= b == b'_' || b == b'-' || (key_run > 0 && b.is_ascii_uppercase());
                key_run += 1;
                scan.secretish |= marked && key_run >= SECRET_RUN;
            } else {
                key_run = 0;
                marked = false;
            }
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
pub(super) fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

pub(super) fn byte_before(bytes: &[u8], i: usize) -> Option<&u8> {
    i.checked_sub(1).and_then(|j| bytes.get(j))
}

/// Whether `start..end` stands on its own: no word character next to it, and no separator from
/// `seps` that joins it to another digit (`1.2.3.4.5`, `2024-415-555-2671`).
pub(super) fn bounded(bytes: &[u8], start: usize, end: usize, seps: &[u8]) -> bool {
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
pub(super) fn longest_grouped(s: &str, mut ok: impl FnMut(&str) -> bool) -> Option<usize> {
    let mut end = s.len();
    loop {
        let candidate = s.get(..end)?;
        if ok(candidate) {
            return Some(end);
        }
        end = candidate.rfind([' ', '-'])?;
    }
}

pub(super) fn email_valid(s: &str) -> bool {
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
pub(super) fn retina_asset(host: &str, tld: &str) -> bool {
    let density = host.strip_suffix('x').is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    density && matches!(tld.to_ascii_lowercase().as_str(), "png" | "jpg" | "jpeg" | "gif" | "webp" | "svg" | "avif")
}

/// `+12.345.678`: a signed number with thousands separators, not a phone.
pub(super) fn thousands_grouped(s: &str) -> bool {
    s.contains('.') && !s.contains([' ', '-', '(']) && s.split('.').skip(1).all(|g| g.len() == 3)
}

pub(super) fn card_number_valid(s: &str) -> bool {
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
pub(super) fn card_brand_ok(d: &[u8]) -> bool {
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

pub(super) fn iban_text_valid(s: &str) -> bool {
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
pub(super) fn ipv6_plausible(c: &str) -> bool {
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

pub(super) fn secret_shape_ok(s: &str) -> bool {
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
pub(super) fn private_keys(text: &str, out: &mut Vec<Span>) {
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
pub(super) fn after_key_label(s: &str) -> Option<&str> {
    let s = s.strip_prefix(' ')?;
    KEY_KINDS.iter().find_map(|kind| s.strip_prefix(*kind)?.strip_prefix("PRIVATE KEY-----"))
}

/// Bytes a key body may hold: base64, line breaks (also JSON-escaped ones, `\n`), and the
/// `Proc-Type: 4,ENCRYPTED` / `DEK-Info: AES-128-CBC,…` headers of legacy encrypted keys.
pub(super) fn key_body_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric()
        || matches!(b, b'+' | b'/' | b'=' | b'\r' | b'\n' | b'\t' | b' ' | b':' | b',' | b'-' | b'.' | b'\\')
}

pub(super) fn base64_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'=')
}

/// Where the key block whose `-----BEGIN` ends at `marker_end` ends: after its END line, or, for a
/// block that never closes (a truncated paste), after the base64 lines that follow the header.
pub(super) fn key_block_end(text: &str, marker_end: usize) -> Option<usize> {
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

pub(super) fn resolve_overlaps(mut spans: Vec<Span>) -> Vec<Span> {
    spans.sort_unstable_by(|a, b| a.start.cmp(&b.start).then(b.end.cmp(&a.end)).then(a.entity.cmp(&b.entity)));
    let mut out: Vec<Span> = Vec::with_capacity(spans.len());
    for s in spans {
        if out.last().is_none_or(|last| s.start >= last.end) {
            out.push(s);
        }
    }
    out
}
