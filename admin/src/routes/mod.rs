//! The route table. `/api/v1` operations are registered through `utoipa_actix_web`, so each one
//! is in the OpenAPI document; the role matrix (`crate::authz`) holds a rule for each, and a
//! method a path does not answer gets 405 with `Allow` from it.

use actix_web::{web, HttpResponse};
use utoipa_actix_web::service_config::ServiceConfig;

use crate::error::ApiError;

pub mod account;
pub mod analytics;
pub mod api_keys;
pub mod audit_events;
pub mod auth;
pub mod billing;
pub mod cache;
pub mod experiments;
pub mod gateway;
pub mod health;
pub mod invites;
pub mod limits;
pub mod me;
pub mod org_routes;
pub mod organizations;
pub mod playground;
pub mod policy;
pub mod prompt_templates;
pub mod provider_keys;
pub mod service_accounts;
pub mod sso;
pub mod sso_connections;
pub mod teams;
pub mod users;
pub mod webhook_deliveries;
pub mod webhooks;

/// Every `/api/v1` operation.
pub fn api(cfg: &mut ServiceConfig) {
    cfg.service(
        utoipa_actix_web::scope("/api/v1")
            .service(crate::openapi::serve)
            .configure(auth::routes)
            .configure(account::routes)
            .configure(me::routes)
            .configure(sso::routes)
            .configure(organizations::routes)
            .configure(policy::routes)
            .configure(cache::routes)
            .configure(teams::routes)
            .configure(users::routes)
            .configure(invites::routes)
            .configure(api_keys::routes)
            .configure(provider_keys::routes)
            .configure(sso_connections::routes)
            .configure(audit_events::routes)
            .configure(analytics::routes)
            .configure(limits::routes)
            .configure(gateway::routes)
            .configure(org_routes::routes)
            .configure(service_accounts::routes)
            .configure(billing::routes)
            .configure(webhook_deliveries::routes)
            .configure(webhooks::routes)
            .configure(prompt_templates::routes)
            .configure(experiments::routes)
            .configure(playground::routes),
    );
}

/// Health and metrics (outside `/api/v1` and its document).
pub fn ops(cfg: &mut web::ServiceConfig) {
    cfg.route("/healthz", web::get().to(health::healthz))
        .route("/readyz", web::get().to(health::readyz))
        .route("/metrics", web::get().to(health::metrics));
}

pub async fn not_found() -> HttpResponse {
    HttpResponse::from_error(ApiError::NotFound("route"))
}
