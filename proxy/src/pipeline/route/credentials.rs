//! The organization's own provider keys: a cached lookup per organization (in-process, then
//! Redis, then Postgres, like API keys; still sealed in both caches), opened with the master
//! keyring at the attempt that needs one. An organization's key for a provider takes precedence
//! over the deployment's configured key for that organization's requests. Rotation and revocation
//! arrive over Redis; the next request reads the new secret.

use std::sync::Arc;

use gw_shared::db::provider_keys::{OrgProviderKeys, SealedKey};
use gw_shared::routing::Provider;
use uuid::Uuid;

use crate::ctx::RequestCtx;
use crate::error::ProxyError;
use crate::lookup::LookupError;
use crate::state::Gateway;

/// The organization's live provider keys (sealed).
pub async fn for_request(gw: &Gateway, ctx: &RequestCtx) -> Result<Arc<OrgProviderKeys>, ProxyError> {
    let Some(key) = &ctx.key else { return Err(ProxyError::MissingAuth) };
    match gw.lookups.provider_keys.get(&key.org_id, &|| true).await {
        Ok(Some(keys)) => Ok(keys),
        Ok(None) => Ok(Arc::new(OrgProviderKeys::default())),
        Err(LookupError::NotAllowed | LookupError::Unavailable) => Err(ProxyError::StoreUnavailable),
    }
}

/// The secret a rotation replaced, opened, while its overlap lasts; `None` otherwise (or when it
/// cannot be opened: the new secret's answer stands).
pub fn previous_for(gw: &Gateway, keys: &OrgProviderKeys, org_id: Uuid, provider: &Provider) -> Option<String> {
    let sealed = key_of(keys, provider)?;
    let ring = gw.keyring.as_ref()?;
    match sealed.open_previous(ring, org_id, chrono::Utc::now())? {
        Ok(s) => Some(s),
        Err(e) => {
            log::warn!("organization {org_id}: the previous key for provider {} does not open: {e}", provider.name);
            None
        }
    }
}

/// Whether the organization's own key serves `provider` (else the gateway's credentials do).
pub fn has_own_key(keys: &OrgProviderKeys, provider: &Provider) -> bool {
    key_of(keys, provider).is_some()
}

/// The organization's key that serves `provider`: the one its own provider names, else its key
/// for the gateway provider's name.
fn key_of<'a>(keys: &'a OrgProviderKeys, provider: &Provider) -> Option<&'a SealedKey> {
    match provider.org_key {
        Some(id) => keys.keys.iter().find(|k| k.id == id),
        None => keys.for_provider(&provider.name),
    }
}

/// The secret of the organization's key for `provider`, opened; `None` when it has none. An
/// organization's own provider without its live key cannot be called at all.
pub fn secret_for(
    gw: &Gateway,
    keys: &OrgProviderKeys,
    org_id: Uuid,
    provider: &Provider,
) -> Result<Option<String>, ProxyError> {
    let Some(sealed) = key_of(keys, provider) else {
        if provider.org_key.is_some() {
            return Err(ProxyError::UpstreamConnect {
                provider: provider.name.clone(),
                why: "the organization's provider key for it is revoked",
            });
        }
        return Ok(None);
    };
    let provider = &provider.name;
    let ring = gw.keyring.as_ref().ok_or_else(|| {
        ProxyError::Internal(format!(
            "organization {org_id} has a key for provider {provider} but GW_ENCRYPTION_KEY is not set on this proxy"
        ))
    })?;
    sealed.open(ring, org_id).map(Some).map_err(|e| ProxyError::internal("provider key", e))
}
