//! `gw-admin usage`: `export` writes an organization's usage over a period, for invoicing outside
//! the platform (air-gapped mode), from the same hourly rollups the metered sync sends (the audit
//! log for hours not rolled up yet, so totals are exact), one row per hour, model and provider,
//! as JSON lines, CSV, or CSV in the FinOps FOCUS 1.0 columns; `retry` puts an organization's
//! sends the sync gave up on back in its queue (`docs/billing.md`).

use std::collections::BTreeMap;

use chrono::{DateTime, NaiveDate, TimeDelta, Utc};
use gw_shared::db::rollups::{self, Rollup, Scope};
use serde_json::json;
use uuid::Uuid;

use crate::routes::analytics::export::csv_row;

type BoxError = Box<dyn std::error::Error>;

const USAGE: &str = "usage: gw-admin usage export <organization id> --from <time> --to <time> \
                     [--format jsonl|csv|focus] [--out <file>]  (times: RFC 3339 or YYYY-MM-DD, on the hour)\n\
                     or: gw-admin usage retry <organization id>";
/// The longest period one export covers.
const MAX_DAYS: i64 = 366;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Jsonl,
    Csv,
    Focus,
}

fn parse_time(s: &str) -> Result<DateTime<Utc>, BoxError> {
    let t = match DateTime::parse_from_rfc3339(s) {
        Ok(t) => t.with_timezone(&Utc),
        Err(_) => NaiveDate::parse_from_str(s, "%Y-%m-%d")
            .map_err(|_| format!("{s:?} is not a time ({USAGE})"))?
            .and_hms_opt(0, 0, 0)
            .ok_or("not a time")?
            .and_utc(),
    };
    if rollups::floor_hour(t) != t {
        return Err(format!("{s:?} is not on the hour: usage is exported by whole hours").into());
    }
    Ok(t)
}

pub fn cmd(args: &[String]) -> Result<(), BoxError> {
    let [verb, org, rest @ ..] = args else {
        return Err(USAGE.into());
    };
    let org_id: Uuid = org.parse().map_err(|_| USAGE)?;
    match verb.as_str() {
        "export" => export(org_id, rest),
        "retry" if rest.is_empty() => retry(org_id),
        _ => Err(USAGE.into()),
    }
}

/// Sends the sync gave up on go back in the queue, their tries counted afresh; the running
/// leader sends them (same identifiers: whatever the provider did count is not counted again).
fn retry(org_id: Uuid) -> Result<(), BoxError> {
    let cfg = gw_shared::config::Config::load()?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let n = rt.block_on(async {
        let db = gw_shared::db::pool(&cfg.database, 1)?;
        let mut conn = db.get().await?;
        Ok::<_, BoxError>(gw_shared::db::usage_sync::retry_failed(&mut conn, org_id, gw_shared::clock::now()).await?)
    })?;
    println!("organization {org_id}: {n} failed send(s) queued again");
    Ok(())
}

fn export(org_id: Uuid, rest: &[String]) -> Result<(), BoxError> {
    let (mut from, mut to, mut format, mut out) = (None, None, Format::Jsonl, None);
    let mut it = rest.iter();
    while let Some(a) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--from" => from = Some(parse_time(value()?)?),
            "--to" => to = Some(parse_time(value()?)?),
            "--out" => out = Some(value()?.clone()),
            "--format" => {
                format = match value()?.as_str() {
                    "jsonl" => Format::Jsonl,
                    "csv" => Format::Csv,
                    "focus" => Format::Focus,
                    other => return Err(format!("--format {other:?}: jsonl, csv or focus").into()),
                }
            }
            other => return Err(format!("unknown option {other:?} ({USAGE})").into()),
        }
    }
    let (Some(from), Some(to)) = (from, to) else {
        return Err(USAGE.into());
    };
    if to <= from || to - from > TimeDelta::days(MAX_DAYS) {
        return Err(format!("--to must be after --from, at most {MAX_DAYS} days").into());
    }
    let cfg = gw_shared::config::Config::load()?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let (name, rows) = rt.block_on(async {
        let db = gw_shared::db::pool(&cfg.database, 1)?;
        let mut conn = db.get().await?;
        let org =
            gw_shared::db::orgs::find(&mut conn, org_id).await?.ok_or_else(|| format!("no organization {org_id}"))?;
        let rollups = rollups::collect(&mut conn, org_id, Scope::default(), from, to).await?;
        Ok::<_, BoxError>((org.name, by_hour_model(&rollups)))
    })?;
    let text = match format {
        Format::Jsonl => jsonl(&rows),
        Format::Csv => csv(&rows),
        Format::Focus => focus(&rows, org_id, &name, (from, to)),
    };
    match out {
        Some(path) => std::fs::write(&path, text)?,
        None => {
            use std::io::Write;
            std::io::stdout().write_all(&text)?;
        }
    }
    Ok(())
}

