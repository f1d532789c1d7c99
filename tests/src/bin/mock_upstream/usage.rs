//! The usage ledger (what each credential's answers spent, per model and UTC day), its price
//! table and adjustments, and the OpenAI- and Anthropic-compatible usage and cost reports built
//! from it. See `# Usage reports` in the main module.

use std::collections::{BTreeMap, HashMap};

use actix_web::{get, post, web, HttpRequest, HttpResponse};
use chrono::{DateTime, NaiveDate, NaiveTime, Utc};
use rust_decimal::prelude::ToPrimitive;
use rust_decimal::{Decimal, RoundingStrategy};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::{anthropic, bearer, header, openai, State};

/// Tokens one answer spent, as the mock counted them (whether or not the answer shows them).
pub struct Spent {
    /// The model the answer names.
    pub model: String,
    /// The whole prompt, cached tokens included.
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Of the prompt, the tokens read from a cache.
    pub cached_tokens: u64,
}

/// One credential's usage of one model on one UTC day.
#[derive(Debug, Clone, Default)]
pub struct UsageCell {
    pub requests: u64,
    /// Whole prompts, cached tokens included (OpenAI's `prompt_tokens`).
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Of `input_tokens`, those read from a cache.
    pub cached_tokens: u64,
    /// The sum of each request's cost rounded to 10 places (as gw stores it), plus adjustments.
    pub cost: Decimal,
    /// The parts of `cost` spent on output and on cached input, each request's rounded like its
    /// total; the rest of `cost` is uncached input (and adjustments).
    pub output_cost: Decimal,
    pub cached_cost: Decimal,
}

impl UsageCell {
    fn add(&mut self, other: &UsageCell) {
        self.requests = self.requests.saturating_add(other.requests);
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.cached_tokens = self.cached_tokens.saturating_add(other.cached_tokens);
        self.cost = self.cost.saturating_add(other.cost);
        self.output_cost = self.output_cost.saturating_add(other.output_cost);
        self.cached_cost = self.cached_cost.saturating_add(other.cached_cost);
    }

    fn uncached_tokens(&self) -> u64 {
        self.input_tokens.saturating_sub(self.cached_tokens)
    }
}

/// Per credential, per (model, UTC day).
pub type Ledger = HashMap<String, BTreeMap<(String, NaiveDate), UsageCell>>;

/// A model's prices, USD per million tokens.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    #[serde(with = "rust_decimal::serde::str")]
    input_per_mtok: Decimal,
    #[serde(with = "rust_decimal::serde::str")]
    output_per_mtok: Decimal,
    /// The input price when absent.
    #[serde(default, with = "rust_decimal::serde::str_option")]
    cached_input_per_mtok: Option<Decimal>,
}

/// Prices by model name.
pub type Prices = HashMap<String, Price>;

const MTOK: Decimal = Decimal::from_parts(1_000_000, 0, 0, false, 0);

/// Rounded as gw's NUMERIC(20,10) column rounds.
fn round10(d: Decimal) -> Decimal {
    d.round_dp_with_strategy(10, RoundingStrategy::MidpointAwayFromZero)
}

/// One request's cost and the parts of it `UsageCell` keeps apart, each rounded to 10 places.
#[derive(Default)]
struct Cost {
    total: Decimal,
    output: Decimal,
    cached: Decimal,
}

impl Price {
    /// `None` when the arithmetic overflows (absurd prices).
    fn cost(&self, s: &Spent) -> Option<Cost> {
        let cached_tokens = s.cached_tokens.min(s.input_tokens);
        let times = |tokens: u64, price: Decimal| Decimal::from(tokens).checked_mul(price);
        let uncached = times(s.input_tokens - cached_tokens, self.input_per_mtok)?;
        let cached = times(cached_tokens, self.cached_input_per_mtok.unwrap_or(self.input_per_mtok))?;
        let output = times(s.output_tokens, self.output_per_mtok)?;
        let total = uncached.checked_add(cached)?.checked_add(output)?.checked_div(MTOK)?;
        Some(Cost {
            total: round10(total),
            output: round10(output.checked_div(MTOK)?),
            cached: round10(cached.checked_div(MTOK)?),
        })
    }
}

