//! `POST /billing/checkout` and `POST /billing/portal` (owners and admins): a hosted page of the
//! billing provider's to subscribe to a plan, or to manage the subscription. `POST
//! /billing/webhook`: the billing provider's events (Stripe's scheme), not called by
//! customers and so outside session authentication: a body counts only when its
//! `Stripe-Signature` verifies with a secret gw holds (`STRIPE_WEBHOOK_SECRET`, two during a
//! rotation) within 5 minutes. Each event is applied once (its id is recorded in the same
//! transaction), and an event older than the state already applied changes nothing. In
//! air-gapped mode the endpoint takes no events. See `docs/billing.md`.

use actix_web::{post, web, HttpRequest, HttpResponse};
use diesel_async::{AsyncConnection, AsyncPgConnection};
use gw_shared::billing::{plan_for, stripe_signature, Event, Subscription};
use gw_shared::db::billing::{self as db, Applied};
use gw_shared::db::{invalidations, users};
use gw_shared::redis::Invalidation;
use gw_shared::webhooks::payloads::{self, PlanChange};
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::ToSchema;
use utoipa_actix_web::service_config::ServiceConfig;
use uuid::Uuid;

use crate::billing_provider::{BillingProvider, Checkout};
use crate::error::{ApiError, ApiResult, Errors};
use crate::session::Session;
use crate::state::AppState;
use crate::trail::{self, Actor, Entry, Trail};
use crate::validate;

pub fn routes(cfg: &mut ServiceConfig) {
    cfg.service(checkout).service(portal).service(webhook);
}

const MAX_URL_CHARS: usize = 2048;

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckoutRequest {
    /// A plan the operator sells (`[billing.prices]`): `growth` or `enterprise`.
    plan: String,
    /// Where the provider sends the customer after paying: an absolute `https://` (or `http://`)
    /// URL, at most 2048 characters.
    success_url: String,
    /// Where it sends them if they leave the page.
    cancel_url: String,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PortalRequest {
    /// Where the portal's "back" link goes.
    return_url: String,
}

/// A hosted page of the billing provider's to send the customer to.
#[derive(Serialize, ToSchema)]
pub struct HostedPage {
    /// The provider's session id.
    id: String,
    url: String,
}

/// Refuses when billing is handled outside the platform.
fn not_airgapped(state: &AppState) -> ApiResult<()> {
    if state.cfg.billing.airgap {
        return Err(ApiError::Forbidden(
            "billing is handled outside the platform (AIRGAP_MODE=true): ask the operator to change your plan".into(),
        ));
    }
    Ok(())
}

/// The provider, unless billing is not configured.
fn provider(state: &AppState) -> ApiResult<&dyn BillingProvider> {
    state
        .billing
        .as_deref()
        .ok_or_else(|| ApiError::Unavailable("billing is not configured on this gateway (STRIPE_SECRET_KEY)".into()))
}

/// A page the provider sends the customer's browser to (gw never fetches it).
fn browser_url(field: &str, value: &str) -> ApiResult<String> {
    let value = validate::text(field, value, MAX_URL_CHARS)?;
    match url::Url::parse(&value) {
        Ok(u) if matches!(u.scheme(), "https" | "http") && u.host().is_some() => Ok(value),
        _ => Err(ApiError::field(field, "must be an absolute https:// URL")),
    }
}

/// Subscribe the organization to a plan: the answer is the provider's checkout page. The plan
/// changes when the provider confirms the subscription (its webhook), not here.
#[utoipa::path(operation_id = "billing_checkout", tag = "billing", request_body = CheckoutRequest,
    responses((status = 201, body = HostedPage), Errors))]
#[post("/billing/checkout")]
pub async fn checkout(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    body: crate::body::Json<CheckoutRequest>,
) -> ApiResult<HttpResponse> {
    not_airgapped(&state)?;
    let b = body.into_inner();
    let Some(price) = state.cfg.billing.prices.get(&b.plan) else {
        let sold: Vec<&str> = state.cfg.billing.prices.keys().map(String::as_str).collect();
        let why = match sold.is_empty() {
            true => "no plan is sold on this gateway".to_string(),
            false => format!("must be a plan this gateway sells: {}", sold.join(", ")),
        };
        return Err(ApiError::field("plan", why));
    };
    let success_url = browser_url("success_url", &b.success_url)?;
    let cancel_url = browser_url("cancel_url", &b.cancel_url)?;
    let provider = provider(&state)?;
    let customer = customer(&state, provider, &session).await?;
    let c = Checkout {
        org_id: session.org_id,
        customer: &customer,
        price,
        success_url: &success_url,
        cancel_url: &cancel_url,
    };
    let page = provider.checkout(&c).await.map_err(|e| ApiError::BadGateway(e.to_string()))?;
    let mut conn = state.conn().await?;
    let entry = Entry {
        action: "billing.checkout",
        resource_type: "organization",
        resource_id: Some(session.org_id.to_string()),
        detail: json!({"plan": b.plan, "session_id": page.id}),
    };
    trail::by(&mut conn, &session, &req, entry).await?;
    Ok(HttpResponse::Created().json(HostedPage { id: page.id, url: page.url }))
}

