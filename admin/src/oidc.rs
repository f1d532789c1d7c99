//! The OpenID Connect relying party SSO sign-in uses (openidconnect): provider discovery (cached
//! per issuer for five minutes), the authorization request (authorization code flow, scopes
//! `openid email profile`, PKCE S256, a nonce and a CSRF `state`), the code exchange
//! (`client_secret_basic`, with the PKCE verifier), and ID token verification: signature against
//! the provider's JWKS, issuer, audience, expiry and nonce. What the sign-in needs (subject,
//! e-mail, whether it is verified, name, groups) is read from the verified ID token itself, never
//! from the userinfo endpoint.
//!
//! Every request to an identity provider goes through `AppState::outbound`, the one outbound
//! guard (`crate::outbound`): permitted addresses only, no redirects, bounded answers. An address
//! the guard refuses is 502 naming it; other network failures are 503 with a generic message
//! (the detail is logged); a refused code or an ID token that fails a check is 401 with a message
//! naming the check.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use moka::future::Cache;
use openidconnect::core::{
    CoreAuthDisplay, CoreAuthPrompt, CoreAuthenticationFlow, CoreErrorResponseType, CoreGenderClaim, CoreJsonWebKey,
    CoreJweContentEncryptionAlgorithm, CoreJwsSigningAlgorithm, CoreProviderMetadata, CoreRevocableToken,
    CoreRevocationErrorResponse, CoreTokenIntrospectionResponse, CoreTokenType,
};
use openidconnect::{
    AdditionalClaims, AuthType, AuthorizationCode, ClaimsVerificationError, Client, ClientId, ClientSecret, CsrfToken,
    EmptyExtraTokenFields, EndpointMaybeSet, EndpointNotSet, EndpointSet, IdTokenClaims, IdTokenFields, IssuerUrl,
    LoginHint, Nonce, PkceCodeChallenge, PkceCodeVerifier, RedirectUrl, RequestTokenError, Scope,
    StandardErrorResponse, StandardTokenResponse, TokenResponse,
};
use serde::{Deserialize, Serialize};

use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

/// How long discovered provider metadata (endpoints and signing keys) is reused.
const METADATA_TTL: Duration = Duration::from_secs(300);
/// The most issuers whose metadata is kept at once.
const METADATA_CAPACITY: u64 = 256;

/// Every claim of the ID token that is not a registered or standard one (the groups claim is
/// one of them, under whatever name the connection gives it).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExtraClaims {
    #[serde(flatten)]
    pub claims: serde_json::Map<String, serde_json::Value>,
}

impl AdditionalClaims for ExtraClaims {}

type IdToken =
    openidconnect::IdToken<ExtraClaims, CoreGenderClaim, CoreJweContentEncryptionAlgorithm, CoreJwsSigningAlgorithm>;
type Claims = IdTokenClaims<ExtraClaims, CoreGenderClaim>;
type Fields = IdTokenFields<
    ExtraClaims,
    EmptyExtraTokenFields,
    CoreGenderClaim,
    CoreJweContentEncryptionAlgorithm,
    CoreJwsSigningAlgorithm,
>;
type Tokens = StandardTokenResponse<Fields, CoreTokenType>;
type TokenError = StandardErrorResponse<CoreErrorResponseType>;

/// A client built from discovered metadata: authorization endpoint set, token and userinfo
/// endpoints as the provider announced them.
type RpClient = Client<
    ExtraClaims,
    CoreAuthDisplay,
    CoreGenderClaim,
    CoreJweContentEncryptionAlgorithm,
    CoreJsonWebKey,
    CoreAuthPrompt,
    TokenError,
    Tokens,
    CoreTokenIntrospectionResponse,
    CoreRevocableToken,
    CoreRevocationErrorResponse,
    EndpointSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointMaybeSet,
    EndpointMaybeSet,
>;

static METADATA: LazyLock<Cache<String, Arc<CoreProviderMetadata>>> =
    LazyLock::new(|| Cache::builder().max_capacity(METADATA_CAPACITY).time_to_live(METADATA_TTL).build());

