use std::str::FromStr;

use chrono::{TimeZone, Utc};
use serde_json::json;
use uuid::Uuid;

use super::*;
use crate::audit::user_agent_id;

fn row(n: u32) -> AuditRecord {
    AuditRecord {
        id: Uuid::now_v7(),
        org_id: Uuid::nil(),
        team_id: None,
        api_key_id: Some(Uuid::new_v4()),
        endpoint: "/v1/chat/completions".into(),
        model: Some("gpt-4o-mini".into()),
        provider: Some("openai".into()),
        upstream_model: Some("gpt-4o-mini".into()),
        status_code: 200,
        error_type: None,
        stream: false,
        prompt_tokens: 10 + n as i32,
        completion_tokens: 5,
        total_tokens: 15 + n as i32,
        cost_usd: Decimal::from_str("0.000105").unwrap(),
        latency_ms: 12,
        upstream_latency_ms: Some(10),
        ttft_ms: None,
        cache_status: "miss".into(),
        policy_action: None,
        attempts: 1,
        created_at: Utc.timestamp_opt(1_790_000_000, 123_456_789).unwrap(),
        cached_tokens: 0,
        reasoning_tokens: 0,
        cache_creation_tokens: 0,
        routing: json!([{"provider": "openai", "outcome": "answered", "latency_ms": 10}]),
        policy: json!([]),
        cache_saved_usd: Decimal::ZERO,
        cache_similarity: Some(0.91),
        deployment: Some("us-east-1".into()),
        overhead_us: Some(140),
        client_ip: Some("10.1.2.3/32".parse().unwrap()),
        user_agent_id: Some(user_agent_id("OpenAI/Python 1.0")),
        request_body: None,
        response_body: None,
        settled_by: None,
        template_id: None,
        template_version: None,
        experiment_id: None,
        experiment_variant: None,
        origin: None,
        chain_seq: None,
        prev_hash: None,
        row_hash: None,
    }
}

fn chained(n: u32) -> Vec<AuditRecord> {
    let mut rows: Vec<AuditRecord> = (0..n).map(row).collect();
    let mut refs: Vec<&mut AuditRecord> = rows.iter_mut().collect();
    append((0, GENESIS.to_vec()), &mut refs);
    rows
}

fn verify(rows: &[AuditRecord]) -> Verifier {
    let mut v = Verifier::after(None);
    for r in rows {
        v.check(r);
    }
    v
}

#[test]
fn an_untouched_chain_verifies() {
    let rows = chained(5);
    let v = verify(&rows);
    assert!(v.verified(), "{:?}", v.breaks);
    assert_eq!(v.checked, 5);
    assert_eq!(v.last().map(|l| l.0), Some(5));
}

#[test]
fn appending_continues_from_the_head() {
    let mut rows = chained(3);
    let head = (3, rows[2].row_hash.clone().unwrap());
    let mut more: Vec<AuditRecord> = (10..12).map(row).collect();
    let mut refs: Vec<&mut AuditRecord> = more.iter_mut().collect();
    let new_head = append(head, &mut refs);
    assert_eq!(new_head.0, 5);
    rows.extend(more);
    assert!(verify(&rows).verified());
}

#[test]
fn an_edited_row_is_named() {
    let mut rows = chained(4);
    rows[2].cost_usd = Decimal::from_str("0.5").unwrap();
    let v = verify(&rows);
    assert_eq!(v.breaks, vec![Break::Altered { seq: 3, log_id: rows[2].id }]);
}

#[test]
fn a_deleted_row_is_named() {
    let mut rows = chained(4);
    rows.remove(1);
    let v = verify(&rows);
    assert_eq!(v.breaks, vec![Break::Missing { after_seq: 1, before_seq: 3, before_log_id: rows[1].id }]);
}

#[test]
fn a_replaced_row_with_a_fresh_hash_breaks_the_link() {
    let mut rows = chained(3);
    let mut forged = row(99);
    forged.chain_seq = Some(2);
    forged.prev_hash = Some(vec![7; 32]);
    forged.row_hash = Some(link(&[7; 32], 2, &forged).to_vec());
    rows[1] = forged;
    let v = verify(&rows);
    assert_eq!(v.breaks.first(), Some(&Break::Relinked { seq: 2, log_id: rows[1].id }));
}

