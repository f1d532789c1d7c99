use super::*;
use serde_json::json;

fn dec(s: &str) -> Decimal {
    Decimal::from_str(s).unwrap()
}

fn day(d: u32) -> NaiveDate {
    NaiveDate::from_ymd_opt(2025, 1, d).unwrap()
}

/// Unix seconds of 2025-01-`d` 00:00 UTC, worked out by hand rather than with the code under test.
fn unix(d: u32) -> i64 {
    1_735_689_600 + i64::from(d - 1) * 86_400
}

fn key(model: &str, d: u32) -> (String, NaiveDate) {
    (model.to_string(), day(d))
}

fn query(url: &Url) -> Vec<(String, String)> {
    url.query_pairs().map(|(k, v)| (k.into_owned(), v.into_owned())).collect()
}

fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
    expected.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn openai_usage_result(model: &str, input: u64, output: u64, cached: u64, requests: u64) -> Value {
    json!({
        "object": "organization.usage.completions.result",
        "input_tokens": input,
        "output_tokens": output,
        "input_cached_tokens": cached,
        "input_audio_tokens": 0,
        "output_audio_tokens": 0,
        "num_model_requests": requests,
        "project_id": null,
        "user_id": null,
        "api_key_id": null,
        "model": model,
        "batch": null
    })
}

fn openai_bucket(d: u32, results: Vec<Value>) -> Value {
    json!({ "object": "bucket", "start_time": unix(d), "end_time": unix(d + 1), "results": results })
}

#[test]
fn openai_usage_pages_add_up_per_model_and_day() {
    let first = json!({
        "object": "page",
        "data": [
            openai_bucket(1, vec![openai_usage_result("gpt-4o-2024-08-06", 1000, 200, 300, 4)]),
            openai_bucket(2, vec![openai_usage_result("gpt-4o-2024-08-06", 10, 20, 0, 1)]),
        ],
        "has_more": true,
        "next_page": "page_AAAAABBBB"
    });
    let second = json!({
        "object": "page",
        "data": [
            // The same model and day again on a later page adds to what the first page said.
            openai_bucket(2, vec![
                openai_usage_result("gpt-4o-2024-08-06", 5, 6, 2, 1),
                openai_usage_result("gpt-4o-mini", 7, 8, 0, 2),
            ]),
            openai_bucket(3, vec![]),
        ],
        "has_more": false,
        "next_page": null
    });
    let mut ledger = Ledger::new();
    let next = parse_page(Dialect::OpenAi, ReportKind::Usage, &first, &mut ledger).unwrap();
    assert_eq!(next.as_deref(), Some("page_AAAAABBBB"));
    let next = parse_page(Dialect::OpenAi, ReportKind::Usage, &second, &mut ledger).unwrap();
    assert_eq!(next, None);

    let expected: Ledger = [
        (
            key("gpt-4o-2024-08-06", 1),
            Usage { requests: Some(4), input_tokens: 1000, output_tokens: 200, cached_tokens: 300, ..Usage::default() },
        ),
        (
            key("gpt-4o-2024-08-06", 2),
            Usage { requests: Some(2), input_tokens: 15, output_tokens: 26, cached_tokens: 2, ..Usage::default() },
        ),
        (
            key("gpt-4o-mini", 2),
            Usage { requests: Some(2), input_tokens: 7, output_tokens: 8, cached_tokens: 0, ..Usage::default() },
        ),
    ]
    .into_iter()
    .collect();
    assert_eq!(ledger, expected);
}

#[test]
fn openai_usage_without_model_grouping_is_rejected() {
    let page = json!({
        "object": "page",
        "data": [openai_bucket(1, vec![json!({
            "input_tokens": 1, "output_tokens": 1, "input_cached_tokens": 0,
            "num_model_requests": 1, "model": null
        })])],
        "has_more": false,
        "next_page": null
    });
    let err = parse_page(Dialect::OpenAi, ReportKind::Usage, &page, &mut Ledger::new()).unwrap_err();
    assert!(matches!(err, ReconcileError::Malformed(ref m) if m.contains("grouped by model")), "{err}");
}

