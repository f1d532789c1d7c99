//! `/api/v1/analytics/policy` (decision counts) and `/api/v1/analytics/policy/export` (the
//! decisions, streamed as JSON Lines or CSV), read from the request audit log: grouping, filters,
//! the period's bounds and defaults, tenant isolation, export formats and batches, and each way a
//! request is refused. The proxy writes audit rows behind requests, with whatever its guardrails
//! decided; to know every count exactly (times, teams, old rows without `stage` or `entities`),
//! each test seeds the rows it reads straight into PostgreSQL, for an organization of its own.
//! All on the test binary's shared stack.

use chrono::{DateTime, TimeDelta, Utc};
use gw_shared::audit::AuditRecord;
use gw_tests::{db, expect_api_error, expect_field_error, header, Session, Stack};
use serde_json::{json, Value};
use uuid::Uuid;

const WEEK: &str = "from=2025-03-01&to=2025-03-08";

fn at(t: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(t).unwrap().with_timezone(&Utc)
}

/// A decision as the proxy records it.
fn decision(policy: &str, action: &str) -> Value {
    json!({"policy": policy, "guardrail": policy, "action": action, "stage": "input",
           "reason": "EMAIL×2, PHONE×1", "entities": {"EMAIL": 2, "PHONE": 1}})
}

/// An audit row of `org` with `decisions`, its `policy_action` the strongest of them.
fn row(org: Uuid, team: Option<Uuid>, created_at: DateTime<Utc>, decisions: Vec<Value>) -> AuditRecord {
    let strongest =
        ["blocked", "redacted", "flagged"].into_iter().find(|a| decisions.iter().any(|d| d["action"] == *a));
    AuditRecord {
        team_id: team,
        api_key_id: Some(Uuid::now_v7()),
        model: Some("mock-model".into()),
        provider: Some("mock".into()),
        upstream_model: Some("gpt-4o-mini".into()),
        prompt_tokens: 10,
        completion_tokens: 5,
        total_tokens: 15,
        latency_ms: 12,
        upstream_latency_ms: Some(10),
        policy_action: strongest.map(str::to_string),
        attempts: 1,
        policy: Value::Array(decisions),
        ..db::record(org, created_at)
    }
}

async fn seed(rows: &[AuditRecord]) {
    let mut conn = db::connect().await;
    // 38 columns a row, and PostgreSQL takes at most 65,535 parameters a statement.
    for chunk in rows.chunks(1000) {
        gw_shared::db::audit_logs::insert_batch(&mut conn, chunk).await.unwrap();
    }
}

async fn summary(stack: &Stack, s: &Session, query: &str) -> Value {
    let r = stack.admin_get(&format!("/analytics/policy?{query}"), &s.access_token).await;
    assert_eq!(r.status(), 200, "?{query}");
    r.json().await.unwrap()
}

async fn export(stack: &Stack, s: &Session, query: &str) -> reqwest::Response {
    stack.admin_get(&format!("/analytics/policy/export?{query}"), &s.access_token).await
}

/// The JSON Lines of an export, each parsed.
async fn export_lines(stack: &Stack, s: &Session, query: &str) -> Vec<Value> {
    let r = export(stack, s, query).await;
    assert_eq!(r.status(), 200, "?{query}");
    let text = r.text().await.unwrap();
    assert!(text.is_empty() || text.ends_with('\n'), "the last line is not ended");
    text.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect()
}

/// The records of an RFC 4180 text: quoted fields, doubled quotes, CRLF line ends.
fn csv_records(text: &str) -> Vec<Vec<String>> {
    let (mut records, mut record, mut field, mut quoted) = (Vec::new(), Vec::new(), String::new(), false);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            (true, '"') => quoted = false,
            (true, c) => field.push(c),
            (false, '"') => quoted = true,
            (false, ',') => record.push(std::mem::take(&mut field)),
            (false, '\r') => {}
            (false, '\n') => {
                record.push(std::mem::take(&mut field));
                records.push(std::mem::take(&mut record));
            }
            (false, c) => field.push(c),
        }
    }
    assert!(field.is_empty() && record.is_empty() && !quoted, "the CSV does not end with a line end");
    records
}

/// Both endpoints, with `query`.
fn both(query: &str) -> [String; 2] {
    [format!("/analytics/policy?{query}"), format!("/analytics/policy/export?{query}")]
}

