//! gw-admin: the control plane. `gw-admin [serve]` runs the management API; `gw-admin migrate`
//! applies the embedded migrations; `gw-admin bootstrap` prints a local login and API key.

mod bootstrap;
mod error;
mod metrics;
mod routes;
mod session;
mod state;
mod validate;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use actix_web::dev::Service;
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::{error::JsonPayloadError, web, App, HttpResponse, HttpServer};
use gw_shared::config::Config;

use crate::error::ApiError;
use crate::state::AppState;

const REQUEST_ID: &str = "x-request-id";

fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        None | Some("serve") => serve(),
        Some("migrate") => migrate(),
        Some("bootstrap") => bootstrap_cmd(&args[1..]),
        Some(other) => Err(format!("unknown command {other:?}; use serve, migrate or bootstrap").into()),
    };
    if let Err(e) = result {
        log::error!("gw-admin: {e}");
        std::process::exit(1);
    }
}

type BoxError = Box<dyn std::error::Error>;

fn migrate() -> Result<(), BoxError> {
    let cfg = Config::load()?;
    let applied = gw_shared::db::run_migrations(&cfg.database.url)?;
    if applied.is_empty() {
        log::info!("database is up to date");
    }
    for m in applied {
        log::info!("applied migration {m}");
    }
    Ok(())
}

fn bootstrap_cmd(args: &[String]) -> Result<(), BoxError> {
    let mut out = PathBuf::from(".gw/bootstrap.json");
    let mut email = "admin@gw.local".to_string();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--out" => out = it.next().ok_or("--out needs a path")?.into(),
            "--email" => email = it.next().ok_or("--email needs an address")?.clone(),
            other => return Err(format!("unknown option {other:?}").into()),
        }
    }
    let cfg = Config::load()?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(bootstrap::run(&cfg, &out, &email))
}

fn json_error(err: JsonPayloadError, limit: usize) -> actix_web::Error {
    let api = match &err {
        JsonPayloadError::OverflowKnownLength { .. } | JsonPayloadError::Overflow { .. } => {
            ApiError::PayloadTooLarge(limit)
        }
        JsonPayloadError::ContentType => ApiError::Validation("Content-Type must be application/json".into()),
        JsonPayloadError::Deserialize(e) => ApiError::Validation(format!("invalid JSON body: {e}")),
        other => ApiError::Validation(format!("invalid request body: {other}")),
    };
    api.into()
}

/// The `method` label of the request metric: the standard methods by name, anything else a
/// client may invent as `other`, so no client can create new series at will.
fn method_label(method: &actix_web::http::Method) -> &'static str {
    match method.as_str() {
        "GET" => "GET",
        "POST" => "POST",
        "PUT" => "PUT",
        "PATCH" => "PATCH",
        "DELETE" => "DELETE",
        "HEAD" => "HEAD",
        "OPTIONS" => "OPTIONS",
        _ => "other",
    }
}

fn serve() -> Result<(), BoxError> {
    let cfg = Config::load()?;
    let jwt_secret = cfg.jwt_secret()?.to_string();
    if jwt_secret.len() < 32 {
        return Err("GW_JWT_SECRET must be at least 32 characters".into());
    }
    let db = gw_shared::db::pool(&cfg.database.url, cfg.database.pool_size)?;
    let redis = gw_shared::redis::pool(&cfg.redis.url, cfg.redis.pool_size)?;
    let metrics = Arc::new(metrics::Metrics::new()?);
    let listen = cfg.admin.listen.clone();
    let workers = cfg.admin.workers.max(1);
    let body_limit = cfg.admin.max_body_bytes;
    let state = web::Data::new(AppState { cfg, db, redis, jwt_secret, metrics });

    let rt = actix_web::rt::System::new();
    rt.block_on(async move {
        let server = HttpServer::new(move || {
            let metrics = state.metrics.clone();
            App::new()
                .app_data(state.clone())
                .app_data(
                    web::JsonConfig::default().limit(body_limit).error_handler(move |e, _| json_error(e, body_limit)),
                )
                .app_data(
                    web::QueryConfig::default()
                        .error_handler(|e, _| ApiError::Validation(format!("invalid query string: {e}")).into()),
                )
                .app_data(
                    web::PathConfig::default()
                        .error_handler(|e, _| ApiError::Validation(format!("invalid path parameter: {e}")).into()),
                )
                .wrap_fn(move |req, srv| {
                    let started = Instant::now();
                    let request_id = gw_shared::ids::new_id().to_string();
                    let method = method_label(req.method());
                    let route = req.match_pattern().unwrap_or_else(|| "unmatched".into());
                    let metrics = metrics.clone();
                    let fut = srv.call(req);
                    async move {
                        let mut res = fut.await?;
                        let status = res.status().as_u16().to_string();
                        metrics.requests.with_label_values(&[route.as_str(), method, status.as_str()]).inc();
                        metrics.duration.with_label_values(&[route.as_str()]).observe(started.elapsed().as_secs_f64());
                        if let Ok(v) = HeaderValue::from_str(&request_id) {
                            res.headers_mut().insert(HeaderName::from_static(REQUEST_ID), v);
                        }
                        log::debug!("{request_id} {method} {route} {status}");
                        Ok(res)
                    }
                })
                .configure(routes::configure)
                .default_service(web::to(|| async { HttpResponse::from_error(ApiError::NotFound("route")) }))
        })
        .workers(workers)
        .max_connection_rate(256)
        .client_request_timeout(std::time::Duration::from_secs(30))
        .shutdown_timeout(5)
        .bind(&listen)?;
        log::info!("gw-admin listening on {listen}");
        server.run().await
    })?;
    Ok(())
}