#[test]
fn a_bad_page_leaves_the_ledger_as_it_was() {
    let mut ledger = Ledger::new();
    let good = json!({
        "data": [openai_bucket(1, vec![openai_usage_result("gpt-4o", 1, 1, 0, 1)])],
        "has_more": false
    });
    parse_page(Dialect::OpenAi, ReportKind::Usage, &good, &mut ledger).unwrap();
    let before = ledger.clone();

    // The first result is fine, the second is not: neither may land.
    let bad = json!({
        "data": [openai_bucket(1, vec![
            openai_usage_result("gpt-4o", 5, 5, 0, 1),
            json!({ "model": "gpt-4o", "input_tokens": -1 }),
        ])],
        "has_more": false
    });
    assert!(parse_page(Dialect::OpenAi, ReportKind::Usage, &bad, &mut ledger).is_err());
    // More pages promised but no cursor given: the rest of the report would be lost.
    let no_cursor = json!({
        "data": [openai_bucket(1, vec![openai_usage_result("gpt-4o", 5, 5, 0, 1)])],
        "has_more": true,
        "next_page": null
    });
    assert!(parse_page(Dialect::OpenAi, ReportKind::Usage, &no_cursor, &mut ledger).is_err());
    // A bucket off midnight would mix two days.
    let off_midnight = json!({
        "data": [{ "start_time": unix(1) + 3600, "results": [openai_usage_result("gpt-4o", 5, 5, 0, 1)] }],
        "has_more": false
    });
    assert!(parse_page(Dialect::OpenAi, ReportKind::Usage, &off_midnight, &mut ledger).is_err());
    assert!(parse_page(Dialect::OpenAi, ReportKind::Usage, &json!({ "error": "nope" }), &mut ledger).is_err());
    assert_eq!(ledger, before);
}

#[test]
fn malformed_errors_never_repeat_the_body() {
    let page = json!({
        "data": [openai_bucket(1, vec![json!({
            "model": "sk-admin-SECRET", "input_tokens": "sk-admin-SECRET", "output_tokens": 1,
            "input_cached_tokens": 0, "num_model_requests": 1
        })])],
        "has_more": false
    });
    let err = parse_page(Dialect::OpenAi, ReportKind::Usage, &page, &mut Ledger::new()).unwrap_err();
    assert!(!err.to_string().contains("SECRET"), "{err}");
    assert!(err.to_string().contains("input_tokens"), "{err}");
}

fn openai_cost_result(line_item: &str, value: Value, exact: Option<&str>) -> Value {
    let mut r = json!({
        "object": "organization.costs.result",
        "amount": { "value": value, "currency": "usd" },
        "line_item": line_item,
        "project_id": null
    });
    if let Some(e) = exact {
        r["amount_exact"] = json!(e);
    }
    r
}

#[test]
fn openai_costs_prefer_the_exact_amount_and_otherwise_read_the_float_as_printed() {
    let page = json!({
        "object": "page",
        "data": [openai_bucket(1, vec![
            // The float 0.1 is read as 0.1, not as its binary expansion.
            openai_cost_result("gpt-4o-2024-08-06, input", json!(0.1), None),
            // With an exact amount the float (here off by float error) is ignored.
            openai_cost_result("gpt-4o-2024-08-06, cached input", json!(0.30000000000000004), Some("0.3")),
            openai_cost_result("gpt-4o-2024-08-06, output", json!(1e-7), None),
            openai_cost_result("gpt-4o-2024-08-06, batch output", json!(2), None),
            // No separator: the whole line item is the model.
            openai_cost_result("gpt-image-1", json!(0.25), None),
            // Only the last separator splits.
            openai_cost_result("odd, model, input", json!(0), Some("0.0000000001")),
        ])],
        "has_more": false,
        "next_page": null
    });
    let mut ledger = Ledger::new();
    assert_eq!(parse_page(Dialect::OpenAi, ReportKind::Cost, &page, &mut ledger).unwrap(), None);
    let costs: Vec<(String, Option<u64>, Decimal)> =
        ledger.iter().map(|((m, _), u)| (m.clone(), u.requests, u.cost_usd)).collect();
    assert_eq!(
        costs,
        vec![
            ("gpt-4o-2024-08-06".to_string(), None, dec("2.4000001")),
            ("gpt-image-1".to_string(), None, dec("0.25")),
            ("odd, model".to_string(), None, dec("0.0000000001")),
        ]
    );
    assert!(ledger.keys().all(|(_, d)| *d == day(1)));
    assert!(ledger.values().all(|u| u.input_tokens == 0 && u.output_tokens == 0 && u.cached_tokens == 0));
}

