//! Liveness, readiness and metrics.

use actix_web::{web, HttpResponse};
use prometheus::{Encoder, TextEncoder};
use serde_json::json;

use crate::state::AppState;

pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(json!({"status": "ok"}))
}

/// Ready when both stores answer.
pub async fn readyz(state: web::Data<AppState>) -> HttpResponse {
    let db = gw_shared::db::ping(&state.db).await;
    let redis = gw_shared::redis::ping(&state.redis).await;
    let status = |r: &gw_shared::Result<()>| if r.is_ok() { "ok" } else { "unavailable" };
    let body = json!({"status": if db.is_ok() && redis.is_ok() { "ok" } else { "unavailable" },
                      "checks": {"postgres": status(&db), "redis": status(&redis)}});
    if db.is_ok() && redis.is_ok() {
        HttpResponse::Ok().json(body)
    } else {
        HttpResponse::ServiceUnavailable().json(body)
    }
}

pub async fn metrics(state: web::Data<AppState>) -> HttpResponse {
    let encoder = TextEncoder::new();
    let mut buf = Vec::new();
    match encoder.encode(&state.metrics.registry.gather(), &mut buf) {
        Ok(()) => HttpResponse::Ok().content_type(encoder.format_type()).body(buf),
        Err(e) => HttpResponse::InternalServerError().body(format!("metrics encoding failed: {e}")),
    }
}