/// An error and its sources, for the log.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// A failed request to the identity provider: the guard's refusal said as it is, anything else
/// generic.
fn failed_request(issuer: &str, what: &str, e: &(dyn std::error::Error + 'static)) -> ApiError {
    if let Some(why) = crate::outbound::OutboundError::refusal_in(e) {
        log::warn!("SSO: {what} at {issuer} refused by the outbound guard: {why}");
        return ApiError::BadGateway(format!(
            "the identity provider's address is not allowed: {why} (an operator may allow its network: admin.outbound_allow)"
        ));
    }
    unreachable_idp(issuer, what, &chain(e))
}

fn unreachable_idp(issuer: &str, what: &str, detail: &str) -> ApiError {
    log::warn!("SSO: {what} at {issuer} failed: {detail}");
    ApiError::Unavailable("the identity provider could not be reached or answered unexpectedly; retry shortly".into())
}

/// The provider's metadata and signing keys: from the cache unless `fresh`, else discovered
/// (`<issuer>/.well-known/openid-configuration`, whose `issuer` must equal the connection's
/// exactly, then the JWKS) and cached.
async fn provider(state: &AppState, issuer: &str, fresh: bool) -> ApiResult<Arc<CoreProviderMetadata>> {
    if !fresh {
        if let Some(m) = METADATA.get(issuer).await {
            return Ok(m);
        }
    }
    let url = IssuerUrl::new(issuer.to_string())
        .map_err(|e| unreachable_idp(issuer, "parsing the issuer", &e.to_string()))?;
    let http = |req| state.outbound.call(req);
    let metadata =
        CoreProviderMetadata::discover_async(url, &http).await.map_err(|e| failed_request(issuer, "discovery", &e))?;
    let metadata = Arc::new(metadata);
    METADATA.insert(issuer.to_string(), metadata.clone()).await;
    Ok(metadata)
}

fn client(metadata: &CoreProviderMetadata, client_id: &str, secret: Option<&str>) -> RpClient {
    RpClient::from_provider_metadata(
        metadata.clone(),
        ClientId::new(client_id.to_string()),
        secret.map(|s| ClientSecret::new(s.to_string())),
    )
    .set_auth_type(AuthType::BasicAuth)
}

fn redirect_url(redirect_uri: &str) -> ApiResult<RedirectUrl> {
    RedirectUrl::new(redirect_uri.to_string())
        .map_err(|e| ApiError::Internal(format!("the SSO redirect URI {redirect_uri:?} is not a URL: {e}")))
}

/// A started sign-in: where to send the user, and what the callback needs to finish it.
pub struct AuthRequest {
    pub url: String,
    /// The `state` parameter (CSRF token): the key the pending sign-in is kept under.
    pub state: String,
    pub nonce: String,
    pub pkce_verifier: String,
}

/// Builds the authorization URL for a connection: code flow, scopes `openid email profile`,
/// PKCE S256, a fresh nonce and state; `login_hint` when the user gave an address.
pub async fn authorization_request(
    state: &AppState,
    issuer: &str,
    client_id: &str,
    redirect_uri: &str,
    login_hint: Option<&str>,
) -> ApiResult<AuthRequest> {
    let metadata = provider(state, issuer, false).await?;
    let client = client(&metadata, client_id, None).set_redirect_uri(redirect_url(redirect_uri)?);
    let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
    let mut request = client
        .authorize_url(CoreAuthenticationFlow::AuthorizationCode, CsrfToken::new_random, Nonce::new_random)
        .add_scope(Scope::new("email".to_string()))
        .add_scope(Scope::new("profile".to_string()))
        .set_pkce_challenge(challenge);
    if let Some(hint) = login_hint {
        request = request.set_login_hint(LoginHint::new(hint.to_string()));
    }
    let (url, csrf, nonce) = request.url();
    Ok(AuthRequest {
        url: url.to_string(),
        state: csrf.secret().clone(),
        nonce: nonce.secret().clone(),
        pkce_verifier: verifier.secret().clone(),
    })
}

/// What the callback sends to the token endpoint, and what the ID token must match.
pub struct Exchange<'a> {
    pub issuer: &'a str,
    pub client_id: &'a str,
    pub client_secret: &'a str,
    pub redirect_uri: &'a str,
    /// The claim holding group names.
    pub groups_claim: &'a str,
    pub code: String,
    pub nonce: String,
    pub pkce_verifier: String,
}

