//! The Pingora `ProxyHttp` implementation. gw answers every request itself in `request_filter`
//! (the upstream exchange happens there, through the pooled connector), then `logging` hands the
//! audit record to the flusher.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use gw_shared::db::{teams, DbPool};
use gw_shared::headers;
use gw_shared::routing::Router;
use moka::future::Cache;
use pingora::proxy::{ProxyHttp, Session};
use pingora::upstreams::peer::HttpPeer;
use pingora::{Error, ErrorType};
use uuid::Uuid;

use crate::audit::AuditSink;
use crate::auth::KeyCache;
use crate::ctx::RequestCtx;
use crate::error::ProxyError;
use crate::metrics::Metrics;
use crate::upstream::Upstreams;
use crate::{chat, models, respond};

pub struct Gateway {
    pub router: Router,
    pub keys: Arc<KeyCache>,
    pub upstreams: Upstreams,
    pub audit: AuditSink,
    pub metrics: Arc<Metrics>,
    pub max_body: usize,
    /// Idle keep-alive limit for client connections, in seconds.
    pub keepalive_idle_secs: u64,
    /// Unix time the process started: the `created` of every listed model.
    pub started_at: i64,
    db: DbPool,
    /// (org, team) -> whether the team is live in that org.
    team_cache: Cache<(Uuid, Uuid), bool>,
}

impl Gateway {
    pub fn new(
        router: Router,
        keys: Arc<KeyCache>,
        upstreams: Upstreams,
        audit: AuditSink,
        metrics: Arc<Metrics>,
        db: DbPool,
        max_body: usize,
    ) -> Self {
        Self {
            router,
            keys,
            upstreams,
            audit,
            metrics,
            max_body,
            keepalive_idle_secs: 75,
            started_at: chrono::Utc::now().timestamp(),
            db,
            team_cache: Cache::builder().max_capacity(100_000).time_to_live(Duration::from_secs(30)).build(),
        }
    }

    async fn handle(&self, session: &mut Session, ctx: &mut RequestCtx) -> Result<(), ProxyError> {
        let method = session.req_header().method.clone();
        let path = session.req_header().uri.path().to_string();
        let route = match path.trim_end_matches('/') {
            "/v1/models" => Route::Models,
            "/v1/chat/completions" => Route::Chat,
            _ => return Err(ProxyError::NotFound { method: method.to_string(), path }),
        };
        ctx.endpoint = route.endpoint();
        let (allowed, allow) = match route {
            Route::Models => (http::Method::GET, "GET"),
            Route::Chat => (http::Method::POST, "POST"),
        };
        if method != allowed {
            return Err(ProxyError::MethodNotAllowed { method: method.to_string(), path, allow });
        }

        let auth = session.req_header().headers.get(http::header::AUTHORIZATION).map(|v| v.as_bytes());
        let key = self.keys.authenticate(auth).await?;
        ctx.key = Some(key.clone());
        ctx.team_id = self.attribute_team(session, key.org_id, key.team_id).await?;

        match route {
            Route::Models => models::list(self, session, ctx).await,
            Route::Chat => chat::completions(self, session, ctx).await,
        }
    }

    /// The key's team, else the `x-gw-team` header's, which must be a live team of the key's org.
    async fn attribute_team(
        &self,
        session: &Session,
        org_id: Uuid,
        key_team: Option<Uuid>,
    ) -> Result<Option<Uuid>, ProxyError> {
        let header = session.req_header().headers.get(headers::TEAM);
        let Some(raw) = header else {
            return Ok(key_team);
        };
        let team = raw
            .to_str()
            .ok()
            .and_then(|s| Uuid::parse_str(s.trim()).ok())
            .ok_or_else(|| ProxyError::InvalidTeam("x-gw-team must be a team id (UUID).".into()))?;
        if let Some(bound) = key_team {
            if bound != team {
                return Err(ProxyError::InvalidTeam(
                    "This API key is bound to another team; x-gw-team cannot override it.".into(),
                ));
            }
            return Ok(Some(bound));
        }
        let db = self.db.clone();
        let live = self
            .team_cache
            .try_get_with((org_id, team), async move {
                let mut conn = db.get().await.map_err(|e| e.to_string())?;
                teams::exists_in_org(&mut conn, org_id, team).await.map_err(|e| e.to_string())
            })
            .await
            .map_err(|e: Arc<String>| {
                log::error!("team lookup failed: {e}");
                ProxyError::AuthBackend
            })?;
        if !live {
            return Err(ProxyError::InvalidTeam(format!("No team {team} in this organization.")));
        }
        Ok(Some(team))
    }
}

#[derive(Clone, Copy)]
enum Route {
    Models,
    Chat,
}

impl Route {
    fn endpoint(self) -> &'static str {
        match self {
            Route::Models => "/v1/models",
            Route::Chat => "/v1/chat/completions",
        }
    }
}

#[async_trait]
impl ProxyHttp for Gateway {
    type CTX = RequestCtx;

    fn new_ctx(&self) -> RequestCtx {
        RequestCtx::new()
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut RequestCtx) -> pingora::Result<bool> {
        // Pingora keeps an idle HTTP/1.1 connection open forever (`Some(0)`); bound it instead.
        if session.get_keepalive() == Some(0) {
            session.set_keepalive(Some(self.keepalive_idle_secs));
        }
        if let Err(err) = self.handle(session, ctx).await {
            ctx.error_type = Some(err.label());
            match &err {
                ProxyError::ClientGone(why) => {
                    ctx.status = 499;
                    log::debug!("request {}: client gone: {why}", ctx.request_id);
                }
                _ if ctx.header_sent => {
                    log::warn!("request {}: failed after the response started: {err}", ctx.request_id);
                    // Only a stream can still be told; the client sees an error event, not a clean end.
                    if ctx.stream {
                        let _ = respond::stream_error(session, &err.body()).await;
                    }
                }
                _ => {
                    if err.status() >= 500 {
                        log::warn!("request {}: {} {err}", ctx.request_id, err.status());
                    }
                    if let Err(e) = respond::error(session, ctx, &err).await {
                        ctx.status = 499;
                        log::debug!("request {}: could not send the error: {e}", ctx.request_id);
                    }
                }
            }
        }
        Ok(true)
    }

    async fn upstream_peer(&self, _session: &mut Session, _ctx: &mut RequestCtx) -> pingora::Result<Box<HttpPeer>> {
        // Never reached: request_filter answers every request.
        Err(Error::explain(ErrorType::InternalError, "gw answers every request in request_filter"))
    }

    async fn logging(&self, _session: &mut Session, _e: Option<&Error>, ctx: &mut RequestCtx) {
        let status = ctx.status.to_string();
        self.metrics.requests.with_label_values(&[ctx.endpoint, &status]).inc();
        self.metrics.request_duration.with_label_values(&[ctx.endpoint]).observe(ctx.started.elapsed().as_secs_f64());
        if let Some(rec) = ctx.audit_record() {
            self.audit.record(rec);
        }
    }
}
