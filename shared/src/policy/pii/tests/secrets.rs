//! Secrets: provider keys, JWTs and private key blocks, their length caps, and the pre-scan gate
//! that skips their scan in text that cannot hold one.

use proptest::prelude::*;

use super::*;

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
fn prose_is_not_scanned_for_secrets() {
    for prose in ["The quarterly report covers onboarding, pricing and Administration.", "a well-known fact", ""] {
        let gated = !Scan::of(prose).secretish;
        assert_eq!(gated, !prose.contains("well-known"), "{prose}");
    }
    assert!(Scan::of("token eyJhbGci").secretish);
    assert!(!Scan::of("token eyJhbGc").secretish);
    // The shortest values each pattern takes are still found.
    for value in ["eyJabcde.eyJabcde.abcdefghij", "xoxb-abcdefghi1", "AKIAABCDEFGHIJKLMNOP"] {
        assert_eq!(found_one(&format!("t {value} e"), Entity::Secret), vec![value]);
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
    let escaped = format!("-----BEGIN PRIVATE KEY-----\\n{}\\n-----END PRIVATE KEY-----", body.replace('\n', "\\n"));
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

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn the_secret_gate_skips_no_secret(
        words in prop::collection::vec(
            (
                prop::sample::select(vec![
                    "", "", "sk-", "sk_live_", "rk_test_", "pk_live_", "AKIA", "ASIA", "ghp_", "github_pat_",
                    "xoxb-", "AIza", "glpat-", "eyJ", "-----BEGIN", " PRIVATE KEY-----", "-----END", "\\n",
                ]),
                prop_oneof!["[A-Za-z0-9_-]{0,40}", "[a-z0-9]{10,12}", "[A-Z0-9]{16}", "[a-z]{5,12}\\.eyJ[a-z]{5}"],
                prop::sample::select(vec![" ", ".", "\n", "=", "\"", "é"]),
            ),
            0..8,
        )
    ) {
        let parts: Vec<String> = words.iter().map(|(p, body, sep)| format!("{p}{body}{sep}")).collect();
        let text = parts.concat();
        let mut ungated = Vec::new();
        det().secrets(&text, &mut ungated);
        checks::private_keys(&text, &mut ungated);
        let want = resolve_overlaps(ungated);
        prop_assert_eq!(det().find(&text, EntitySet::empty().with(Entity::Secret)), want);
    }
}