/// Two teams, two policies, a request without a team, in the week of [`WEEK`]; returns the
/// teams.
async fn seed_two_teams(org: Uuid) -> (Uuid, Uuid) {
    let (t1, t2) = (Uuid::now_v7(), Uuid::now_v7());
    let mut inconsistent = row(org, Some(t1), at("2025-03-06T10:00:00Z"), vec![decision("pii_redact", "redacted")]);
    // Only rows whose request a guardrail acted on (policy_action set) count.
    inconsistent.policy_action = None;
    seed(&[
        row(
            org,
            Some(t1),
            at("2025-03-02T10:00:00Z"),
            vec![decision("pii_redact", "redacted"), decision("topic_guard", "blocked")],
        ),
        // Two decisions of one group in one request: two hits, one request.
        row(
            org,
            Some(t1),
            at("2025-03-03T10:00:00Z"),
            vec![decision("pii_redact", "redacted"), decision("pii_redact", "redacted")],
        ),
        row(org, Some(t2), at("2025-03-04T10:00:00Z"), vec![decision("pii_redact", "redacted")]),
        row(org, None, at("2025-03-05T10:00:00Z"), vec![decision("topic_guard", "flagged")]),
        row(org, Some(t2), at("2025-03-05T11:00:00Z"), vec![]),
        inconsistent,
    ])
    .await;
    (t1, t2)
}

fn hits(policy: &str, action: &str, team: Option<Uuid>, hits: i64, requests: i64) -> Value {
    json!({"policy": policy, "guardrail": policy, "action": action, "team_id": team, "hits": hits, "requests": requests})
}

// ---- GET /analytics/policy ----

#[tokio::test]
async fn counts_group_by_policy_guardrail_action_and_team() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let (t1, t2) = seed_two_teams(s.org_id).await;
    let b = summary(&stack, &s, WEEK).await;
    assert_eq!(at(b["from"].as_str().unwrap()), at("2025-03-01T00:00:00Z"));
    assert_eq!(at(b["to"].as_str().unwrap()), at("2025-03-08T00:00:00Z"));
    assert_eq!(b["total"], json!({"requests": 4, "decisions": 6}));
    assert_eq!(
        b["data"],
        json!([
            hits("pii_redact", "redacted", Some(t1), 3, 2),
            hits("pii_redact", "redacted", Some(t2), 1, 1),
            hits("topic_guard", "blocked", Some(t1), 1, 1),
            hits("topic_guard", "flagged", None, 1, 1),
        ])
    );
}

#[tokio::test]
async fn filters_narrow_the_counts() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let (t1, t2) = seed_two_teams(s.org_id).await;

    let b = summary(&stack, &s, &format!("{WEEK}&team_id={t2}")).await;
    assert_eq!(b["total"], json!({"requests": 1, "decisions": 1}));
    assert_eq!(b["data"], json!([hits("pii_redact", "redacted", Some(t2), 1, 1)]));

    let b = summary(&stack, &s, &format!("{WEEK}&team_id={t1}")).await;
    assert_eq!(b["total"], json!({"requests": 2, "decisions": 4}));
    assert_eq!(
        b["data"],
        json!([hits("pii_redact", "redacted", Some(t1), 3, 2), hits("topic_guard", "blocked", Some(t1), 1, 1)])
    );

    let b = summary(&stack, &s, &format!("{WEEK}&policy=topic_guard")).await;
    assert_eq!(b["total"], json!({"requests": 2, "decisions": 2}));
    assert_eq!(
        b["data"],
        json!([hits("topic_guard", "blocked", Some(t1), 1, 1), hits("topic_guard", "flagged", None, 1, 1)])
    );

    let b = summary(&stack, &s, &format!("{WEEK}&action=flagged&guardrail=topic_guard")).await;
    assert_eq!(b["data"], json!([hits("topic_guard", "flagged", None, 1, 1)]));

    // Filters combine: team 2 never blocked anything.
    let b = summary(&stack, &s, &format!("{WEEK}&team_id={t2}&action=blocked")).await;
    assert_eq!(b["total"], json!({"requests": 0, "decisions": 0}));
    assert_eq!(b["data"], json!([]));
}