/// Hour, model, provider.
type RowKey = (DateTime<Utc>, Option<String>, Option<String>);

/// One row per hour, model and provider (teams and keys summed).
fn by_hour_model(rollups: &[Rollup]) -> Vec<Rollup> {
    let mut rows: BTreeMap<RowKey, Rollup> = BTreeMap::new();
    for r in rollups {
        let row = rows.entry((r.hour, r.model.clone(), r.provider.clone())).or_insert_with(|| Rollup {
            org_id: r.org_id,
            hour: r.hour,
            model: r.model.clone(),
            provider: r.provider.clone(),
            ..Rollup::default()
        });
        row.add(r);
    }
    rows.into_values().collect()
}

fn text(v: &Option<String>) -> String {
    v.clone().unwrap_or_default()
}

fn time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

fn jsonl(rows: &[Rollup]) -> Vec<u8> {
    let mut out = Vec::new();
    for r in rows {
        let line = json!({"hour": time(r.hour), "model": text(&r.model), "provider": text(&r.provider), "requests": r.requests,
                          "errors": r.errors, "prompt_tokens": r.prompt_tokens, "completion_tokens": r.completion_tokens,
                          "cost_usd": gw_shared::money::text(r.cost_usd),
                          "gateway_cost_usd": gw_shared::money::text(r.gateway_cost_usd)});
        out.extend_from_slice(line.to_string().as_bytes());
        out.push(b'\n');
    }
    out
}

fn csv(rows: &[Rollup]) -> Vec<u8> {
    let mut out = Vec::new();
    let header = ["hour", "model", "provider", "requests", "errors", "prompt_tokens", "completion_tokens"];
    let header: Vec<String> = header.iter().chain(&["cost_usd", "gateway_cost_usd"]).map(|s| s.to_string()).collect();
    csv_row(&mut out, &header);
    for r in rows {
        let fields = [
            time(r.hour),
            text(&r.model),
            text(&r.provider),
            r.requests.to_string(),
            r.errors.to_string(),
            r.prompt_tokens.to_string(),
            r.completion_tokens.to_string(),
            gw_shared::money::text(r.cost_usd),
            gw_shared::money::text(r.gateway_cost_usd),
        ];
        csv_row(&mut out, &fields);
    }
    out
}

/// The FOCUS 1.0 columns, in the specification's order of its column list.
const FOCUS_COLUMNS: &[&str] = &[
    "AvailabilityZone",
    "BilledCost",
    "BillingAccountId",
    "BillingAccountName",
    "BillingCurrency",
    "BillingPeriodEnd",
    "BillingPeriodStart",
    "ChargeCategory",
    "ChargeClass",
    "ChargeDescription",
    "ChargeFrequency",
    "ChargePeriodEnd",
    "ChargePeriodStart",
    "CommitmentDiscountCategory",
    "CommitmentDiscountId",
    "CommitmentDiscountName",
    "CommitmentDiscountStatus",
    "CommitmentDiscountType",
    "ConsumedQuantity",
    "ConsumedUnit",
    "ContractedCost",
    "ContractedUnitPrice",
    "EffectiveCost",
    "InvoiceIssuerName",
    "ListCost",
    "ListUnitPrice",
    "PricingCategory",
    "PricingQuantity",
    "PricingUnit",
    "ProviderName",
    "PublisherName",
    "RegionId",
    "RegionName",
    "ResourceId",
    "ResourceName",
    "ResourceType",
    "ServiceCategory",
    "ServiceName",
    "SkuId",
    "SkuPriceId",
    "SubAccountId",
    "SubAccountName",
    "Tags",
];

