//! A Stripe dialect, for what `localstripe` lacks: Checkout Sessions, billing-portal sessions and
//! billing meter events, and customers (idempotent by `Idempotency-Key`, as Stripe's are).
//! Meter events follow Stripe's rules: a repeated `Idempotency-Key` gets the first answer back, a
//! new request reusing an `identifier` is refused (400 `resource_already_exists`), and only the
//! first event per identifier counts: `GET /_mock/stripe/meter_events` lists those, oldest
//! first. Fault knobs: a customer id containing `unreachable` gets 500 `api_error`;
//! `POST /_mock/stripe/delay` `{"meter_events_ms": N}` makes each meter event answer N ms late;
//! `POST /_mock/stripe/expire_idempotency` forgets every idempotency key (Stripe forgets them
//! after 24 hours, identifiers later). Requests are form-encoded
//! with `authorization: Bearer sk_...` (else 401 in Stripe's error shape); answers follow
//! Stripe's documented objects (the fields gw reads and a few more). Every request is kept:
//! `GET /_mock/stripe/requests` lists them (`path`, `form`, `idempotency_key`), newest last.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex};

use actix_web::{get, post, web, HttpRequest, HttpResponse};
use serde_json::{json, Value};

use crate::header;

static SEQ: AtomicU64 = AtomicU64::new(1);
static REQUESTS: LazyLock<Mutex<Vec<Value>>> = LazyLock::new(|| Mutex::new(Vec::new()));
static IDEMPOTENT: LazyLock<Mutex<HashMap<String, Value>>> = LazyLock::new(|| Mutex::new(HashMap::new()));
static METER_EVENTS: LazyLock<Mutex<Vec<Value>>> = LazyLock::new(|| Mutex::new(Vec::new()));
static METER_DELAY_MS: AtomicU64 = AtomicU64::new(0);

type Form = web::Form<BTreeMap<String, String>>;

fn error(status: u16, kind: &str, message: &str) -> HttpResponse {
    let status = actix_web::http::StatusCode::from_u16(status).unwrap_or(actix_web::http::StatusCode::BAD_REQUEST);
    HttpResponse::build(status).json(json!({"error": {"type": kind, "message": message}}))
}

/// Keeps the request; an error answer unless it is authorized and names `required`.
fn admit(req: &HttpRequest, path: &str, form: &BTreeMap<String, String>, required: &[&str]) -> Option<HttpResponse> {
    let key = header(req, "idempotency-key");
    if let Ok(mut r) = REQUESTS.lock() {
        r.push(json!({"path": path, "form": form, "idempotency_key": key}));
    }
    let authorized = header(req, "authorization").is_some_and(|a| a.starts_with("Bearer sk_"));
    if !authorized {
        return Some(error(401, "invalid_request_error", "Invalid API Key provided"));
    }
    required
        .iter()
        .find(|f| !form.contains_key(**f))
        .map(|f| error(400, "invalid_request_error", &format!("Missing required param: {f}.")))
}

/// A new object id: unique across mock processes too (stacks share a database).
fn next(prefix: &str) -> String {
    let salt = &uuid::Uuid::new_v4().simple().to_string()[..12];
    format!("{prefix}_mock{}{salt}", SEQ.fetch_add(1, Ordering::Relaxed))
}

fn metadata(form: &BTreeMap<String, String>, prefix: &str) -> Value {
    let m: serde_json::Map<String, Value> = form
        .iter()
        .filter_map(|(k, v)| Some((k.strip_prefix(prefix)?.strip_suffix(']')?.to_string(), json!(v))))
        .collect();
    Value::Object(m)
}

#[post("/v1/customers")]
pub async fn customers(req: HttpRequest, form: Form) -> HttpResponse {
    if let Some(refused) = admit(&req, "/v1/customers", &form, &[]) {
        return refused;
    }
    let key = header(&req, "idempotency-key");
    if let Some(k) = &key {
        if let Some(done) = IDEMPOTENT.lock().ok().and_then(|m| m.get(k).cloned()) {
            return HttpResponse::Ok().json(done);
        }
    }
    let customer = json!({"id": next("cus"), "object": "customer", "email": form.get("email"), "name": form.get("name"),
                          "metadata": metadata(&form, "metadata["), "livemode": false});
    if let (Some(k), Ok(mut m)) = (key, IDEMPOTENT.lock()) {
        m.insert(k, customer.clone());
    }
    HttpResponse::Ok().json(customer)
}

