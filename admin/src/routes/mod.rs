//! The route table, in one place: every path with the methods it answers. Any other method on a
//! known path gets 405 with an `Allow` header and the usual error body.

use actix_web::{web, HttpResponse, Resource};

use crate::error::ApiError;

pub mod api_keys;
pub mod auth;
pub mod health;
pub mod organizations;
pub mod provider_keys;

/// A path answering the methods in `allow` (the routes are added by the caller); any other
/// method gets 405 `method_not_allowed` with `Allow: <allow>`.
fn resource(path: &str, allow: &'static str) -> Resource {
    web::resource(path)
        .default_service(web::to(move || async move { HttpResponse::from_error(ApiError::MethodNotAllowed(allow)) }))
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(resource("/healthz", "GET").route(web::get().to(health::healthz)))
        .service(resource("/readyz", "GET").route(web::get().to(health::readyz)))
        .service(resource("/metrics", "GET").route(web::get().to(health::metrics)))
        .service(
            web::scope("/api/v1")
                .service(resource("/auth/register", "POST").route(web::post().to(auth::register)))
                .service(resource("/auth/login", "POST").route(web::post().to(auth::login)))
                .service(resource("/auth/refresh", "POST").route(web::post().to(auth::refresh)))
                .service(resource("/organizations/current", "GET").route(web::get().to(organizations::current)))
                .service(
                    resource("/api-keys", "GET, POST")
                        .route(web::get().to(api_keys::list))
                        .route(web::post().to(api_keys::create)),
                )
                .service(resource("/api-keys/{id}", "DELETE").route(web::delete().to(api_keys::revoke)))
                .service(
                    resource("/provider-keys", "GET, POST")
                        .route(web::get().to(provider_keys::list))
                        .route(web::post().to(provider_keys::create)),
                )
                .service(
                    resource("/provider-keys/{id}", "GET, PATCH, DELETE")
                        .route(web::get().to(provider_keys::get))
                        .route(web::patch().to(provider_keys::rename))
                        .route(web::delete().to(provider_keys::revoke)),
                )
                .service(resource("/provider-keys/{id}/rotate", "POST").route(web::post().to(provider_keys::rotate))),
        );
}