/// Records an answer under `credential`, today (UTC), costed at the current prices (nothing for
/// a model without prices).
pub fn record(state: &State, credential: &str, spent: Spent) {
    let price = state.prices.lock().ok().and_then(|p| p.get(&spent.model).cloned());
    let cost = match price.map(|p| p.cost(&spent)) {
        None => Cost::default(),
        Some(Some(cost)) => cost,
        Some(None) => {
            log::warn!("mock-upstream: the cost of a {} answer overflows; recorded as 0", spent.model);
            Cost::default()
        }
    };
    let Ok(mut ledger) = state.usage.lock() else { return };
    let day = Utc::now().date_naive();
    let cell = ledger.entry(credential.to_string()).or_default().entry((spent.model, day)).or_default();
    cell.add(&UsageCell {
        requests: 1,
        input_tokens: spent.input_tokens,
        output_tokens: spent.output_tokens,
        cached_tokens: spent.cached_tokens.min(spent.input_tokens),
        cost: cost.total,
        output_cost: cost.output,
        cached_cost: cost.cached,
    });
}

/// `POST /_mock/usage/prices`: merges `{"<model>": {"input_per_mtok", "output_per_mtok",
/// "cached_input_per_mtok"?}}` (decimal strings) into the price table.
#[post("/_mock/usage/prices")]
pub async fn set_prices(state: web::Data<State>, body: web::Json<Prices>) -> HttpResponse {
    let Ok(mut prices) = state.prices.lock() else {
        return HttpResponse::InternalServerError().finish();
    };
    prices.extend(body.into_inner());
    HttpResponse::NoContent().finish()
}

/// A discrepancy a test injects into one cell: signed deltas.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Adjustment {
    credential: String,
    model: String,
    day: NaiveDate,
    #[serde(default)]
    requests: i64,
    #[serde(default)]
    input_tokens: i64,
    #[serde(default)]
    output_tokens: i64,
    #[serde(default)]
    cached_tokens: i64,
    /// USD; counted as uncached input in the reports' line items.
    #[serde(default, with = "rust_decimal::serde::str_option")]
    cost: Option<Decimal>,
}

/// `POST /_mock/usage/adjust`: adds an [`Adjustment`] to its cell, creating it.
#[post("/_mock/usage/adjust")]
pub async fn adjust(state: web::Data<State>, body: web::Json<Adjustment>) -> HttpResponse {
    let a = body.into_inner();
    let Ok(mut ledger) = state.usage.lock() else {
        return HttpResponse::InternalServerError().finish();
    };
    let cell = ledger.entry(a.credential).or_default().entry((a.model, a.day)).or_default();
    cell.requests = cell.requests.saturating_add_signed(a.requests);
    cell.input_tokens = cell.input_tokens.saturating_add_signed(a.input_tokens);
    cell.output_tokens = cell.output_tokens.saturating_add_signed(a.output_tokens);
    cell.cached_tokens = cell.cached_tokens.saturating_add_signed(a.cached_tokens);
    cell.cost = cell.cost.saturating_add(a.cost.unwrap_or_default());
    HttpResponse::NoContent().finish()
}

/// A report request's query: pairs in order, so repeated keys (`group_by[]=a&group_by[]=b`)
/// all count.
struct Query(Vec<(String, String)>);

