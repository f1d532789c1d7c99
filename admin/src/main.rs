//! gw-admin: the control plane. `gw-admin [serve]` runs the management API; `gw-admin migrate`
//! applies the embedded migrations; `gw-admin bootstrap` prints a local login and API key;
//! `gw-admin reencrypt` re-seals every provider key with the current master key.
//!
//! Master key rotation (provider keys are sealed with `GW_ENCRYPTION_KEY`, version
//! `GW_ENCRYPTION_KEY_VERSION`, default 1), from version N to N+1:
//! 1. set the new key as `GW_ENCRYPTION_KEY` and `GW_ENCRYPTION_KEY_VERSION=N+1`, keeping the old
//!    key as `GW_ENCRYPTION_KEY_V<N>`, on every gw-admin and gw-proxy, and restart them (new keys
//!    are sealed with N+1; both versions open);
//! 2. run `gw-admin reencrypt` (same variables): it re-seals every key still on an older version
//!    and invalidates the proxies' caches of the organizations it changed; it is safe to run again;
//! 3. then drop `GW_ENCRYPTION_KEY_V<N>` everywhere.

mod authz;
mod billing_grace;
mod billing_provider;
mod body;
mod bootstrap;
mod budget_reconcile;
mod console;
mod decode;
mod domain_proof;
mod error;
mod experiments;
mod hashing;
mod invalidation_beat;
mod jobs;
mod key_check;
mod mail;
mod metrics;
mod oidc;
mod openapi;
mod org_policy;
mod outbound;
mod pagination;
mod partitions;
mod passwords;
mod period;
mod read_only;
mod replica;
mod reports;
mod route_catalog;
mod routes;
mod seats;
mod second_factor;
mod session;
mod spend;
mod sso_config;
mod state;
mod throttle;
mod tokens;
mod trail;
mod usage_cli;
mod usage_sync;
mod validate;
mod webhook_relay;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use actix_web::dev::Service;
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::{error::JsonPayloadError, web, App, HttpServer};
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
        Some("reencrypt") => reencrypt(),
        Some("operator") => operator_cmd(&args[1..]),
        Some("plan") => plan_cmd(&args[1..]),
        Some("usage") => usage_cli::cmd(&args[1..]),
        Some("check-config") => check_config(),
        Some(other) => Err(format!(
            "unknown command {other:?}; use serve, migrate, bootstrap, reencrypt, operator, plan, usage or check-config"
        )
        .into()),
    };
    if let Err(e) = result {
        log::error!("gw-admin: {e}");
        std::process::exit(1);
    }
}

type BoxError = Box<dyn std::error::Error>;

/// Loads the configuration as `serve` and gw-proxy would (file, environment, validation) and says
/// whether it holds, without connecting anywhere: for a deployment's pipeline, before a rollout.
fn check_config() -> Result<(), BoxError> {
    let cfg = Config::load()?;
    cfg.database.migration_url()?;
    println!(
        "configuration ok: {} providers, {} models, database pooler {:?}",
        cfg.providers.len(),
        cfg.models.len(),
        cfg.database.pooler
    );
    Ok(())
}

fn migrate() -> Result<(), BoxError> {
    let cfg = Config::load()?;
    let applied = gw_shared::db::run_migrations(&cfg.database)?;
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

/// `gw-admin operator grant|revoke <email>`: the gateway operator role (the route catalog).
fn operator_cmd(args: &[String]) -> Result<(), BoxError> {
    let usage = "usage: gw-admin operator grant|revoke <email>";
    let (grant, email) = match args {
        [verb, email] if verb == "grant" => (true, email),
        [verb, email] if verb == "revoke" => (false, email),
        _ => return Err(usage.into()),
    };
    let cfg = Config::load()?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async {
        let db = gw_shared::db::pool(&cfg.database, 1)?;
        let mut conn = db.get().await?;
        let normalized = gw_shared::email::normalize(email);
        if !gw_shared::db::route_catalog::set_operator(&mut conn, &normalized, grant).await? {
            return Err::<(), BoxError>(format!("no account has the address {email:?}").into());
        }
        println!("{} {email} the gateway operator role", if grant { "granted" } else { "revoked from" });
        Ok(())
    })
}