#[test]
fn the_hash_survives_the_round_trip_through_postgres() {
    let a = row(1);
    let mut b = a.clone();
    // Postgres keeps microseconds, pads NUMERIC(20, 10) and reorders JSONB members.
    b.created_at = Utc.timestamp_opt(1_790_000_000, 123_456_000).unwrap();
    b.cost_usd = Decimal::from_str("0.0001050000").unwrap();
    b.routing = serde_json::from_str(r#"[{"latency_ms": 10, "outcome": "answered", "provider": "openai"}]"#).unwrap();
    assert_eq!(content(&a), content(&b));
    assert_eq!(link(&GENESIS, 1, &a), link(&GENESIS, 1, &b));
}

#[test]
fn every_column_is_covered() {
    let a = row(1);
    let mut b = a.clone();
    b.client_ip = Some("10.1.2.4/32".parse().unwrap());
    assert_ne!(content(&a), content(&b));
    let mut c = a.clone();
    c.response_body = Some("{}".into());
    assert_ne!(content(&a), content(&c));
}

#[test]
fn templates_experiments_and_the_playground_are_covered_and_unambiguous() {
    let a = row(1);
    let mut with = a.clone();
    with.template_id = Some(Uuid::from_u128(7));
    with.template_version = Some(3);
    assert_ne!(content(&a), content(&with));
    let mut other = with.clone();
    other.template_version = Some(4);
    assert_ne!(content(&with), content(&other));
    let mut exp = a.clone();
    exp.experiment_id = Some(Uuid::from_u128(9));
    exp.experiment_variant = Some("b".into());
    assert_ne!(content(&a), content(&exp));
    let mut playground = a.clone();
    playground.origin = Some("playground".into());
    assert_ne!(content(&a), content(&playground));
    // settled_by written alone, and written before later columns, never read alike.
    let mut settled = a.clone();
    settled.settled_by = Some("usage".into());
    let mut settled_with = settled.clone();
    settled_with.origin = Some("playground".into());
    assert_ne!(content(&settled), content(&settled_with));
    assert_ne!(content(&playground), content(&settled_with));
}

#[test]
fn costs_round_like_numeric() {
    assert_eq!(numeric(Decimal::from_str("0.00000000005").unwrap()), "0.0000000001");
    assert_eq!(numeric(Decimal::from_str("0.00000000015").unwrap()), "0.0000000002");
    assert_eq!(numeric(Decimal::from_str("1.50").unwrap()), "1.5");
}

/// The hashed form as it was first defined: a `serde_json::Value` array in canonical form. Rows
/// already chained were hashed this way, so [`content`] must produce the same bytes.
fn content_as_first_defined(r: &AuditRecord) -> Vec<u8> {
    let mut fields = json!([
        r.id,
        r.org_id,
        r.team_id,
        r.api_key_id,
        r.endpoint,
        r.model,
        r.provider,
        r.upstream_model,
        r.status_code,
        r.error_type,
        r.stream,
        r.prompt_tokens,
        r.completion_tokens,
        r.total_tokens,
        numeric(r.cost_usd),
        r.latency_ms,
        r.upstream_latency_ms,
        r.ttft_ms,
        r.cache_status,
        r.policy_action,
        r.attempts,
        r.created_at.timestamp_micros(),
        r.cached_tokens,
        r.reasoning_tokens,
        r.routing,
        r.policy,
        r.cache_creation_tokens,
        numeric(r.cache_saved_usd),
        r.cache_similarity.map(f32::to_bits),
        r.deployment,
        r.overhead_us,
        r.client_ip.map(|ip| ip.to_string()),
        r.user_agent_id,
        r.request_body,
        r.response_body,
    ]);
    if let (Some(s), Some(all)) = (&r.settled_by, fields.as_array_mut()) {
        all.push(json!(s));
    }
    let mut out = Vec::new();
    crate::cache::key::canonical(&fields, &mut out);
    out
}

#[test]
fn content_is_written_as_it_was_first_defined() {
    let full = row(1);
    let mut sparse = row(2);
    sparse.api_key_id = None;
    sparse.model = None;
    sparse.upstream_latency_ms = None;
    sparse.cache_similarity = None;
    sparse.client_ip = Some("2001:db8::1/128".parse().unwrap());
    sparse.user_agent_id = None;
    sparse.status_code = -1;
    sparse.created_at = Utc.timestamp_opt(-5, 0).unwrap();
    let mut odd = row(3);
    odd.request_body = Some("quote \" backslash \\ newline \n tab \t nul \u{0} é 日本 😀".into());
    odd.response_body = Some(String::new());
    odd.settled_by = Some("estimate".into());
    odd.stream = true;
    odd.error_type = Some("rate_limit_exceeded".into());
    odd.policy = json!([{"b": 1.5, "a": [true, null, {"z": "y", "\u{1}": -3}]}]);
    odd.cost_usd = Decimal::from_str("-0.00000000015").unwrap();
    for r in [full, sparse, odd] {
        assert_eq!(String::from_utf8(content(&r)).unwrap(), String::from_utf8(content_as_first_defined(&r)).unwrap());
    }
}

proptest::proptest! {
    #[test]
    fn any_text_and_numbers_hash_as_first_defined(
        body in proptest::option::of(".{0,40}"),
        model in proptest::option::of("\\PC{0,12}"),
        tokens in proptest::num::i32::ANY,
        ttft in proptest::option::of(proptest::num::i32::ANY),
        agent in proptest::option::of(proptest::num::i64::ANY),
        similarity in proptest::option::of(proptest::num::f32::ANY),
    ) {
        let mut r = row(0);
        r.request_body = body;
        r.model = model;
        r.prompt_tokens = tokens;
        r.ttft_ms = ttft;
        r.user_agent_id = agent;
        r.cache_similarity = similarity;
        proptest::prop_assert_eq!(content(&r), content_as_first_defined(&r));
    }
}