impl Query {
    fn parse(req: &HttpRequest) -> Result<Query, String> {
        web::Query::<Vec<(String, String)>>::from_query(req.query_string())
            .map(|q| Query(q.into_inner()))
            .map_err(|e| format!("invalid query string: {e}"))
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// Whether `group_by` or `group_by[]` (repeated or comma-separated) names `dimension`.
    fn groups_by(&self, dimension: &str) -> bool {
        self.0
            .iter()
            .filter(|(k, _)| k == "group_by" || k == "group_by[]")
            .flat_map(|(_, v)| v.split(','))
            .any(|d| d.trim() == dimension)
    }
}

const DAY_SECS: i64 = 86_400;

fn day_start(d: NaiveDate) -> i64 {
    d.and_time(NaiveTime::MIN).and_utc().timestamp()
}

fn day_of(unix: i64) -> Option<NaiveDate> {
    DateTime::from_timestamp(unix, 0).map(|t| t.date_naive())
}

/// One page of daily buckets: its days with the credential's cells of each (in model order),
/// and the day the next page starts at.
struct Page {
    days: Vec<(NaiveDate, Vec<(String, UsageCell)>)>,
    next: Option<NaiveDate>,
}

impl Page {
    /// The page a report request asks for: the UTC days from `start`'s (or the `page` cursor's)
    /// whose start is before `end` (default: the end of today), at most `limit` of them (default
    /// 7, at most 31). `start` and `end` are unix seconds; only `bucket_width=1d` is served.
    fn read(state: &State, credential: &str, q: &Query, start: i64, end: Option<i64>) -> Result<Page, Refusal> {
        if q.get("bucket_width").is_some_and(|w| w != "1d") {
            return Err(Refusal::Bad("only bucket_width=1d is supported".into()));
        }
        let limit = match q.get("limit") {
            None => 7,
            Some(l) => l.parse::<usize>().ok().filter(|l| (1..=31).contains(l)).ok_or_else(|| {
                Refusal::Bad(format!("limit must be between 1 and 31 for bucket_width=1d, not {l:?}"))
            })?,
        };
        let from = match q.get("page") {
            None => start,
            Some(p) => p.parse::<i64>().map_err(|_| Refusal::Bad(format!("invalid page cursor {p:?}")))?,
        };
        let mut day = day_of(from).ok_or_else(|| Refusal::Bad("start out of range".into()))?;
        let end = end.unwrap_or_else(|| day_start(Utc::now().date_naive()) + DAY_SECS);
        let mut days = Vec::new();
        while days.len() < limit && day_start(day) < end {
            days.push(day);
            day = day.succ_opt().ok_or_else(|| Refusal::Bad("end out of range".into()))?;
        }
        let next = (day_start(day) < end).then_some(day);
        let ledger = state.usage.lock().map_err(|_| Refusal::Internal)?;
        let cells = ledger.get(credential);
        let days = days
            .into_iter()
            .map(|d| {
                let of_day = cells
                    .into_iter()
                    .flatten()
                    .filter(|((_, cell_day), _)| *cell_day == d)
                    .map(|((model, _), cell)| (model.clone(), cell.clone()))
                    .collect();
                (d, of_day)
            })
            .collect();
        Ok(Page { days, next })
    }