#[test]
fn openai_costs_must_be_usd_and_exact_amounts_must_be_decimals() {
    let eur = json!({
        "data": [openai_bucket(1, vec![json!({
            "amount": { "value": 1.0, "currency": "eur" }, "line_item": "gpt-4o, input"
        })])],
        "has_more": false
    });
    assert!(parse_page(Dialect::OpenAi, ReportKind::Cost, &eur, &mut Ledger::new()).is_err());
    let inexact = json!({
        "data": [openai_bucket(1, vec![openai_cost_result("gpt-4o, input", json!(1.0), Some("1e-3"))])],
        "has_more": false
    });
    assert!(parse_page(Dialect::OpenAi, ReportKind::Cost, &inexact, &mut Ledger::new()).is_err());
}

#[test]
fn anthropic_usage_counts_the_whole_prompt_and_no_requests() {
    let page = json!({
        "data": [{
            "starting_at": "2025-01-02T00:00:00Z",
            "ending_at": "2025-01-03T00:00:00Z",
            "results": [{
                "uncached_input_tokens": 100,
                "cache_creation": { "ephemeral_1h_input_tokens": 10, "ephemeral_5m_input_tokens": 20 },
                "cache_read_input_tokens": 300,
                "output_tokens": 50,
                "server_tool_use": { "web_search_requests": 0 },
                "api_key_id": null,
                "workspace_id": null,
                "model": "claude-sonnet-4-20250514",
                "service_tier": null,
                "context_window": null
            }]
        }],
        "has_more": false,
        "next_page": null
    });
    let mut ledger = Ledger::new();
    assert_eq!(parse_page(Dialect::Anthropic, ReportKind::Usage, &page, &mut ledger).unwrap(), None);
    assert_eq!(
        ledger.get(&key("claude-sonnet-4-20250514", 2)),
        Some(&Usage { requests: None, input_tokens: 430, output_tokens: 50, cached_tokens: 300, ..Usage::default() })
    );
    assert_eq!(ledger.len(), 1);
}

#[test]
fn anthropic_costs_are_cents_converted_exactly() {
    let result = |amount: &str, model: Value| {
        json!({
            "currency": "USD",
            "amount": amount,
            "workspace_id": null,
            "description": "Claude Sonnet 4 Usage - Input Tokens",
            "cost_type": "tokens",
            "context_window": "0-200k",
            "model": model,
            "service_tier": "standard",
            "token_type": "uncached_input_tokens"
        })
    };
    let page = json!({
        "data": [{
            "starting_at": "2025-01-01T00:00:00Z",
            "ending_at": "2025-01-02T00:00:00Z",
            "results": [
                result("123.45", json!("claude-sonnet-4-20250514")),
                result("0.0001", json!("claude-sonnet-4-20250514"))
            ]
        }],
        "has_more": true,
        "next_page": "page_2"
    });
    let mut ledger = Ledger::new();
    assert_eq!(
        parse_page(Dialect::Anthropic, ReportKind::Cost, &page, &mut ledger).unwrap().as_deref(),
        Some("page_2")
    );
    let usage = &ledger[&key("claude-sonnet-4-20250514", 1)];
    assert_eq!(usage.cost_usd, dec("1.234501"));
    assert_eq!(usage.cost_usd.normalize().to_string(), "1.234501");
    assert_eq!(usage.requests, None);

    let no_model = json!({
        "data": [{ "starting_at": "2025-01-01T00:00:00Z", "results": [result("1", Value::Null)] }],
        "has_more": false
    });
    assert!(parse_page(Dialect::Anthropic, ReportKind::Cost, &no_model, &mut Ledger::new()).is_err());
}

fn sample_ledger() -> Ledger {
    [
        (
            key("gpt-4o", 1),
            Usage {
                requests: Some(3),
                input_tokens: 100,
                output_tokens: 40,
                cached_tokens: 10,
                cost_usd: dec("0.0125"),
            },
        ),
        (
            key("gpt-4o", 2),
            Usage { requests: Some(1), input_tokens: 50, output_tokens: 20, cached_tokens: 0, cost_usd: dec("0.5") },
        ),
    ]
    .into_iter()
    .collect()
}

