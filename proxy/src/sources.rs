//! Every kind of data the proxy reads from Postgres through the one cached lookup
//! ([`crate::lookup`]): API keys, teams, organizations' settings, policies (and their compiled
//! form), cache settings and provider keys. Each [`Source`] names its Redis copy and its query;
//! the invalidation listener evicts them, the pipeline's steps read them.

use std::sync::Arc;

use async_trait::async_trait;
use gw_shared::cache::settings::OrgCacheSettings;
use gw_shared::db::api_keys::{self, KeyAuth};
use gw_shared::db::orgs::{self, OrgSettings};
use gw_shared::db::policies::{self, StoredPolicy};
use gw_shared::db::provider_keys::{self, OrgProviderKeys};
use gw_shared::db::teams::{self, LiveTeam};
use gw_shared::db::{cache as db_cache, experiments, prompt_templates, DbPool};
use gw_shared::experiments::spec::Running;
use gw_shared::keys::KeyHash;
use gw_shared::policy::engine::PolicySet;
use gw_shared::policy::spec::OrgPolicy;
use gw_shared::prompt_template::Content;
use uuid::Uuid;

use crate::lookup::{Lookup, LookupError, Source};

pub struct KeySource {
    pub db: DbPool,
}

#[async_trait]
impl Source for KeySource {
    type Key = KeyHash;
    type Value = KeyAuth;

    fn name(&self) -> &'static str {
        "api_key"
    }

    fn redis_key(&self, key: &KeyHash) -> String {
        gw_shared::redis::api_key_cache_key(key)
    }

    async fn load(&self, key: &KeyHash) -> Result<Option<KeyAuth>, String> {
        let mut conn = self.db.get().await.map_err(|e| e.to_string())?;
        api_keys::find_by_hash(&mut conn, key).await.map_err(|e| e.to_string())
    }
}

/// Live teams by (organization, team): unknown ones are remembered as unknown.
pub struct TeamSource {
    pub db: DbPool,
}

#[async_trait]
impl Source for TeamSource {
    type Key = (Uuid, Uuid);
    type Value = LiveTeam;

    fn name(&self) -> &'static str {
        "team"
    }

    fn redis_key(&self, (org_id, team_id): &(Uuid, Uuid)) -> String {
        gw_shared::redis::team_cache_key(*org_id, *team_id)
    }

    async fn load(&self, &(org_id, team_id): &(Uuid, Uuid)) -> Result<Option<LiveTeam>, String> {
        let mut conn = self.db.get().await.map_err(|e| e.to_string())?;
        teams::live(&mut conn, org_id, team_id).await.map_err(|e| e.to_string())
    }
}

/// An organization's own limits and audit settings.
pub struct OrgSource {
    pub db: DbPool,
}

#[async_trait]
impl Source for OrgSource {
    type Key = Uuid;
    type Value = OrgSettings;

    fn name(&self) -> &'static str {
        "org"
    }

    fn redis_key(&self, org_id: &Uuid) -> String {
        gw_shared::redis::org_cache_key(*org_id)
    }

    async fn load(&self, org_id: &Uuid) -> Result<Option<OrgSettings>, String> {
        let mut conn = self.db.get().await.map_err(|e| e.to_string())?;
        orgs::settings(&mut conn, *org_id).await.map_err(|e| e.to_string())
    }
}

/// An organization's policy document (compiled per version: [`Compiled`]).
pub struct PolicySource {
    pub db: DbPool,
}

#[async_trait]
impl Source for PolicySource {
    type Key = Uuid;
    type Value = StoredPolicy;

    fn name(&self) -> &'static str {
        "policy"
    }

    fn redis_key(&self, org_id: &Uuid) -> String {
        gw_shared::redis::policy_cache_key(*org_id)
    }

    async fn load(&self, org_id: &Uuid) -> Result<Option<StoredPolicy>, String> {
        let mut conn = self.db.get().await.map_err(|e| e.to_string())?;
        policies::current(&mut conn, *org_id).await.map_err(|e| e.to_string())
    }
}

/// An organization's cache settings.
pub struct CacheSettingsSource {
    pub db: DbPool,
}

#[async_trait]
impl Source for CacheSettingsSource {
    type Key = Uuid;
    type Value = OrgCacheSettings;

    fn name(&self) -> &'static str {
        "cache_settings"
    }

    fn redis_key(&self, org_id: &Uuid) -> String {
        gw_shared::redis::cache_settings_key(*org_id)
    }

    async fn load(&self, org_id: &Uuid) -> Result<Option<OrgCacheSettings>, String> {
        let mut conn = self.db.get().await.map_err(|e| e.to_string())?;
        db_cache::load(&mut conn, *org_id).await.map(Some).map_err(|e| e.to_string())
    }
}

/// An organization's live provider keys, still sealed in both caches.
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

/// A live prompt template's head (latest version, labels) by (organization, template).
pub struct TemplateSource {
    pub db: DbPool,
}

#[async_trait]
impl Source for TemplateSource {
    type Key = (Uuid, Uuid);
    type Value = prompt_templates::Head;

