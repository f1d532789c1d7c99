//! Short-lived access tokens for the management API (HS256 JWTs).

use chrono::Utc;
use jsonwebtoken::{decode, encode, Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::error::{Error, Result};

const TOKEN_TYPE: &str = "access";

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct AccessClaims {
    /// The user.
    pub sub: Uuid,
    /// The organization the session acts in.
    pub org: Uuid,
    /// The sign-in session (refresh-token family): checked live on every request.
    pub sid: Uuid,
    pub role: String,
    pub typ: String,
    pub iat: i64,
    pub exp: i64,
    pub jti: Uuid,
}

pub fn issue_access_token(
    secret: &str,
    user: Uuid,
    org: Uuid,
    sid: Uuid,
    role: &str,
    ttl_secs: i64,
) -> Result<(String, AccessClaims)> {
    let now = Utc::now().timestamp();
    let claims = AccessClaims {
        sub: user,
        org,
        sid,
        role: role.to_string(),
        typ: TOKEN_TYPE.into(),
        iat: now,
        exp: now + ttl_secs,
        jti: Uuid::new_v4(),
    };
    let token = encode(&Header::new(Algorithm::HS256), &claims, &EncodingKey::from_secret(secret.as_bytes()))
        .map_err(|e| Error::Token(e.to_string()))?;
    Ok((token, claims))
}

pub fn verify_access_token(secret: &str, token: &str) -> Result<AccessClaims> {
    let mut validation = Validation::new(Algorithm::HS256);
    validation.leeway = 5;
    validation.set_required_spec_claims(&["exp", "sub"]);
    let data = decode::<AccessClaims>(token, &DecodingKey::from_secret(secret.as_bytes()), &validation)
        .map_err(|e| Error::Token(e.to_string()))?;
    if data.claims.typ != TOKEN_TYPE {
        return Err(Error::Token("not an access token".into()));
    }
    Ok(data.claims)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let (u, o) = (Uuid::new_v4(), Uuid::new_v4());
        let (t, c) = issue_access_token("s3cret", u, o, Uuid::new_v4(), "owner", 60).unwrap();
        let back = verify_access_token("s3cret", &t).unwrap();
        assert_eq!(back, c);
        assert!(verify_access_token("other", &t).is_err());
    }

    #[test]
    fn expired_is_rejected() {
        let (t, _) = issue_access_token("s", Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4(), "owner", -60).unwrap();
        assert!(verify_access_token("s", &t).is_err());
    }

    #[test]
    fn garbage_is_rejected() {
        assert!(verify_access_token("s", "sk_live_abc").is_err());
        assert!(verify_access_token("s", "a.b.c").is_err());
    }
}