#[test]
fn compare_finds_nothing_when_both_sides_agree() {
    let logged = sample_ledger();
    let mut reported = sample_ledger();
    // The same amount written with other trailing zeros is the same amount.
    if let Some(u) = reported.get_mut(&key("gpt-4o", 2)) {
        u.cost_usd = dec("0.50000");
    }
    // A pair that is all zeros on one side and missing on the other agrees too.
    reported.insert(key("gpt-4o", 3), Usage { requests: Some(0), ..Usage::default() });
    assert!(compare(&logged, &reported, true).is_empty());
}

#[test]
fn compare_reports_an_injected_token_difference() {
    let logged = sample_ledger();
    let mut reported = sample_ledger();
    if let Some(u) = reported.get_mut(&key("gpt-4o", 2)) {
        u.output_tokens += 7;
    }
    assert_eq!(
        compare(&logged, &reported, true),
        vec![Discrepancy {
            model: "gpt-4o".into(),
            day: day(2),
            field: "output_tokens",
            logged: "20".into(),
            reported: "27".into(),
            difference: "7".into(),
        }]
    );
}

#[test]
fn compare_reports_cost_differences_exactly() {
    let mut logged = sample_ledger();
    let mut reported = sample_ledger();
    if let Some(u) = logged.get_mut(&key("gpt-4o", 1)) {
        u.cost_usd = dec("0.1234567890");
    }
    if let Some(u) = reported.get_mut(&key("gpt-4o", 1)) {
        u.cost_usd = dec("0.1234567891");
    }
    if let Some(u) = reported.get_mut(&key("gpt-4o", 2)) {
        u.cost_usd = dec("0.4999");
    }
    let found = compare(&logged, &reported, true);
    let summary: Vec<(NaiveDate, &str, &str, &str, &str)> =
        found.iter().map(|d| (d.day, d.field, d.logged.as_str(), d.reported.as_str(), d.difference.as_str())).collect();
    assert_eq!(
        summary,
        vec![
            (day(1), "cost_usd", "0.123456789", "0.1234567891", "0.0000000001"),
            (day(2), "cost_usd", "0.5", "0.4999", "-0.0001"),
        ]
    );
}

#[test]
fn compare_counts_a_missing_side_as_zero_in_a_fixed_order() {
    let logged = sample_ledger();
    let mut reported = sample_ledger();
    reported.remove(&key("gpt-4o", 2));
    // Anthropic-style: no request count, so requests are not compared.
    reported.insert(
        key("claude", 2),
        Usage { requests: None, input_tokens: 9, output_tokens: 0, cached_tokens: 0, cost_usd: dec("0.01") },
    );
    let found: Vec<(String, NaiveDate, &str, String)> =
        compare(&logged, &reported, true).into_iter().map(|d| (d.model, d.day, d.field, d.difference)).collect();
    assert_eq!(
        found,
        vec![
            ("claude".to_string(), day(2), "input_tokens", "9".to_string()),
            ("claude".to_string(), day(2), "cost_usd", "0.01".to_string()),
            ("gpt-4o".to_string(), day(2), "input_tokens", "-50".to_string()),
            ("gpt-4o".to_string(), day(2), "output_tokens", "-20".to_string()),
            ("gpt-4o".to_string(), day(2), "cost_usd", "-0.5".to_string()),
        ]
    );
}

#[test]
fn compare_checks_requests_only_when_asked_and_reported() {
    let logged = sample_ledger();
    let mut reported = sample_ledger();
    if let Some(u) = reported.get_mut(&key("gpt-4o", 1)) {
        u.requests = Some(5);
    }
    let found = compare(&logged, &reported, true);
    assert_eq!(found.len(), 1);
    assert_eq!((found[0].field, found[0].logged.as_str(), found[0].difference.as_str()), ("requests", "3", "2"));
    assert!(compare(&logged, &reported, false).is_empty());
    if let Some(u) = reported.get_mut(&key("gpt-4o", 1)) {
        u.requests = None;
    }
    assert!(compare(&logged, &reported, true).is_empty());
}

