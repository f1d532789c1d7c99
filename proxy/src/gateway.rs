//! The Pingora `ProxyHttp` implementation: the phases. gw answers every request itself in
//! `request_filter` by running the pipeline (the upstream exchange happens there, through the
//! pooled connector); `logging` runs the logging step (settlement, events, the audit row).

use async_trait::async_trait;
use pingora::proxy::{ProxyHttp, Session};
use pingora::upstreams::peer::HttpPeer;
use pingora::{Error, ErrorType};

use crate::ctx::RequestCtx;
use crate::error::ProxyError;
use crate::pipeline::{self, answer};
use crate::state::Gateway;

#[async_trait]
impl ProxyHttp for Gateway {
    type CTX = RequestCtx;

    fn new_ctx(&self) -> RequestCtx {
        let mut ctx = RequestCtx::new(self.request_timeout);
        ctx.in_flight = Some(self.in_flight.enter());
        ctx.journal = self.journal.clone();
        ctx
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut RequestCtx) -> pingora::Result<bool> {
        // Pingora keeps an idle HTTP/1.1 connection open forever (`Some(0)`); bound it instead.
        if session.get_keepalive() == Some(0) {
            session.set_keepalive(Some(self.keepalive_idle_secs));
        }
        if self.closing.is_set() {
            session.set_keepalive(None);
        }
        let peer = session.client_addr().and_then(|a| a.as_inet()).map(|a| a.ip());
        ctx.client_ip = peer.map(|peer| {
            if self.trusted_proxies.is_empty() {
                return peer;
            }
            // Several headers are one list, in order.
            let forwarded: Vec<&str> = session
                .req_header()
                .headers
                .get_all("x-forwarded-for")
                .iter()
                .filter_map(|v| v.to_str().ok())
                .collect();
            let joined = (!forwarded.is_empty()).then(|| forwarded.join(","));
            gw_shared::client_addr::client_address(peer, joined.as_deref(), &self.trusted_proxies)
        });
        ctx.user_agent = session
            .req_header()
            .headers
            .get(http::header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .map(pipeline::audit::audit_text);
        ctx.trace = crate::traces::TraceCtx::start(&session.req_header().headers, self.tracer.is_some());
        let Err(err) = pipeline::run(self, session, ctx).await else { return Ok(true) };
        ctx.error = Some(err.label());
        if let ProxyError::ClientGone(why) = err {
            ctx.status = 499;
            log::debug!("request {}: client gone: {why}", ctx.request_id);
            return Ok(true);
        }
        if err.status() >= 500 {
            self.log_failure(ctx, &err);
        }
        if let Err(e) = answer::error(session, ctx, &err).await {
            ctx.status = 499;
            log::debug!("request {}: could not send the error: {e}", ctx.request_id);
        }
        Ok(true)
    }

    async fn upstream_peer(&self, _session: &mut Session, _ctx: &mut RequestCtx) -> pingora::Result<Box<HttpPeer>> {
        // Never reached: request_filter answers every request.
        Err(Error::explain(ErrorType::InternalError, "gw answers every request in request_filter"))
    }

    async fn logging(&self, _session: &mut Session, _e: Option<&Error>, ctx: &mut RequestCtx) {
        pipeline::logging::run(self, ctx);
    }
}
