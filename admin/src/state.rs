//! What every handler can reach.

use std::sync::Arc;

use gw_shared::config::Config;
use gw_shared::db::{DbConn, DbPool};

use crate::error::ApiResult;
use crate::metrics::Metrics;

pub struct AppState {
    pub cfg: Config,
    pub db: DbPool,
    pub redis: deadpool_redis::Pool,
    pub jwt_secret: String,
    pub metrics: Arc<Metrics>,
}

impl AppState {
    pub async fn conn(&self) -> ApiResult<DbConn> {
        Ok(self.db.get().await?)
    }
}