    fn name(&self) -> &'static str {
        "prompt_template"
    }

    fn redis_key(&self, (org_id, id): &(Uuid, Uuid)) -> String {
        gw_shared::redis::template_cache_key(*org_id, *id)
    }

    async fn load(&self, &(org_id, id): &(Uuid, Uuid)) -> Result<Option<prompt_templates::Head>, String> {
        let mut conn = self.db.get().await.map_err(|e| e.to_string())?;
        prompt_templates::head(&mut conn, org_id, id).await.map_err(|e| e.to_string())
    }
}

/// A template version's content by (organization, template, version): versions never change,
/// so nothing invalidates these.
pub struct TemplateVersionSource {
    pub db: DbPool,
}

#[async_trait]
impl Source for TemplateVersionSource {
    type Key = (Uuid, Uuid, i32);
    type Value = Content;

    fn name(&self) -> &'static str {
        "prompt_template_version"
    }

    fn redis_key(&self, (org_id, id, version): &(Uuid, Uuid, i32)) -> String {
        gw_shared::redis::template_version_cache_key(*org_id, *id, *version)
    }

    async fn load(&self, &(org_id, id, version): &(Uuid, Uuid, i32)) -> Result<Option<Content>, String> {
        let mut conn = self.db.get().await.map_err(|e| e.to_string())?;
        prompt_templates::content(&mut conn, org_id, id, version).await.map_err(|e| e.to_string())
    }
}

/// An organization's running experiments (always a value, possibly none).
pub struct ExperimentSource {
    pub db: DbPool,
}

#[async_trait]
impl Source for ExperimentSource {
    type Key = Uuid;
    type Value = Running;

    fn name(&self) -> &'static str {
        "experiments"
    }

    fn redis_key(&self, org_id: &Uuid) -> String {
        gw_shared::redis::experiments_cache_key(*org_id)
    }

    async fn load(&self, org_id: &Uuid) -> Result<Option<Running>, String> {
        let mut conn = self.db.get().await.map_err(|e| e.to_string())?;
        experiments::running(&mut conn, *org_id).await.map(Some).map_err(|e| e.to_string())
    }
}

/// Compiled policy sets by organization, the newest version seen: compiling (patterns, automata)
/// happens once per version per process, and storing a new version replaces (evicts) the old.
pub type Compiled = moka::sync::Cache<Uuid, Arc<PolicySet>>;

/// Bounded in bytes, each set weighed by [`PolicySet::weight`].
pub fn compiled_cache(max_bytes: u64) -> Compiled {
    moka::sync::Cache::builder()
        .max_capacity(max_bytes)
        .weigher(|_k: &Uuid, set: &Arc<PolicySet>| u32::try_from(set.weight()).unwrap_or(u32::MAX))
        .build()
}

/// Compiles a stored document (off the request workers: see [`Lookups::policy_set`]).
fn compile(org_id: Uuid, stored: &StoredPolicy) -> PolicySet {
    match serde_json::from_value::<OrgPolicy>(stored.document.clone()) {
        Ok(doc) => PolicySet::compile(stored.version, &doc),
        Err(e) => {
            log::error!("organization {org_id}: policy version {} does not parse: {e}", stored.version);
            PolicySet::unreadable(stored.version, e.to_string())
        }
    }
}

/// Every cached lookup of the data plane, in one place.
pub struct Lookups {
    pub keys: Lookup<KeySource>,
    pub teams: Lookup<TeamSource>,
    pub orgs: Lookup<OrgSource>,
    pub policies: Lookup<PolicySource>,
    pub compiled: Compiled,
    pub cache_settings: Lookup<CacheSettingsSource>,
    pub provider_keys: Lookup<ProviderKeySource>,
    pub org_routes: crate::org_routes::OrgRoutes,
    pub templates: Lookup<TemplateSource>,
    pub template_versions: Lookup<TemplateVersionSource>,
    pub experiments: Lookup<ExperimentSource>,
}

impl Lookups {
    /// The organization's policies, compiled (the built-ins alone when it stored none). A version
    /// not compiled yet is compiled on a blocking thread, never on a request worker: a document
    /// at the caps takes milliseconds to compile, and the worker serves other tenants meanwhile.
    pub async fn policy_set(&self, org_id: Uuid) -> Result<Arc<PolicySet>, LookupError> {
        let stored = self.policies.get(&org_id, &|| true).await?;
        let version = stored.as_ref().map_or(0, |s| s.version);
        if let Some(set) = self.compiled.get(&org_id).filter(|s| s.version == version) {
            return Ok(set);
        }
        let set = match stored {
            None => Arc::new(PolicySet::empty()),
            Some(stored) => match tokio::task::spawn_blocking(move || compile(org_id, &stored)).await {
                Ok(set) => Arc::new(set),
                Err(e) => {
                    log::error!("organization {org_id}: compiling policy version {version} failed: {e}");
                    return Err(LookupError::Unavailable);
                }
            },
        };
        self.compiled.insert(org_id, set.clone());
        Ok(set)
    }

    /// Forgets everything (on a reconnect of the invalidation channel: messages were missed).
    pub fn clear(&self) {
        self.keys.invalidate_all();
        self.teams.invalidate_all();
        self.provider_keys.invalidate_all();
        self.orgs.invalidate_all();
        self.policies.invalidate_all();
        self.compiled.invalidate_all();
        self.cache_settings.invalidate_all();
        self.org_routes.invalidate_all();
        self.templates.invalidate_all();
        self.experiments.invalidate_all();
    }
}
