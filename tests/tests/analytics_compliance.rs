//! `GET /analytics/compliance/export`: a range's rows with the proof that the hash chain over them
//! is untouched, deletions caught, narrowing to a team, bad ranges refused.

use std::time::Duration;

use chrono::{TimeDelta, Utc};
use gw_tests::*;
use serde_json::{json, Value};

async fn export(stack: &Stack, s: &Session, query: &str) -> (Vec<Value>, Value) {
    let r = stack.admin_get(&format!("/analytics/compliance/export?{query}"), &s.access_token).await;
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    let mut lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let summary = lines.pop().expect("a verification line");
    assert_eq!(summary["record_type"], "verification");
    assert!(lines.iter().all(|l| l["record_type"] == "log"));
    (lines, summary)
}

fn ids(lines: &[Value]) -> Vec<String> {
    lines.iter().map(|l| l["id"].as_str().unwrap().to_string()).collect()
}

#[tokio::test]
async fn the_compliance_export_holds_the_range_and_proves_it_untouched() {
    let stack = Stack::shared().await;
    let (s, key, _) = stack.org_with_key().await;
    let before = stack.chat_request_id(&key, "before the range").await;
    tokio::time::sleep(Duration::from_millis(30)).await;
    let from = Utc::now();
    let mut inside = Vec::new();
    for i in 0..12 {
        inside.push(stack.chat_request_id(&key, &format!("inside {i}")).await);
    }
    tokio::time::sleep(Duration::from_millis(30)).await;
    let to = Utc::now();
    tokio::time::sleep(Duration::from_millis(30)).await;
    let after = stack.chat_request_id(&key, "after the range").await;
    for id in inside.iter().chain([&before, &after]) {
        stack.log_entry(&s, *id).await;
    }
    let range = format!("from={}&to={}", query_time(from), query_time(to));

    let (lines, summary) = export(&stack, &s, &range).await;
    let mut got = ids(&lines);
    got.sort();
    let mut want: Vec<String> = inside.iter().map(|u| u.to_string()).collect();
    want.sort();
    assert_eq!(got, want, "exactly the rows in range");
    assert_eq!(summary["verified"], true, "{summary}");
    assert_eq!(summary["rows"], 12);
    assert_eq!(summary["breaks"], json!([]));
    assert!(lines.iter().all(|l| l["row_hash"].as_str().is_some_and(|h| h.len() == 64)));
    // Chain order: each row follows the one before it.
    for w in lines.windows(2) {
        assert_eq!(w[1]["prev_hash"], w[0]["row_hash"]);
    }

    // CSV: the same rows, and the summary in the last row.
    let r = stack.admin_get(&format!("/analytics/compliance/export?{range}&format=csv"), &s.access_token).await;
    assert_eq!(r.status(), 200);
    assert!(header(&r, "content-type").starts_with("text/csv"));
    let csv = r.text().await.unwrap();
    let rows: Vec<&str> = csv.lines().collect();
    assert!(rows[0].starts_with("record_type,id,created_at"));
    assert_eq!(rows.len(), 1 + 12 + 1);
    assert!(rows[13].starts_with("verification,") && rows[13].contains("\"\"verified\"\":true"), "{}", rows[13]);

    // Edit one row and delete another straight in the database: the export names both.
    let edited = inside[3];
    let deleted = inside[7];
    let mut conn = db::connect().await;
    use diesel_async::RunQueryDsl;
    diesel::sql_query(format!("UPDATE audit_logs SET cost_usd = cost_usd + 1 WHERE id = '{edited}'"))
        .execute(&mut conn)
        .await
        .unwrap();
    diesel::sql_query(format!("DELETE FROM audit_logs WHERE id = '{deleted}'")).execute(&mut conn).await.unwrap();
    let (lines, summary) = export(&stack, &s, &range).await;
    assert_eq!(lines.len(), 11);
    assert_eq!(summary["verified"], false);
    let breaks = summary["breaks"].as_array().unwrap();
    let edited_seq = lines.iter().find(|l| l["id"] == edited.to_string()).unwrap()["chain_seq"].as_i64().unwrap();
    assert!(
        breaks.iter().any(|b| b["problem"] == "altered" && b["log_id"] == edited.to_string() && b["seq"] == edited_seq),
        "{summary}"
    );
    let after_deleted = inside[8];
    assert!(
        breaks.iter().any(|b| b["problem"] == "missing" && b["before_log_id"] == after_deleted.to_string()),
        "{summary}"
    );
}