#[tokio::test]
async fn the_period_includes_from_and_excludes_to() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let d = || vec![decision("pii_redact", "redacted")];
    let inside =
        [row(s.org_id, None, at("2025-03-01T00:00:00Z"), d()), row(s.org_id, None, at("2025-03-01T23:59:59Z"), d())];
    let outside = [
        row(s.org_id, None, at("2025-02-28T23:59:59.999999Z"), d()),
        row(s.org_id, None, at("2025-03-02T00:00:00Z"), d()),
    ];
    seed(&inside).await;
    seed(&outside).await;

    let query = "from=2025-03-01&to=2025-03-02T00:00:00Z";
    let b = summary(&stack, &s, query).await;
    assert_eq!(b["total"], json!({"requests": 2, "decisions": 2}));
    let lines = export_lines(&stack, &s, query).await;
    let ids: Vec<&str> = lines.iter().map(|l| l["request_id"].as_str().unwrap()).collect();
    assert_eq!(ids, inside.iter().map(|r| r.id.to_string()).collect::<Vec<_>>());
    // Every row, once the period covers them all.
    let b = summary(&stack, &s, "from=2025-02-28&to=2025-03-03").await;
    assert_eq!(b["total"], json!({"requests": 4, "decisions": 4}));
}

#[tokio::test]
async fn the_default_period_is_the_seven_days_before_now() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let now = Utc::now();
    let recent = row(s.org_id, None, now - TimeDelta::hours(1), vec![decision("pii_redact", "redacted")]);
    let old = row(s.org_id, None, now - TimeDelta::days(8), vec![decision("pii_redact", "blocked")]);
    seed(&[recent.clone(), old]).await;

    let b = summary(&stack, &s, "").await;
    assert_eq!(b["total"], json!({"requests": 1, "decisions": 1}));
    assert_eq!(b["data"][0]["action"], "redacted");
    let (from, to) = (at(b["from"].as_str().unwrap()), at(b["to"].as_str().unwrap()));
    assert_eq!(to - from, TimeDelta::days(7));
    assert!(to >= now && to - now < TimeDelta::minutes(5), "to is not now: {to}");
    // `to` alone moves the week back.
    let b = summary(&stack, &s, &format!("to={}", (now - TimeDelta::days(7)).format("%Y-%m-%dT%H:%M:%SZ"))).await;
    assert_eq!(b["data"][0]["action"], "blocked");
    let lines = export_lines(&stack, &s, "").await;
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["request_id"], recent.id.to_string());
}

#[tokio::test]
async fn another_organizations_rows_never_appear() {
    let stack = Stack::shared().await;
    let a = stack.register().await;
    let b = stack.register().await;
    let (a_team, _) = seed_two_teams(a.org_id).await;
    let b_team = Uuid::now_v7();
    let b_row = row(b.org_id, Some(b_team), at("2025-03-04T12:00:00Z"), vec![decision("b_only", "flagged")]);
    seed(std::slice::from_ref(&b_row)).await;

    let seen = summary(&stack, &b, WEEK).await;
    assert_eq!(seen["total"], json!({"requests": 1, "decisions": 1}));
    assert_eq!(seen["data"], json!([hits("b_only", "flagged", Some(b_team), 1, 1)]));
    // Naming A's team finds nothing either.
    let seen = summary(&stack, &b, &format!("{WEEK}&team_id={a_team}")).await;
    assert_eq!(seen["total"], json!({"requests": 0, "decisions": 0}));
    assert_eq!(seen["data"], json!([]));
    let lines = export_lines(&stack, &b, WEEK).await;
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["request_id"], b_row.id.to_string());
    assert!(export_lines(&stack, &b, &format!("{WEEK}&team_id={a_team}")).await.is_empty());
    let r = export(&stack, &b, &format!("{WEEK}&format=csv")).await;
    let text = r.text().await.unwrap();
    assert!(!text.contains("pii_redact") && !text.contains(&a_team.to_string()), "{text}");

    // And A does not see B's.
    let seen = summary(&stack, &a, WEEK).await;
    assert!(!seen.to_string().contains("b_only") && !seen.to_string().contains(&b_team.to_string()));
    assert_eq!(seen["total"], json!({"requests": 4, "decisions": 6}));
}

// ---- GET /analytics/policy/export ----