#[post("/v1/checkout/sessions")]
pub async fn checkout_sessions(req: HttpRequest, form: Form) -> HttpResponse {
    let required = ["mode", "success_url", "line_items[0][price]"];
    if let Some(refused) = admit(&req, "/v1/checkout/sessions", &form, &required) {
        return refused;
    }
    let id = next("cs_test");
    HttpResponse::Ok().json(json!({
        "id": id, "object": "checkout.session", "mode": form.get("mode"), "customer": form.get("customer"),
        "client_reference_id": form.get("client_reference_id"), "success_url": form.get("success_url"),
        "cancel_url": form.get("cancel_url"), "status": "open", "payment_status": "unpaid",
        "url": format!("https://checkout.stripe.com/c/pay/{id}"), "livemode": false,
    }))
}

#[post("/v1/billing_portal/sessions")]
pub async fn portal_sessions(req: HttpRequest, form: Form) -> HttpResponse {
    if let Some(refused) = admit(&req, "/v1/billing_portal/sessions", &form, &["customer"]) {
        return refused;
    }
    let id = next("bps");
    HttpResponse::Ok().json(json!({
        "id": id, "object": "billing_portal.session", "customer": form.get("customer"),
        "return_url": form.get("return_url"), "url": format!("https://billing.stripe.com/p/session/{id}"),
        "livemode": false,
    }))
}

#[post("/v1/billing/meter_events")]
pub async fn meter_events(req: HttpRequest, form: Form) -> HttpResponse {
    let required = ["event_name", "payload[stripe_customer_id]", "payload[value]"];
    if let Some(refused) = admit(&req, "/v1/billing/meter_events", &form, &required) {
        return refused;
    }
    let key = header(&req, "idempotency-key");
    if let Some(done) = key.as_ref().and_then(|k| IDEMPOTENT.lock().ok().and_then(|m| m.get(k).cloned())) {
        return HttpResponse::Ok().json(done);
    }
    let customer = form.get("payload[stripe_customer_id]").cloned().unwrap_or_default();
    if customer.contains("unreachable") {
        return error(500, "api_error", "An unknown error occurred");
    }
    let Some(value) = form.get("payload[value]").and_then(|v| v.parse::<i64>().ok()).filter(|v| *v >= 0) else {
        return error(400, "invalid_request_error", "payload[value] must be a non-negative whole number.");
    };
    let identifier = form.get("identifier").cloned().unwrap_or_else(|| next("mev"));
    let now = chrono::Utc::now().timestamp();
    let timestamp = form.get("timestamp").and_then(|t| t.parse::<i64>().ok()).unwrap_or(now);
    let event = json!({"object": "billing.meter_event", "created": now, "event_name": form.get("event_name"),
                       "identifier": identifier, "livemode": false, "timestamp": timestamp,
                       "payload": {"stripe_customer_id": customer, "value": value.to_string()}});
    if let Some(refused) = count_once(&identifier, &event) {
        return refused;
    }
    if let (Some(k), Ok(mut m)) = (key, IDEMPOTENT.lock()) {
        m.insert(k, event.clone());
    }
    let delay = METER_DELAY_MS.load(Ordering::Relaxed);
    if delay > 0 {
        tokio::time::sleep(std::time::Duration::from_millis(delay)).await;
    }
    HttpResponse::Ok().json(event)
}

/// Counts a meter event unless its identifier was counted before (then Stripe's refusal).
fn count_once(identifier: &str, event: &Value) -> Option<HttpResponse> {
    let Ok(mut counted) = METER_EVENTS.lock() else {
        return Some(error(500, "api_error", "the mock's lock is poisoned"));
    };
    if counted.iter().any(|e| e["identifier"] == identifier) {
        let message = format!("An event with identifier {identifier} already exists.");
        return Some(HttpResponse::BadRequest().json(
            json!({"error": {"type": "invalid_request_error", "code": "resource_already_exists", "message": message}}),
        ));
    }
    counted.push(event.clone());
    None
}

#[get("/_mock/stripe/meter_events")]
pub async fn counted_meter_events() -> HttpResponse {
    HttpResponse::Ok().json(METER_EVENTS.lock().map(|r| r.clone()).unwrap_or_default())
}

#[post("/_mock/stripe/delay")]
pub async fn set_delay(body: web::Json<Value>) -> HttpResponse {
    METER_DELAY_MS.store(body.get("meter_events_ms").and_then(Value::as_u64).unwrap_or(0), Ordering::Relaxed);
    HttpResponse::NoContent().finish()
}

#[post("/_mock/stripe/expire_idempotency")]
pub async fn expire_idempotency() -> HttpResponse {
    if let Ok(mut m) = IDEMPOTENT.lock() {
        m.clear();
    }
    HttpResponse::NoContent().finish()
}

#[get("/_mock/stripe/requests")]
pub async fn requests() -> HttpResponse {
    let all = REQUESTS.lock().map(|r| r.clone()).unwrap_or_default();
    HttpResponse::Ok().json(all)
}
