//! Stripe's webhook signature scheme: the `Stripe-Signature` header is `t=<Unix seconds>` and one
//! or more `v1=<hex HMAC-SHA256>` (other schemes, such as `v0`, are ignored), each keyed with an
//! endpoint secret's bytes (the whole `whsec_...` string) over `{t}.{payload}`. A payload is
//! genuine when any `v1` matches any secret gw holds (two during a rotation) and `t` is within
//! the tolerance of now, either way.

use hmac::{Hmac, Mac};

/// Stripe's own default tolerance: five minutes.
pub const TOLERANCE_SECS: i64 = 300;
/// Longest header read.
const MAX_HEADER_BYTES: usize = 4096;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("the Stripe-Signature header is malformed")]
    Malformed,
    #[error("the Stripe-Signature header has no v1 signature")]
    NoSignature,
    #[error("the signature's timestamp is {0} s away from now, more than the 300 s allowed")]
    OutsideTolerance(i64),
    #[error("no signature matches")]
    Mismatch,
}

fn mac(secret: &str, timestamp: i64, payload: &[u8]) -> Hmac<sha2::Sha256> {
    // HMAC takes a key of any length: new_from_slice cannot fail.
    let mut m = <Hmac<sha2::Sha256> as Mac>::new_from_slice(secret.as_bytes())
        .unwrap_or_else(|_| unreachable!("HMAC accepts keys of every length"));
    m.update(timestamp.to_string().as_bytes());
    m.update(b".");
    m.update(payload);
    m
}

/// The header Stripe would send for `payload` signed with `secret` at `timestamp`.
pub fn sign(secret: &str, timestamp: i64, payload: &[u8]) -> String {
    format!("t={timestamp},v1={}", hex::encode(mac(secret, timestamp, payload).finalize().into_bytes()))
}

/// Checks `header` against `payload` with any of `secrets`, at `now` (Unix seconds); the signed
/// timestamp when genuine.
pub fn verify(header: &str, payload: &[u8], secrets: &[&str], now: i64) -> Result<i64, SignatureError> {
    if header.len() > MAX_HEADER_BYTES {
        return Err(SignatureError::Malformed);
    }
    let mut timestamp = None;
    let mut signatures = Vec::new();
    for part in header.split(',') {
        let (k, v) = part.trim().split_once('=').ok_or(SignatureError::Malformed)?;
        match k {
            "t" => timestamp = Some(v.parse::<i64>().map_err(|_| SignatureError::Malformed)?),
            "v1" => signatures.push(hex::decode(v).map_err(|_| SignatureError::Malformed)?),
            _ => {}
        }
    }
    let timestamp = timestamp.ok_or(SignatureError::Malformed)?;
    if signatures.is_empty() {
        return Err(SignatureError::NoSignature);
    }
    let age = now.saturating_sub(timestamp);
    if age.abs() > TOLERANCE_SECS {
        return Err(SignatureError::OutsideTolerance(age));
    }
    for secret in secrets {
        for sig in &signatures {
            // verify_slice compares in constant time.
            if mac(secret, timestamp, payload).verify_slice(sig).is_ok() {
                return Ok(timestamp);
            }
        }
    }
    Err(SignatureError::Mismatch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SECRET: &str = "whsec_test_secret";

    #[test]
    fn matches_the_official_library() {
        // stripe 16.1.0 (PyPI): WebhookSignature._compute_signature("1700000000.{\"id\":\"evt_1\"}",
        // "whsec_test_secret").
        let header = sign(SECRET, 1_700_000_000, br#"{"id":"evt_1"}"#);
        assert_eq!(header, "t=1700000000,v1=248a374f50f943a28b0f6ab50faf9a7e7e29b710fa26df9fb1618b9bf8ea9c9a");
    }

    #[test]
    fn a_genuine_header_verifies_within_the_tolerance_either_way() {
        let payload = br#"{"id":"evt_1"}"#;
        let h = sign(SECRET, 1_000, payload);
        assert_eq!(verify(&h, payload, &[SECRET], 1_000), Ok(1_000));
        assert_eq!(verify(&h, payload, &[SECRET], 1_300), Ok(1_000));
        assert_eq!(verify(&h, payload, &[SECRET], 700), Ok(1_000));
        assert_eq!(verify(&h, payload, &[SECRET], 1_301), Err(SignatureError::OutsideTolerance(301)));
        assert_eq!(verify(&h, payload, &[SECRET], 1_360), Err(SignatureError::OutsideTolerance(360)));
        assert_eq!(verify(&h, payload, &[SECRET], 699), Err(SignatureError::OutsideTolerance(-301)));
    }

    #[test]
    fn any_of_several_signatures_and_secrets_may_match() {
        let payload = b"{}";
        let old = sign("whsec_old", 5, payload);
        let new = sign("whsec_new", 5, payload);
        let both = format!("{old},v1={},v0=ignored", new.split_once("v1=").unwrap().1);
        assert_eq!(verify(&both, payload, &["whsec_new"], 5), Ok(5));
        assert_eq!(verify(&old, payload, &["whsec_new", "whsec_old"], 5), Ok(5));
        assert_eq!(verify(&old, payload, &["whsec_new"], 5), Err(SignatureError::Mismatch));
    }

    #[test]
    fn malformed_headers_are_refused() {
        for h in ["", "t=1", "v1=00", "t=x,v1=00", "t=1,v1=zz", "nonsense"] {
            assert!(verify(h, b"{}", &[SECRET], 1).is_err(), "{h}");
        }
        assert_eq!(verify("t=1,v0=00", b"{}", &[SECRET], 1), Err(SignatureError::NoSignature));
        assert_eq!(verify(&"t=1,".repeat(1000), b"{}", &[SECRET], 1), Err(SignatureError::Malformed));
    }

    proptest! {
        #[test]
        fn any_change_to_the_payload_or_timestamp_breaks_the_signature(
            payload in proptest::collection::vec(any::<u8>(), 0..256),
            flip in any::<usize>(),
            t in 0i64..2_000_000_000,
        ) {
            let h = sign(SECRET, t, &payload);
            prop_assert_eq!(verify(&h, &payload, &[SECRET], t), Ok(t));
            if !payload.is_empty() {
                let mut changed = payload.clone();
                let i = flip % changed.len();
                changed[i] ^= 1;
                prop_assert_eq!(verify(&h, &changed, &[SECRET], t), Err(SignatureError::Mismatch));
            }
            let moved = h.replacen(&format!("t={t}"), &format!("t={}", t + 1), 1);
            prop_assert_eq!(verify(&moved, &payload, &[SECRET], t), Err(SignatureError::Mismatch));
        }
    }
}