/// Who signed in, as the verified ID token says.
#[derive(Debug, Clone)]
pub struct Identity {
    pub subject: String,
    pub email: String,
    /// `None` when the provider does not say (only an explicit `false` is refused).
    pub email_verified: Option<bool>,
    pub name: Option<String>,
    pub groups: Vec<String>,
}

/// Why the token endpoint's answer is not usable.
fn token_error<RE>(issuer: &str, e: RequestTokenError<RE, TokenError>) -> ApiError
where
    RE: std::error::Error + 'static,
{
    match e {
        RequestTokenError::ServerResponse(r) => {
            log::warn!(
                "SSO: token endpoint of {issuer} refused the code: {} ({})",
                r.error(),
                r.error_description().map(String::as_str).unwrap_or("no description")
            );
            ApiError::Unauthorized(format!("the identity provider refused the authorization code: {}", r.error()))
        }
        RequestTokenError::Parse(e, _) => {
            log::warn!("SSO: unreadable token response from {issuer}: {e}");
            ApiError::Unauthorized("the identity provider's token response could not be read".into())
        }
        RequestTokenError::Request(e) => failed_request(issuer, "the token request", &e),
        RequestTokenError::Other(m) => unreachable_idp(issuer, "the token request", &m),
    }
}

/// A distinct 401 for each check an ID token can fail.
fn claims_error(e: &ClaimsVerificationError) -> ApiError {
    let message = match e {
        ClaimsVerificationError::SignatureVerification(_) => "the ID token's signature is invalid",
        ClaimsVerificationError::InvalidIssuer(_) => "the ID token's issuer does not match the connection's issuer",
        ClaimsVerificationError::InvalidAudience(_) => {
            "the ID token's audience does not include the connection's client_id"
        }
        ClaimsVerificationError::Expired(_) => "the ID token has expired",
        ClaimsVerificationError::InvalidNonce(_) => "the ID token's nonce does not match this sign-in",
        _ => "the ID token was rejected",
    };
    ApiError::Unauthorized(message.into())
}

fn verify<'t>(
    id_token: &'t IdToken,
    metadata: &CoreProviderMetadata,
    x: &Exchange<'_>,
    nonce: &Nonce,
) -> Result<&'t Claims, ClaimsVerificationError> {
    let client = client(metadata, x.client_id, Some(x.client_secret));
    let verifier = client.id_token_verifier();
    id_token.claims(&verifier, nonce)
}

/// The identity in verified claims: the e-mail must be present and not marked unverified; the
/// groups claim, when present, must be a string or an array of strings.
fn identity(claims: &Claims, groups_claim: &str) -> ApiResult<Identity> {
    let email = claims.email().map(|e| e.as_str().to_string()).ok_or_else(|| {
        ApiError::Unauthorized(
            "the ID token has no email claim: the identity provider must release the email scope".into(),
        )
    })?;
    let email_verified = claims.email_verified();
    if email_verified == Some(false) {
        return Err(ApiError::Unauthorized("the identity provider marks this e-mail address as unverified".into()));
    }
    let name = claims.name().and_then(|n| n.get(None)).map(|n| n.as_str().to_string());
    let groups = gw_shared::sso::parse_groups(claims.additional_claims().claims.get(groups_claim))
        .map_err(|m| ApiError::Unauthorized(format!("the ID token's {groups_claim:?} claim {m}")))?;
    Ok(Identity { subject: claims.subject().as_str().to_string(), email, email_verified, name, groups })
}