    fn next_page(&self) -> Value {
        self.next.map_or(Value::Null, |d| json!(day_start(d).to_string()))
    }
}

/// Why a report request gets no report.
enum Refusal {
    Bad(String),
    Internal,
}

/// The whole day's usage as one cell, for reports not grouped by model.
fn total(cells: &[(String, UsageCell)]) -> UsageCell {
    let mut sum = UsageCell::default();
    for (_, cell) in cells {
        sum.add(cell);
    }
    sum
}

/// Plain decimal notation, no trailing zeros.
fn exact(d: Decimal) -> String {
    d.normalize().to_string()
}

/// OpenAI's reports: the page of buckets whose results `results` makes of each day's cells.
fn openai_report(
    state: &State,
    req: &HttpRequest,
    results: impl Fn(&Query, &[(String, UsageCell)]) -> Vec<Value>,
) -> HttpResponse {
    let Some(credential) = bearer(req) else {
        return openai::error(401, "You didn't provide an API key.", None);
    };
    let q = match Query::parse(req) {
        Ok(q) => q,
        Err(e) => return openai::error(400, &e, None),
    };
    let Some(start) = q.get("start_time").and_then(|s| s.parse::<i64>().ok()) else {
        return openai::error(400, "start_time (unix seconds) is required", Some("start_time"));
    };
    let end = match q.get("end_time").map(str::parse::<i64>) {
        None => None,
        Some(Ok(end)) => Some(end),
        Some(Err(_)) => return openai::error(400, "end_time must be unix seconds", Some("end_time")),
    };
    let page = match Page::read(state, &credential, &q, start, end) {
        Ok(page) => page,
        Err(Refusal::Bad(e)) => return openai::error(400, &e, None),
        Err(Refusal::Internal) => return openai::error(500, "mock upstream: the ledger is unavailable", None),
    };
    let data: Vec<Value> = page
        .days
        .iter()
        .map(|(day, cells)| {
            json!({"object": "bucket", "start_time": day_start(*day), "end_time": day_start(*day) + DAY_SECS,
                   "results": results(&q, cells.as_slice())})
        })
        .collect();
    HttpResponse::Ok().json(json!({"object": "page", "data": data, "has_more": page.next.is_some(),
                                   "next_page": page.next_page()}))
}

fn openai_usage_result(model: Option<&str>, c: &UsageCell) -> Value {
    json!({"object": "organization.usage.completions.result", "input_tokens": c.input_tokens,
           "output_tokens": c.output_tokens, "input_cached_tokens": c.cached_tokens,
           "input_audio_tokens": 0, "output_audio_tokens": 0, "num_model_requests": c.requests,
           "project_id": null, "user_id": null, "api_key_id": null, "model": model, "batch": null})
}

fn openai_cost_result(line_item: Option<String>, amount: Decimal) -> Value {
    json!({"object": "organization.costs.result",
           "amount": {"value": amount.to_f64().unwrap_or(0.0), "currency": "usd"},
           "amount_exact": exact(amount), "line_item": line_item, "project_id": null})
}

/// `GET /v1/organization/usage/completions`: OpenAI's completions usage of the bearer's ledger.
#[get("/v1/organization/usage/completions")]
pub async fn openai_usage(state: web::Data<State>, req: HttpRequest) -> HttpResponse {
    openai_report(&state, &req, |q, cells| {
        if q.groups_by("model") {
            cells.iter().map(|(model, c)| openai_usage_result(Some(model.as_str()), c)).collect()
        } else if cells.is_empty() {
            Vec::new()
        } else {
            vec![openai_usage_result(None, &total(cells))]
        }
    })
}

/// `GET /v1/organization/costs`: OpenAI's costs of the bearer's ledger, per model an input line
/// (cached input included) and an output line that add up to the model's cost exactly.
#[get("/v1/organization/costs")]
pub async fn openai_costs(state: web::Data<State>, req: HttpRequest) -> HttpResponse {
    openai_report(&state, &req, |q, cells| {
        if q.groups_by("line_item") {
            cells
                .iter()
                .flat_map(|(model, c)| {
                    [
                        openai_cost_result(Some(format!("{model}, input")), c.cost.saturating_sub(c.output_cost)),
                        openai_cost_result(Some(format!("{model}, output")), c.output_cost),
                    ]
                })
                .collect()
        } else if cells.is_empty() {
            Vec::new()
        } else {
            vec![openai_cost_result(None, total(cells).cost)]
        }
    })
}

/// Anthropic's reports: the page of buckets whose results `results` makes of each day's cells.
fn anthropic_report(
    state: &State,
    req: &HttpRequest,
    results: impl Fn(&Query, &[(String, UsageCell)]) -> Vec<Value>,
) -> HttpResponse {
    let Some(credential) = header(req, "x-api-key").or_else(|| bearer(req)) else {
        return anthropic::error(401, "x-api-key header is required");
    };
    if header(req, "anthropic-version").is_none() {
        return anthropic::error(400, "anthropic-version: header is required");
    }
    let q = match Query::parse(req) {
        Ok(q) => q,
        Err(e) => return anthropic::error(400, &e),
    };
    let instant = |key: &str| q.get(key).map(|s| DateTime::parse_from_rfc3339(s).map(|t| t.timestamp()));
    let start = match instant("starting_at") {
        Some(Ok(start)) => start,
        _ => return anthropic::error(400, "starting_at: an RFC 3339 date-time is required"),
    };
    let end = match instant("ending_at") {
        None => None,
        Some(Ok(end)) => Some(end),
        Some(Err(_)) => return anthropic::error(400, "ending_at: invalid RFC 3339 date-time"),
    };
    let page = match Page::read(state, &credential, &q, start, end) {
        Ok(page) => page,
        Err(Refusal::Bad(e)) => return anthropic::error(400, &e),
        Err(Refusal::Internal) => return anthropic::error(500, "mock upstream: the ledger is unavailable"),
    };
    let rfc3339 = |d: NaiveDate| format!("{d}T00:00:00Z");
    let data: Vec<Value> = page
        .days
        .iter()
        .map(|(day, cells)| {
            let ending = day.succ_opt().map_or(Value::Null, |next| json!(rfc3339(next)));
            json!({"starting_at": rfc3339(*day), "ending_at": ending, "results": results(&q, cells.as_slice())})
        })
        .collect();
    HttpResponse::Ok().json(json!({"data": data, "has_more": page.next.is_some(), "next_page": page.next_page()}))
}

fn anthropic_usage_result(model: Option<&str>, c: &UsageCell) -> Value {
    json!({"uncached_input_tokens": c.uncached_tokens(),
           "cache_creation": {"ephemeral_1h_input_tokens": 0, "ephemeral_5m_input_tokens": 0},
           "cache_read_input_tokens": c.cached_tokens, "output_tokens": c.output_tokens,
           "server_tool_use": {"web_search_requests": 0}, "model": model, "api_key_id": null,
           "workspace_id": null, "service_tier": "standard", "context_window": "0-200k"})
}

/// USD as Anthropic's cost report gives it: a decimal string of cents.
fn cents(usd: Decimal) -> String {
    exact(usd.saturating_mul(Decimal::ONE_HUNDRED))
}

/// `GET /v1/organizations/usage_report/messages`: Anthropic's messages usage of the key's
/// ledger.
#[get("/v1/organizations/usage_report/messages")]
pub async fn anthropic_usage(state: web::Data<State>, req: HttpRequest) -> HttpResponse {
    anthropic_report(&state, &req, |q, cells| {
        if q.groups_by("model") {
            cells.iter().map(|(model, c)| anthropic_usage_result(Some(model.as_str()), c)).collect()
        } else if cells.is_empty() {
            Vec::new()
        } else {
            vec![anthropic_usage_result(None, &total(cells))]
        }
    })
}

/// `GET /v1/organizations/cost_report`: Anthropic's costs of the key's ledger, per model up to
/// three token-type lines that add up to the model's cost exactly.
#[get("/v1/organizations/cost_report")]
pub async fn anthropic_costs(state: web::Data<State>, req: HttpRequest) -> HttpResponse {
    anthropic_report(&state, &req, |q, cells| {
        if !q.groups_by("description") {
            if cells.is_empty() {
                return Vec::new();
            }
            return vec![json!({"currency": "USD", "amount": cents(total(cells).cost), "workspace_id": null,
                               "description": null, "cost_type": null, "context_window": null, "model": null,
                               "service_tier": null, "token_type": null})];
        }
        let mut lines = Vec::new();
        for (model, c) in cells {
            let mut parts = vec![
                ("uncached_input_tokens", c.cost.saturating_sub(c.output_cost).saturating_sub(c.cached_cost)),
                ("output_tokens", c.output_cost),
            ];
            if c.cached_tokens > 0 || !c.cached_cost.is_zero() {
                parts.push(("cache_read_input_tokens", c.cached_cost));
            }
            for (token_type, usd) in parts {
                lines.push(json!({"currency": "USD", "amount": cents(usd), "workspace_id": null,
                                  "description": format!("{model} usage"), "cost_type": "tokens",
                                  "context_window": "0-200k", "model": model, "service_tier": "standard",
                                  "token_type": token_type}));
            }
        }
        lines
    })
}