#[tokio::test]
async fn export_jsonl_lists_every_decision_oldest_first() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let team = Uuid::now_v7();
    let later = row(
        s.org_id,
        Some(team),
        at("2025-03-05T08:30:00.123456Z"),
        vec![decision("pii_redact", "redacted"), decision("topic_guard", "blocked")],
    );
    // Written before stage and entities were recorded.
    let mut earlier = row(s.org_id, None, at("2025-03-02T08:00:00Z"), vec![]);
    earlier.policy =
        json!([{"policy": "topic_guard", "guardrail": "topic_guard", "action": "flagged", "reason": "weapons"}]);
    earlier.policy_action = Some("flagged".into());
    earlier.model = None;
    seed(&[later.clone(), earlier.clone()]).await;

    let r = export(&stack, &s, WEEK).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "content-type"), "application/x-ndjson");
    assert_eq!(
        header(&r, "content-disposition"),
        "attachment; filename=\"policy-20250301T000000Z-20250308T000000Z.jsonl\""
    );
    let text = r.text().await.unwrap();
    let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(
        lines,
        [
            json!({"created_at": "2025-03-02T08:00:00Z", "request_id": earlier.id, "team_id": null,
                   "api_key_id": earlier.api_key_id, "model": null, "policy": "topic_guard",
                   "guardrail": "topic_guard", "action": "flagged", "stage": null, "reason": "weapons",
                   "entities": {}}),
            json!({"created_at": "2025-03-05T08:30:00.123456Z", "request_id": later.id, "team_id": team,
                   "api_key_id": later.api_key_id, "model": "mock-model", "policy": "pii_redact",
                   "guardrail": "pii_redact", "action": "redacted", "stage": "input",
                   "reason": "EMAIL×2, PHONE×1", "entities": {"EMAIL": 2, "PHONE": 1}}),
            json!({"created_at": "2025-03-05T08:30:00.123456Z", "request_id": later.id, "team_id": team,
                   "api_key_id": later.api_key_id, "model": "mock-model", "policy": "topic_guard",
                   "guardrail": "topic_guard", "action": "blocked", "stage": "input",
                   "reason": "EMAIL×2, PHONE×1", "entities": {"EMAIL": 2, "PHONE": 1}}),
        ]
    );
    // Filters pick decisions, not just rows.
    let blocked = export_lines(&stack, &s, &format!("{WEEK}&action=blocked&format=jsonl")).await;
    assert_eq!(blocked.len(), 1);
    assert_eq!((&blocked[0]["request_id"], &blocked[0]["policy"]), (&json!(later.id), &json!("topic_guard")));
    // Nothing matching: an empty body, still a 200.
    assert!(export_lines(&stack, &s, "from=2025-01-01&to=2025-01-02").await.is_empty());
}

#[tokio::test]
async fn export_csv_quotes_fields_and_defuses_formulas() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let mut r1 = row(s.org_id, None, at("2025-03-03T09:00:00Z"), vec![]);
    r1.model = Some("=HYPERLINK(\"http://evil.example\",\"x\")".into());
    r1.policy = json!([{"policy": "pii_redact", "guardrail": "pii_redact", "action": "redacted", "stage": "output",
                         "reason": "@SUM(A1), \"quoted\"\nnext line", "entities": {"EMAIL": 2, "PHONE": 1}}]);
    r1.policy_action = Some("redacted".into());
    let r2 = row(s.org_id, Some(Uuid::now_v7()), at("2025-03-04T09:00:00Z"), vec![decision("-topic", "flagged")]);
    seed(&[r1.clone(), r2.clone()]).await;

    let r = export(&stack, &s, &format!("{WEEK}&format=csv")).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "content-type"), "text/csv; charset=utf-8");
    assert_eq!(
        header(&r, "content-disposition"),
        "attachment; filename=\"policy-20250301T000000Z-20250308T000000Z.csv\""
    );
    let text = r.text().await.unwrap();
    assert!(
        text.starts_with(
            "created_at,request_id,team_id,api_key_id,model,policy,guardrail,action,stage,reason,entities\r\n"
        ),
        "{text}"
    );
    // Quotes doubled inside a quoted field, and the formula made text.
    assert!(text.contains(",\"'=HYPERLINK(\"\"http://evil.example\"\",\"\"x\"\")\","), "{text}");
    let records = csv_records(&text);
    assert_eq!(records.len(), 3, "{text}");
    assert!(records.iter().all(|r| r.len() == 11), "{records:?}");
    assert_eq!(
        records[1],
        [
            "2025-03-03T09:00:00Z".to_string(),
            r1.id.to_string(),
            String::new(),
            r1.api_key_id.unwrap().to_string(),
            "'=HYPERLINK(\"http://evil.example\",\"x\")".into(),
            "pii_redact".into(),
            "pii_redact".into(),
            "redacted".into(),
            "output".into(),
            "'@SUM(A1), \"quoted\"\nnext line".into(),
            "EMAIL:2;PHONE:1".into(),
        ]
    );
    assert_eq!(records[2][1], r2.id.to_string());
    assert_eq!(records[2][2], r2.team_id.unwrap().to_string());
    assert_eq!((records[2][5].as_str(), records[2][6].as_str()), ("'-topic", "'-topic"));
    assert_eq!(records[2][9], "EMAIL×2, PHONE×1");

    // No decision: the header alone.
    let r = export(&stack, &s, "from=2025-01-01&to=2025-01-02&format=csv").await;
    assert_eq!(r.text().await.unwrap().lines().count(), 1);
}