/// Exchanges the code (client secret by HTTP Basic, PKCE verifier) and verifies the ID token.
/// A signature failure is retried once against freshly fetched keys (the provider may have
/// rotated them since they were cached).
pub async fn exchange(state: &AppState, x: Exchange<'_>) -> ApiResult<Identity> {
    let metadata = provider(state, x.issuer, false).await?;
    let client = client(&metadata, x.client_id, Some(x.client_secret)).set_redirect_uri(redirect_url(x.redirect_uri)?);
    let request = client.exchange_code(AuthorizationCode::new(x.code.clone())).map_err(|e| {
        log::warn!("SSO: {} announces no token endpoint: {e}", x.issuer);
        ApiError::Unavailable("the identity provider announces no token endpoint".into())
    })?;
    let tokens = request
        .set_pkce_verifier(PkceCodeVerifier::new(x.pkce_verifier.clone()))
        .request_async(&|req| state.outbound.call(req))
        .await
        .map_err(|e| token_error(x.issuer, e))?;
    let id_token =
        tokens.id_token().ok_or_else(|| ApiError::Unauthorized("the identity provider returned no ID token".into()))?;
    let nonce = Nonce::new(x.nonce.clone());
    let claims = match verify(id_token, &metadata, &x, &nonce) {
        Ok(c) => c,
        Err(ClaimsVerificationError::SignatureVerification(first)) => {
            log::info!("SSO: ID token from {} failed signature verification ({first}); refetching keys", x.issuer);
            let fresh = provider(state, x.issuer, true).await?;
            verify(id_token, &fresh, &x, &nonce).map_err(|e| {
                log::warn!("SSO: ID token from {} rejected: {e}", x.issuer);
                claims_error(&e)
            })?
        }
        Err(e) => {
            log::warn!("SSO: ID token from {} rejected: {e}", x.issuer);
            return Err(claims_error(&e));
        }
    };
    identity(claims, x.groups_claim)
}

#[cfg(test)]
mod tests {
    use super::*;
    use openidconnect::SignatureVerificationError;
    use serde_json::json;

    fn claims(extra: serde_json::Value) -> Claims {
        let mut base = json!({
            "iss": "http://127.0.0.1:9400",
            "aud": ["gw"],
            "exp": 4_000_000_000u64,
            "iat": 1_700_000_000u64,
            "sub": "alice",
            "email": "alice@example.com",
            "name": "Alice",
        });
        if let (Some(b), Some(e)) = (base.as_object_mut(), extra.as_object()) {
            for (k, v) in e {
                b.insert(k.clone(), v.clone());
            }
        }
        serde_json::from_value(base).unwrap()
    }

    #[test]
    fn custom_claims_are_kept_and_standard_ones_read() {
        let c = claims(json!({"groups": ["admins", "eng"], "roles": "ops"}));
        let id = identity(&c, "groups").unwrap();
        assert_eq!(id.subject, "alice");
        assert_eq!(id.email, "alice@example.com");
        assert_eq!(id.name.as_deref(), Some("Alice"));
        assert_eq!(id.email_verified, None);
        assert_eq!(id.groups, vec!["admins".to_string(), "eng".to_string()]);
        assert_eq!(identity(&c, "roles").unwrap().groups, vec!["ops".to_string()]);
        assert!(identity(&c, "absent").unwrap().groups.is_empty());
    }

    #[test]
    fn unverified_or_missing_emails_and_bad_groups_are_refused() {
        assert!(identity(&claims(json!({"email_verified": true})), "groups").is_ok());
        assert!(matches!(
            identity(&claims(json!({"email_verified": false})), "groups"),
            Err(ApiError::Unauthorized(_))
        ));
        let no_email = claims(json!({})).set_email(None);
        assert!(matches!(identity(&no_email, "groups"), Err(ApiError::Unauthorized(_))));
        assert!(matches!(identity(&claims(json!({"groups": [1, 2]})), "groups"), Err(ApiError::Unauthorized(_))));
    }

    #[test]
    fn each_failed_check_has_its_own_message() {
        let cases = [
            (
                ClaimsVerificationError::SignatureVerification(SignatureVerificationError::CryptoError("x".into())),
                "signature",
            ),
            (ClaimsVerificationError::InvalidIssuer("x".into()), "issuer"),
            (ClaimsVerificationError::InvalidAudience("x".into()), "audience"),
            (ClaimsVerificationError::Expired("x".into()), "expired"),
            (ClaimsVerificationError::InvalidNonce("x".into()), "nonce"),
        ];
        let mut seen = Vec::new();
        for (e, word) in cases {
            let ApiError::Unauthorized(m) = claims_error(&e) else { panic!("not a 401") };
            assert!(m.contains(word), "{m}");
            assert!(!seen.contains(&m), "{m} twice");
            seen.push(m);
        }
    }
}
