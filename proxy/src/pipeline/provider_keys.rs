//! The organization's own provider keys: a cached lookup per organization (in-process, then
//! Redis, then Postgres, like API keys; still sealed in both caches), opened with the master
//! keyring at the attempt that needs one. An organization's key for a provider takes precedence
//! over the deployment's configured key for that organization's requests. Rotation and revocation
//! arrive over Redis; the next request reads the new secret.

use std::sync::Arc;

use async_trait::async_trait;
use gw_shared::db::provider_keys::{self, OrgProviderKeys};
use gw_shared::db::DbPool;
use uuid::Uuid;

use crate::ctx::RequestCtx;
use crate::error::ProxyError;
use crate::gateway::Gateway;
use crate::lookup::{LookupError, Source};

pub struct ProviderKeySource {
    pub db: DbPool,
}

#[async_trait]
impl Source for ProviderKeySource {
    type Key = Uuid;
    type Value = OrgProviderKeys;

    fn name(&self) -> &'static str {
        "provider_keys"
    }

    fn redis_key(&self, org_id: &Uuid) -> String {
        gw_shared::redis::provider_keys_cache_key(*org_id)
    }

    async fn load(&self, org_id: &Uuid) -> Result<Option<OrgProviderKeys>, String> {
        let mut conn = self.db.get().await.map_err(|e| e.to_string())?;
        // Always a value (possibly empty): an organization without keys is cached like one with.
        provider_keys::live_for_org(&mut conn, *org_id).await.map(Some).map_err(|e| e.to_string())
    }
}

/// The organization's live provider keys (sealed).
pub async fn for_request(gw: &Gateway, ctx: &RequestCtx) -> Result<Arc<OrgProviderKeys>, ProxyError> {
    let Some(key) = &ctx.key else { return Err(ProxyError::MissingAuth) };
    match gw.provider_keys.get(&key.org_id, &|| true).await {
        Ok(Some(keys)) => Ok(keys),
        Ok(None) => Ok(Arc::new(OrgProviderKeys::default())),
        Err(LookupError::NotAllowed | LookupError::Unavailable) => Err(ProxyError::StoreUnavailable),
    }
}

/// The secret of the organization's key for `provider`, opened; `None` when it has none.
pub fn secret_for(
    gw: &Gateway,
    keys: &OrgProviderKeys,
    org_id: Uuid,
    provider: &str,
) -> Result<Option<String>, ProxyError> {
    let Some(sealed) = keys.for_provider(provider) else { return Ok(None) };
    let ring = gw.keyring.as_ref().ok_or_else(|| {
        ProxyError::Internal(format!(
            "organization {org_id} has a key for provider {provider} but GW_ENCRYPTION_KEY is not set on this proxy"
        ))
    })?;
    sealed.open(ring, org_id).map(Some).map_err(|e| ProxyError::internal("provider key", e))
}
