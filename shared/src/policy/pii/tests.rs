//! Detector tests: each kind, a corpus of tricky cases, and properties over random text.

use super::*;
use proptest::prelude::*;

/// Provider keys, tokens and private key blocks, and the gate in front of their scan.
mod secrets;

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
    for not in ["000-12-3456", "666-12-3456", "900-12-3456", "999-12-3456", "123-00-4567", "123-45-0000", "123456789"] {
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
    for not in
        ["DE89 3704 0044 0532 0130 01", "DE89370400440532013001", "de89370400440532013000", "XDE89370400440532013000"]
    {
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
        ("loopback ::1 and 2001:db8::8a2e:370:7334", vec![(IpAddress, "::1"), (IpAddress, "2001:db8::8a2e:370:7334")]),
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

pub(crate) fn card_number() -> impl Strategy<Value = String> {
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

pub(crate) fn iban_number() -> impl Strategy<Value = String> {
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

pub(crate) fn local_part() -> impl Strategy<Value = String> {
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