#[tokio::test]
async fn export_reads_past_one_batch_in_order() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let base = at("2025-03-02T00:00:00Z");
    // 2,500 rows, seven to a timestamp, so batches of 1,000 end inside a tie that only the id
    // breaks; every other one is of the policy filtered on below.
    let rows: Vec<AuditRecord> = (0..2500)
        .map(|i| {
            let policy = if i % 2 == 0 { "pii_redact" } else { "topic_guard" };
            row(s.org_id, None, base + TimeDelta::seconds(i / 7), vec![decision(policy, "flagged")])
        })
        .collect();
    seed(&rows).await;
    let mut expected: Vec<&AuditRecord> = rows.iter().collect();
    expected.sort_by_key(|r| (r.created_at, r.id));

    let lines = export_lines(&stack, &s, WEEK).await;
    let ids: Vec<String> = lines.iter().map(|l| l["request_id"].as_str().unwrap().to_string()).collect();
    assert_eq!(ids, expected.iter().map(|r| r.id.to_string()).collect::<Vec<_>>());

    let lines = export_lines(&stack, &s, &format!("{WEEK}&policy=topic_guard")).await;
    assert_eq!(lines.len(), 1250);
    assert!(lines.iter().all(|l| l["policy"] == "topic_guard"));
    let ids: Vec<&str> = lines.iter().map(|l| l["request_id"].as_str().unwrap()).collect();
    let want: Vec<String> =
        expected.iter().filter(|r| r.policy[0]["policy"] == "topic_guard").map(|r| r.id.to_string()).collect();
    assert_eq!(ids, want);

    let b = summary(&stack, &s, WEEK).await;
    assert_eq!(b["total"], json!({"requests": 2500, "decisions": 2500}));
}

// ---- refusals ----

#[tokio::test]
async fn an_unparseable_from_is_400() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    for path in both("from=yesterday") {
        expect_field_error(stack.admin_get(&path, &s.access_token).await, "from", &path).await;
    }
}

#[tokio::test]
async fn an_unparseable_to_is_400() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    for path in both("from=2025-02-01&to=2025-02-30") {
        expect_field_error(stack.admin_get(&path, &s.access_token).await, "to", &path).await;
    }
}

#[tokio::test]
async fn from_not_before_to_is_400() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    for query in ["from=2025-03-01&to=2025-03-01", "from=2025-03-02&to=2025-03-01T23:59:59Z"] {
        for path in both(query) {
            expect_field_error(stack.admin_get(&path, &s.access_token).await, "to", &path).await;
        }
    }
}

#[tokio::test]
async fn a_period_over_366_days_is_400() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    // 2024 is a leap year: 367 days.
    for path in both("from=2024-01-01&to=2025-01-02") {
        expect_field_error(stack.admin_get(&path, &s.access_token).await, "from", &path).await;
    }
    for path in both("from=2024-01-01&to=2025-01-01") {
        assert_eq!(stack.admin_get(&path, &s.access_token).await.status(), 200, "366 days: {path}");
    }
}

#[tokio::test]
async fn a_malformed_team_id_is_400() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    for path in both("team_id=not-a-uuid") {
        let b = expect_api_error(stack.admin_get(&path, &s.access_token).await, 400).await;
        assert_eq!(b["error"]["code"], "validation_error", "{path}: {b}");
    }
}

#[tokio::test]
async fn an_unknown_export_format_is_400() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    for format in ["xml", "", "CSV"] {
        let r = export(&stack, &s, &format!("format={format}")).await;
        expect_field_error(r, "format", format).await;
    }
}

#[tokio::test]
async fn members_and_viewers_are_403() {
    let stack = Stack::shared().await;
    let owner = stack.register().await;
    seed_two_teams(owner.org_id).await;
    for role in ["member", "viewer"] {
        let s = stack.join(&owner, role, &[]).await;
        for path in both(WEEK) {
            let b = expect_api_error(stack.admin_get(&path, &s.access_token).await, 403).await;
            assert_eq!(b["error"]["code"], "forbidden", "{role} on {path}");
        }
    }
}