/// FOCUS rows: each hour, model and provider is a usage charge of the organization (billing
/// account and sub-account) whose cost is gw's exact cost; gw is the provider and invoice issuer,
/// the upstream provider the publisher; quantities are tokens.
fn focus(rows: &[Rollup], org_id: Uuid, org_name: &str, period: (DateTime<Utc>, DateTime<Utc>)) -> Vec<u8> {
    let mut out = Vec::new();
    let header: Vec<String> = FOCUS_COLUMNS.iter().map(|s| s.to_string()).collect();
    csv_row(&mut out, &header);
    for r in rows {
        let cost = gw_shared::money::text(r.cost_usd);
        let tokens = (r.prompt_tokens + r.completion_tokens).to_string();
        let tags = json!({"gw_requests": r.requests.to_string(), "gw_prompt_tokens": r.prompt_tokens.to_string(),
                          "gw_completion_tokens": r.completion_tokens.to_string(),
                          "gw_gateway_cost_usd": gw_shared::money::text(r.gateway_cost_usd)});
        let (model, provider) = (text(&r.model), text(&r.provider));
        let description = format!("{model} on {provider}: {} requests", r.requests);
        let values: BTreeMap<&str, String> = [
            ("BilledCost", cost.clone()),
            ("BillingAccountId", org_id.to_string()),
            ("BillingAccountName", org_name.to_string()),
            ("BillingCurrency", "USD".into()),
            ("BillingPeriodEnd", time(period.1)),
            ("BillingPeriodStart", time(period.0)),
            ("ChargeCategory", "Usage".into()),
            ("ChargeDescription", description),
            ("ChargeFrequency", "Usage-Based".into()),
            ("ChargePeriodEnd", time(r.hour + TimeDelta::hours(1))),
            ("ChargePeriodStart", time(r.hour)),
            ("ConsumedQuantity", tokens.clone()),
            ("ConsumedUnit", "Tokens".into()),
            ("ContractedCost", cost.clone()),
            ("EffectiveCost", cost.clone()),
            ("InvoiceIssuerName", "gw".into()),
            ("ListCost", cost),
            ("PricingCategory", "Standard".into()),
            ("PricingQuantity", tokens),
            ("PricingUnit", "Tokens".into()),
            ("ProviderName", "gw".into()),
            ("PublisherName", provider.clone()),
            ("ResourceId", model.clone()),
            ("ResourceName", model.clone()),
            ("ResourceType", "Model".into()),
            ("ServiceCategory", "AI and Machine Learning".into()),
            ("ServiceName", "gw LLM gateway".into()),
            ("SkuId", format!("{provider}/{model}")),
            ("SubAccountId", org_id.to_string()),
            ("SubAccountName", org_name.to_string()),
            ("Tags", tags.to_string()),
        ]
        .into_iter()
        .collect();
        let fields: Vec<String> = FOCUS_COLUMNS.iter().map(|c| values.get(c).cloned().unwrap_or_default()).collect();
        csv_row(&mut out, &fields);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rust_decimal::Decimal;
    use std::str::FromStr;

    fn rollup(hour: i64, model: &str, cost: &str) -> Rollup {
        Rollup {
            hour: DateTime::from_timestamp(hour * 3600, 0).unwrap(),
            model: Some(model.into()),
            provider: Some("openai".into()),
            requests: 2,
            errors: 1,
            prompt_tokens: 10,
            completion_tokens: 5,
            cost_usd: Decimal::from_str(cost).unwrap(),
            gateway_cost_usd: Decimal::from_str(cost).unwrap(),
            ..Rollup::default()
        }
    }

    #[test]
    fn rows_add_up_by_hour_model_and_provider_in_every_format() {
        let rows = by_hour_model(&[rollup(1, "m", "0.0000000001"), rollup(1, "m", "0.25"), rollup(2, "m", "1")]);
        assert_eq!(rows.len(), 2);
        assert_eq!((rows[0].requests, rows[0].cost_usd.to_string()), (4, "0.2500000001".to_string()));
        let j = String::from_utf8(jsonl(&rows)).unwrap();
        assert!(j.lines().next().unwrap().contains(r#""cost_usd":"0.2500000001""#), "{j}");
        let c = String::from_utf8(csv(&rows)).unwrap();
        assert_eq!(c.lines().nth(1).unwrap(), "1970-01-01T01:00:00Z,m,openai,4,2,20,10,0.2500000001,0.2500000001");
        let period = (DateTime::from_timestamp(0, 0).unwrap(), DateTime::from_timestamp(7200 + 3600, 0).unwrap());
        let f = String::from_utf8(focus(&rows, Uuid::from_u128(7), "Acme, Inc.", period)).unwrap();
        let mut lines = f.lines();
        assert_eq!(lines.next().unwrap().split(',').count(), FOCUS_COLUMNS.len());
        let first = lines.next().unwrap();
        assert!(first.contains(",0.2500000001,00000000-0000-0000-0000-000000000007,\"Acme, Inc.\",USD,"), "{first}");
    }

    #[test]
    fn times_are_whole_hours() {
        assert_eq!(parse_time("2026-11-01").unwrap().timestamp(), 1_793_491_200);
        assert!(parse_time("2026-11-01T10:00:00Z").is_ok());
        assert!(parse_time("2026-11-01T10:30:00Z").is_err());
        assert!(parse_time("yesterday").is_err());
    }
}