/// The provider's self-service portal for the organization's subscription (invoices, payment
/// method, cancellation).
#[utoipa::path(operation_id = "billing_portal", tag = "billing", request_body = PortalRequest,
    responses((status = 201, body = HostedPage), Errors))]
#[post("/billing/portal")]
pub async fn portal(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    body: crate::body::Json<PortalRequest>,
) -> ApiResult<HttpResponse> {
    not_airgapped(&state)?;
    let return_url = browser_url("return_url", &body.return_url)?;
    let mut conn = state.conn().await?;
    let Some(customer) = db::customer_of_org(&mut conn, session.org_id).await? else {
        return Err(ApiError::Conflict(
            "the organization has no billing account yet: subscribe through POST /billing/checkout first".into(),
        ));
    };
    drop(conn);
    let page =
        provider(&state)?.portal(&customer, &return_url).await.map_err(|e| ApiError::BadGateway(e.to_string()))?;
    let mut conn = state.conn().await?;
    let entry = Entry {
        action: "billing.portal",
        resource_type: "organization",
        resource_id: Some(session.org_id.to_string()),
        detail: json!({"session_id": page.id}),
    };
    trail::by(&mut conn, &session, &req, entry).await?;
    Ok(HttpResponse::Created().json(HostedPage { id: page.id, url: page.url }))
}

/// The organization's customer at the provider, made (once: the provider's idempotency key is
/// the organization's) and linked on first use.
async fn customer(state: &AppState, provider: &dyn BillingProvider, session: &Session) -> ApiResult<String> {
    let (email, name) = {
        let mut conn = state.conn().await?;
        if let Some(c) = db::customer_of_org(&mut conn, session.org_id).await? {
            return Ok(c);
        }
        let user = users::find(&mut conn, session.user_id).await?.ok_or(ApiError::NotFound("user"))?;
        let org =
            gw_shared::db::orgs::find(&mut conn, session.org_id).await?.ok_or(ApiError::NotFound("organization"))?;
        (user.email, org.name)
    };
    let made = provider
        .create_customer(session.org_id, &email, &name)
        .await
        .map_err(|e| ApiError::BadGateway(e.to_string()))?;
    let mut conn = state.conn().await?;
    match db::link_customer(&mut conn, session.org_id, &made).await {
        Ok(c) => Ok(c),
        Err(e) if crate::error::is_unique_violation(&e) => {
            Err(ApiError::BadGateway("the billing provider answered with a customer another organization holds".into()))
        }
        Err(e) => Err(e.into()),
    }
}

#[derive(Serialize, ToSchema)]
pub struct Received {
    /// Always true: the event was taken (a 2xx tells the provider not to send it again).
    received: bool,
    /// What became of it: `applied`, `stale` (older than the state already applied),
    /// `duplicate` (received before), `linked` (a checkout tied a customer to its
    /// organization), `recorded`, `unknown_customer` or `ignored` (a type gw does not act on).
    outcome: String,
}

/// Events from the billing provider (Stripe's webhook scheme; not for customers). Authenticated
/// by the `Stripe-Signature` header, not a session.
#[utoipa::path(operation_id = "billing_webhook", tag = "billing", security(()),
    params(("Stripe-Signature" = String, Header, description = "t=<Unix seconds>,v1=<hex HMAC-SHA256 of \"t.body\">")),
    request_body(content = Object, description = "A Stripe event", content_type = "application/json"),
    responses((status = 200, body = Received), Errors))]