/// `gw-admin plan set <organization id> <plan>`: in air-gapped mode, where billing is handled
/// outside the platform, the operator sets an organization's plan (a plan without SSO turns its
/// SSO connections off, never deletes them); the change is in the organization's audit trail.
fn plan_cmd(args: &[String]) -> Result<(), BoxError> {
    let usage = "usage: gw-admin plan set <organization id> <free|growth|enterprise>";
    let (org_id, plan) = match args {
        [verb, org, plan] if verb == "set" => (org.parse::<uuid::Uuid>().map_err(|_| usage)?, plan.as_str()),
        _ => return Err(usage.into()),
    };
    if !["free", "growth", "enterprise"].contains(&plan) {
        return Err(usage.into());
    }
    let cfg = Config::load()?;
    if !cfg.billing.airgap {
        return Err(
            "plans change through the billing provider's events; gw-admin plan set is for AIRGAP_MODE=true".into()
        );
    }
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async {
        use diesel_async::AsyncConnection;
        let db = gw_shared::db::pool(&cfg.database, 1)?;
        let mut conn = db.get().await?;
        let changed = conn
            .transaction(async |conn| {
                let Some((from, sso_disabled)) = gw_shared::db::billing::set_plan(conn, org_id, plan).await? else {
                    return Ok(None);
                };
                let detail =
                    serde_json::json!({"plan_from": from, "plan_to": plan, "sso_connections_disabled": sso_disabled});
                let resource = ("organization", Some(org_id.to_string()));
                let event = gw_shared::db::admin_audit::Event::system(
                    org_id,
                    Some("operator"),
                    "billing.plan_set",
                    resource,
                    detail,
                );
                gw_shared::db::admin_audit::insert(conn, &event).await?;
                let change = gw_shared::webhooks::payloads::PlanChange {
                    from: &from,
                    to: plan,
                    source: "operator",
                    subscription_status: None,
                    provider_event_id: None,
                    sso_connections_disabled: sso_disabled,
                };
                let event = gw_shared::webhooks::payloads::subscription_updated(org_id, &change);
                gw_shared::db::events::emit(conn, event).await?;
                let inv = gw_shared::redis::Invalidation::Org { org_id };
                let logged = gw_shared::db::invalidations::record(conn, &inv).await?;
                Ok::<_, gw_shared::Error>(Some((from, logged, inv)))
            })
            .await?;
        let Some((from, logged, inv)) = changed else {
            return Err::<(), BoxError>(format!("no organization {org_id}").into());
        };
        let redis = gw_shared::redis::pool(&cfg.redis, 1)?;
        if let Err(e) = gw_shared::redis::announce(&redis, logged, &inv).await {
            eprintln!("the proxies were not told ({e}): they read the change from the invalidation log within seconds");
        }
        println!("organization {org_id}: plan {from} -> {plan}");
        Ok(())
    })
}

/// Re-seals every provider key sealed under an older master key with the current one, then
/// invalidates the cached keys of each organization changed.
fn reencrypt() -> Result<(), BoxError> {
    let cfg = Config::load()?;
    let ring = cfg.secrets.keyring.clone().ok_or(
        "reencrypt needs GW_ENCRYPTION_KEY (the new master key), GW_ENCRYPTION_KEY_VERSION and the old \
         key as GW_ENCRYPTION_KEY_V<old version>",
    )?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(reencrypt_keys(&cfg, &ring))
}

