//! Organizations' own routes: read through the cached lookup (in-process, Redis, Postgres) like
//! policies, built into a route table once per organization and version, and resolved before the
//! gateway's catalog for that organization's requests only. A version that does not build (a
//! kind this proxy lacks) leaves the organization with the gateway's routes alone, logged.

use std::sync::Arc;

use arc_swap::ArcSwap;
use async_trait::async_trait;
use gw_shared::config::Config;
use gw_shared::db::org_routes::{self, StoredOrgRoutes};
use gw_shared::db::DbPool;
use gw_shared::providers::Registry;
use gw_shared::routing::RouteTable;
use uuid::Uuid;

use crate::lookup::{Lookup, LookupError, Source};

pub struct OrgRoutesSource {
    pub db: DbPool,
}

#[async_trait]
impl Source for OrgRoutesSource {
    type Key = Uuid;
    type Value = StoredOrgRoutes;

    fn name(&self) -> &'static str {
        "org_routes"
    }

    fn redis_key(&self, org_id: &Uuid) -> String {
        gw_shared::redis::org_routes_cache_key(*org_id)
    }

    async fn load(&self, org_id: &Uuid) -> Result<Option<StoredOrgRoutes>, String> {
        let mut conn = self.db.get().await.map_err(|e| e.to_string())?;
        org_routes::current(&mut conn, *org_id).await.map_err(|e| e.to_string())
    }
}

/// What builds route tables: the configuration (prices, timeouts) and the adapters. SIGHUP
/// replaces the configuration.
pub struct RouteBuilder {
    pub cfg: ArcSwap<Config>,
    pub registry: Registry,
}

/// Organizations' route tables by organization and version.
pub struct OrgRoutes {
    pub lookup: Lookup<OrgRoutesSource>,
    tables: moka::sync::Cache<(Uuid, i32), Arc<RouteTable>>,
    pub builder: Arc<RouteBuilder>,
}

impl OrgRoutes {
    pub fn new(lookup: Lookup<OrgRoutesSource>, builder: Arc<RouteBuilder>) -> Self {
        // A table is a few KiB; organizations with routes of their own are few per process.
        let tables = moka::sync::Cache::builder().max_capacity(10_000).build();
        OrgRoutes { lookup, tables, builder }
    }

    /// The organization's own table; `None` when it has none.
    pub async fn table(&self, org_id: Uuid) -> Result<Option<Arc<RouteTable>>, LookupError> {
        let Some(stored) = self.lookup.get(&org_id, &|| true).await? else { return Ok(None) };
        Ok(Some(self.tables.get_with((org_id, stored.version), || {
            let cfg = self.builder.cfg.load();
            let env = |_: &str| None;
            match RouteTable::build(&cfg, &stored.routes, &self.builder.registry, &env, None) {
                Ok(t) => Arc::new(t),
                Err(e) => {
                    log::error!(
                        "organization {org_id}: routes version {} do not build ({}: {e}); its requests use the gateway's",
                        stored.version,
                        e.path
                    );
                    Arc::new(RouteTable::default())
                }
            }
        })))
    }

    pub fn invalidate_all(&self) {
        self.lookup.invalidate_all();
        self.tables.invalidate_all();
    }
}