#[post("/billing/webhook")]
pub async fn webhook(state: web::Data<AppState>, req: HttpRequest, body: web::Bytes) -> ApiResult<HttpResponse> {
    let billing = &state.cfg.billing;
    if billing.airgap {
        return Err(ApiError::Forbidden(
            "billing is handled outside the platform (AIRGAP_MODE=true): this endpoint takes no events".into(),
        ));
    }
    if billing.webhook_secrets.is_empty() {
        return Err(ApiError::Unavailable("billing webhooks are not configured (STRIPE_WEBHOOK_SECRET)".into()));
    }
    let header = req
        .headers()
        .get("stripe-signature")
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| ApiError::Validation("the Stripe-Signature header is missing".into()))?;
    let secrets: Vec<&str> = billing.webhook_secrets.iter().map(String::as_str).collect();
    stripe_signature::verify(header, &body, &secrets, chrono::Utc::now().timestamp())
        .map_err(|e| ApiError::Validation(format!("Stripe-Signature: {e}")))?;
    let event = Event::parse(&body).map_err(|e| ApiError::Validation(e.to_string()))?;
    let trail = Trail::new(Uuid::nil(), Actor { user_id: None, role: None }, &req);
    let mut conn = state.conn().await?;
    let (outcome, changed) = conn
        .transaction(async |conn| {
            let (outcome, changed) = handle(&state, conn, trail, &event).await?;
            // The proxies read the plan (its gateway-credential quota) from their caches.
            let changed = match changed {
                Some(org_id) => Some((org_id, invalidations::record_all(conn, [Invalidation::Org { org_id }]).await?)),
                None => None,
            };
            Ok::<_, ApiError>((outcome, changed))
        })
        .await?;
    log::info!("billing event {} ({}): {outcome}", event.id, event.event_type);
    if let Some((org_id, logged)) = changed {
        state.announce(&logged, format_args!("the plan of organization {org_id}")).await;
    }
    Ok(HttpResponse::Ok().json(Received { received: true, outcome }))
}

/// Applies one event, once, in one transaction with its record and its trail entry: what became
/// of it, and the organization whose plan it set.
async fn handle(
    state: &AppState,
    conn: &mut AsyncPgConnection,
    mut trail: Trail,
    e: &Event,
) -> ApiResult<(String, Option<Uuid>)> {
    if !db::record_event(conn, e).await? {
        return Ok(("duplicate".into(), None));
    }
    let (org, outcome) = match e.event_type.as_str() {
        "customer.subscription.created" | "customer.subscription.updated" | "customer.subscription.deleted" => {
            let s = Subscription::from_event(e)
                .ok_or_else(|| ApiError::Validation("the event's subscription is incomplete".into()))?;
            match org_of(conn, &s.customer, s.org_hint).await? {
                None => (None, "unknown_customer"),
                Some(org_id) => {
                    let sold = s.price.as_deref().and_then(|p| state.cfg.billing.plan_of_price(p));
                    let plan = plan_for(&s.status, sold);
                    match db::apply_subscription(conn, org_id, &s, plan, e.created).await? {
                        Applied::Stale => (Some(org_id), "stale"),
                        Applied::Changed { from, to, sso_disabled } => {
                            let change = PlanChange {
                                from: &from,
                                to: &to,
                                source: "provider",
                                subscription_status: Some(&s.status),
                                provider_event_id: Some(&e.id),
                                sso_connections_disabled: sso_disabled,
                            };
                            gw_shared::db::events::emit(conn, payloads::subscription_updated(org_id, &change)).await?;
                            trail.org_id = org_id;
                            let detail = json!({"event_id": e.id, "event_type": e.event_type, "status": s.status,
                                                "plan_from": from, "plan_to": to, "sso_connections_disabled": sso_disabled});
                            let entry = Entry {
                                action: "billing.subscription",
                                resource_type: "organization",
                                resource_id: Some(org_id.to_string()),
                                detail,
                            };
                            trail.record(conn, entry).await?;
                            (Some(org_id), "applied")
                        }
                    }
                }
            }
        }
        "invoice.paid" | "invoice.payment_failed" | "checkout.session.completed" => {
            let customer = e.object.get("customer").and_then(|v| v.as_str()).unwrap_or_default();
            (db::org_of_customer(conn, customer).await?, "recorded")
        }
        _ => (None, "ignored"),
    };
    db::set_outcome(conn, &e.id, org, outcome).await?;
    Ok((outcome.to_string(), org.filter(|_| outcome == "applied")))
}

/// The organization of a customer: the one already linked to it, else the one the subscription
/// names (`metadata.gw_org_id`, set when gw started the checkout), if it exists.
async fn org_of(conn: &mut AsyncPgConnection, customer: &str, hint: Option<Uuid>) -> ApiResult<Option<Uuid>> {
    if let Some(org) = db::org_of_customer(conn, customer).await? {
        return Ok(Some(org));
    }
    match hint {
        Some(org) if db::org_exists(conn, org).await? => Ok(Some(org)),
        _ => Ok(None),
    }
}