#[tokio::test]
async fn deleting_the_last_rows_of_a_range_is_caught() {
    let stack = Stack::shared().await;
    let (s, key, _) = stack.org_with_key().await;
    let from = Utc::now();
    let mut ids_ = Vec::new();
    for i in 0..4 {
        ids_.push(stack.chat_request_id(&key, &format!("tail {i}")).await);
    }
    for id in &ids_ {
        stack.log_entry(&s, *id).await;
    }
    let range = format!("from={}&to={}", query_time(from), query_time(Utc::now() + TimeDelta::seconds(1)));
    let (_, summary) = export(&stack, &s, &range).await;
    assert_eq!(summary["verified"], true, "{summary}");
    let mut conn = db::connect().await;
    use diesel_async::RunQueryDsl;
    diesel::sql_query(format!("DELETE FROM audit_logs WHERE id = '{}'", ids_[3])).execute(&mut conn).await.unwrap();
    let (lines, summary) = export(&stack, &s, &range).await;
    assert_eq!(lines.len(), 3);
    assert_eq!(summary["verified"], false);
    assert_eq!(summary["breaks"][0]["problem"], "missing_after", "{summary}");
    assert_eq!(summary["breaks"][0]["after_seq"], 3);
}

#[tokio::test]
async fn the_compliance_export_narrows_to_a_team_and_refuses_bad_ranges() {
    let stack = Stack::shared().await;
    let (s, key, _) = stack.org_with_key().await;
    let team = stack.create_team(&s, "legal").await;
    let r = stack.create_key(&s, json!({"name": "legal key", "team_id": team})).await;
    let team_key = r.json::<Value>().await.unwrap()["key"].as_str().unwrap().to_string();
    let from = Utc::now();
    let a = stack.chat_request_id(&key, "no team").await;
    let b = stack.chat_request_id(&team_key, "the team").await;
    stack.log_entry(&s, a).await;
    stack.log_entry(&s, b).await;
    let range = format!("from={}&to={}", query_time(from), query_time(Utc::now() + TimeDelta::seconds(1)));
    let (lines, summary) = export(&stack, &s, &format!("{range}&team_id={team}")).await;
    assert_eq!(ids(&lines), vec![b.to_string()]);
    assert_eq!(summary["verified"], true);
    assert_eq!(summary["links_checked"], 2, "the walk covers the rows the filter leaves out");
    let (lines, _) = export(&stack, &s, &format!("{range}&policy=pii_redact")).await;
    assert!(lines.is_empty());
    // Another organization's export of the same range holds none of these rows.
    let (other, _, _) = stack.org_with_key().await;
    let (lines, summary) = export(&stack, &other, &range).await;
    assert!(lines.is_empty());
    assert_eq!(summary["verified"], true);

    for (query, field) in [
        ("from=2026-01-02&to=2026-01-01", "to"),
        ("from=2024-01-01&to=2026-01-01", "from"),
        ("to=1990-01-01T00:00:00Z&from=1990-01-01T00:00:00Z", "to"),
        ("from=2026-01-01&to=2026-01-02&format=xml", "format"),
    ] {
        let r = stack.admin_get(&format!("/analytics/compliance/export?{query}"), &s.access_token).await;
        let body = expect_api_error(r, 400).await;
        if !field.is_empty() {
            assert_eq!(body["error"]["fields"][0]["field"], field, "{query}: {body}");
        }
    }
}