#[test]
fn openai_report_urls_cover_whole_utc_days() {
    let reqs = report_requests(Dialect::OpenAi, "https://api.openai.com/v1/", day(1), day(2)).unwrap();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0].kind, ReportKind::Usage);
    assert_eq!(reqs[0].url.path(), "/v1/organization/usage/completions");
    assert_eq!(
        query(&reqs[0].url),
        pairs(&[
            ("start_time", "1735689600"),
            ("end_time", "1735862400"),
            ("bucket_width", "1d"),
            ("group_by", "model"),
            ("limit", "31"),
        ])
    );
    assert_eq!(reqs[1].kind, ReportKind::Cost);
    assert_eq!(
        reqs[1].url.as_str(),
        "https://api.openai.com/v1/organization/costs?start_time=1735689600&end_time=1735862400\
         &bucket_width=1d&group_by=line_item&limit=31"
    );
    // Without the trailing slash the paths are the same.
    let plain = report_requests(Dialect::OpenAi, "https://api.openai.com/v1", day(1), day(2)).unwrap();
    assert_eq!(plain, reqs);
}

#[test]
fn anthropic_report_urls_encode_array_params() {
    let reqs = report_requests(Dialect::Anthropic, "https://api.anthropic.com/v1", day(1), day(1)).unwrap();
    let usage = &reqs[0].url;
    assert_eq!(reqs[0].kind, ReportKind::Usage);
    assert_eq!(usage.path(), "/v1/organizations/usage_report/messages");
    assert!(usage.as_str().contains("group_by%5B%5D=model"), "{usage}");
    assert_eq!(
        query(usage),
        pairs(&[
            ("starting_at", "2025-01-01T00:00:00Z"),
            ("ending_at", "2025-01-02T00:00:00Z"),
            ("bucket_width", "1d"),
            ("group_by[]", "model"),
            ("limit", "31"),
        ])
    );
    let cost = &reqs[1].url;
    assert_eq!(reqs[1].kind, ReportKind::Cost);
    assert_eq!(cost.path(), "/v1/organizations/cost_report");
    assert!(cost.as_str().contains("group_by%5B%5D=description"), "{cost}");
    assert_eq!(
        query(cost),
        pairs(&[
            ("starting_at", "2025-01-01T00:00:00Z"),
            ("ending_at", "2025-01-02T00:00:00Z"),
            ("group_by[]", "description"),
            ("limit", "31"),
        ])
    );
}

#[test]
fn bad_ranges_and_base_urls_are_refused() {
    assert!(matches!(
        report_requests(Dialect::OpenAi, "https://api.openai.com/v1", day(2), day(1)),
        Err(ReconcileError::InvalidRequest(_))
    ));
    let err = report_requests(Dialect::OpenAi, "not a url with sk-SECRET", day(1), day(1)).unwrap_err();
    assert!(!err.to_string().contains("SECRET"));
    assert!(report_requests(Dialect::OpenAi, "mailto:ops@example.com", day(1), day(1)).is_err());
}

#[test]
fn next_page_url_sets_or_replaces_the_cursor() {
    let first = report_requests(Dialect::Anthropic, "https://api.anthropic.com/v1", day(1), day(3)).unwrap();
    let first = &first[0].url;
    let second = next_page_url(first, Dialect::Anthropic, "page_abc");
    let third = next_page_url(&second, Dialect::Anthropic, "page_d/e+f");
    let mut expected = query(first);
    expected.push(("page".into(), "page_d/e+f".into()));
    assert_eq!(query(&third), expected);
    assert_eq!(third.path(), first.path());
    assert!(third.as_str().contains("group_by%5B%5D=model"), "{third}");
    assert_eq!(third.query_pairs().filter(|(k, _)| k == "page").count(), 1);
}

#[test]
fn only_openai_and_anthropic_have_reports() {
    assert_eq!(Dialect::from_kind("openai"), Some(Dialect::OpenAi));
    assert_eq!(Dialect::from_kind("anthropic"), Some(Dialect::Anthropic));
    for kind in ["azure", "bedrock", "gemini", "mock"] {
        assert_eq!(Dialect::from_kind(kind), None);
        assert!(matches!(Dialect::for_kind(kind), Err(ReconcileError::Unsupported(k)) if k == kind));
    }
}
