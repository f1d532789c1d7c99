//! The route table, in one place.

use actix_web::web;

pub mod api_keys;
pub mod auth;
pub mod health;
pub mod organizations;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(health::healthz).service(health::readyz).service(health::metrics).service(
        web::scope("/api/v1")
            .service(auth::register)
            .service(auth::login)
            .service(auth::refresh)
            .service(organizations::current)
            .service(api_keys::create)
            .service(api_keys::list)
            .service(api_keys::revoke),
    );
}