async fn reencrypt_keys(cfg: &Config, ring: &gw_shared::crypto::Keyring) -> Result<(), BoxError> {
    use gw_shared::redis::{announce, invalidate, publish, Invalidation};

    let db = gw_shared::db::pool(&cfg.database, 1)?;
    let redis = gw_shared::redis::pool(&cfg.redis, 1)?;
    let mut conn = db.get().await?;
    let changed = match gw_shared::db::provider_keys::reencrypt(&mut conn, ring).await {
        Ok(changed) => changed,
        Err(e) => {
            // Rows re-sealed before the failure are committed, and which they were is lost: every
            // replica drops its caches (best effort) so that none keeps an old ciphertext.
            if let Err(p) = publish(&redis, &Invalidation::All).await {
                log::warn!("could not tell the proxies to drop their caches: {p}");
            }
            return Err(format!("re-encryption stopped: {e}; fix the cause and run it again").into());
        }
    };
    // SSO client secrets are only read by this process: no cache to invalidate.
    let sso = gw_shared::db::sso::reencrypt(&mut conn, ring)
        .await
        .map_err(|e| format!("re-encryption of SSO client secrets stopped: {e}; fix the cause and run it again"))?;
    if sso > 0 {
        println!("re-sealed {sso} SSO client secret(s) with master key version {}", ring.current_version());
    }
    let orgs: std::collections::BTreeSet<uuid::Uuid> = changed.iter().map(|(org_id, _)| *org_id).collect();
    let mut failed = 0usize;
    for org_id in &orgs {
        let inv = Invalidation::ProviderKeys { org_id: *org_id };
        let logged = match gw_shared::db::invalidations::record(&mut conn, &inv).await {
            Ok(id) => announce(&redis, id, &inv).await,
            Err(e) => {
                log::warn!("could not log the change of org {org_id}'s provider keys: {e}");
                invalidate(&redis, &inv).await
            }
        };
        if let Err(e) = logged {
            log::warn!("could not invalidate the cached provider keys of org {org_id}: {e}");
            failed += 1;
        }
    }
    println!(
        "re-sealed {} provider key(s) of {} organization(s) with master key version {}",
        changed.len(),
        orgs.len(),
        ring.current_version()
    );
    if failed > 0 {
        return Err(format!(
            "{failed} organization(s) could not be invalidated: wait proxy.key_cache_ttl_secs before dropping \
             the old master key"
        )
        .into());
    }
    Ok(())
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
    use utoipa_actix_web::AppExt;

    let cfg = Config::load()?;
    let jwt_secret = cfg.jwt_secret()?.to_string();
    if jwt_secret.len() < 32 {
        return Err("GW_JWT_SECRET must be at least 32 characters".into());
    }
    let db = gw_shared::db::pool(&cfg.database, cfg.database.pool_size)?;
    let redis = gw_shared::redis::pool(&cfg.redis, cfg.redis.pool_size)?;
    let metrics = Arc::new(metrics::Metrics::new()?);
    let listen = cfg.admin.listen.clone();
    let workers = cfg.admin.workers.max(1);
    let body_limit = cfg.admin.max_body_bytes;
    let doc = web::Data::new(openapi::Rendered(openapi::document().to_json()?));
    let relay = mail::Relay::from_config(&cfg.mail)?;
    let state = web::Data::new(AppState::new(cfg, db, redis, jwt_secret, metrics)?);

    let rt = actix_web::rt::System::new();
    rt.block_on(async move {
        match state.db.get().await {
            Ok(mut conn) => {
                if let Err(e) = route_catalog::seed(&state.cfg, &mut conn).await {
                    log::error!("could not seed the route catalog from the configuration file: {e}");
                }
            }
            Err(e) => log::error!("could not seed the route catalog (database unreachable): {e}"),
        }
        jobs::spawn(state.clone().into_inner());
        webhook_relay::spawn(state.clone().into_inner());
        billing_grace::spawn(state.clone().into_inner());
        usage_sync::spawn(state.clone().into_inner());
        experiments::spawn(state.clone().into_inner());
        budget_reconcile::spawn(state.clone().into_inner());
        invalidation_beat::spawn(state.clone().into_inner());
        match relay {
            Some(relay) => mail::spawn(state.clone().into_inner(), relay),
            None => log::info!("mail is not delivered ([mail] smtp_url unset): it waits in the outbox"),
        }
        let server = HttpServer::new(move || {
            let metrics = state.metrics.clone();
            App::new()
                .app_data(state.clone())
                .app_data(doc.clone())
                .app_data(
                    web::JsonConfig::default().limit(body_limit).error_handler(move |e, _| json_error(e, body_limit)),
                )
                .app_data(
                    web::PathConfig::default()
                        // Path parameters are ids (and catalog versions); serde's message would describe
                        // the parser.
                        .error_handler(|_, req| {
                            let what = if req.match_pattern().is_some_and(|p| p.contains("{version}")) {
                                "a catalog version number"
                            } else {
                                "an id (a UUID)"
                            };
                            ApiError::Validation(format!("invalid path parameter: expected {what}")).into()
                        }),
                )
                .wrap(actix_web::middleware::from_fn(authz::authorize))
                .wrap(actix_web::middleware::NormalizePath::trim())
                .wrap_fn(move |req, srv| {
                    let started = Instant::now();
                    let request_id = gw_shared::ids::new_id().to_string();
                    actix_web::HttpMessage::extensions_mut(&req).insert(trail::RequestId(request_id.clone()));
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
                        // Answers carry tokens, key secrets and tenant data: no cache may keep them.
                        if route.starts_with("/api/v1") {
                            res.headers_mut()
                                .insert(actix_web::http::header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
                        }
                        log::debug!("{request_id} {method} {route} {status}");
                        Ok(res)
                    }
                })
                .configure(routes::ops)
                .configure(console::routes)
                .into_utoipa_app()
                .configure(routes::api)
                .into_app()
                .default_service(web::to(routes::not_found))
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
