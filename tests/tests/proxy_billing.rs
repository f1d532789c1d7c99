//! Every token an upstream bills is billed: a stream the client leaves is read on until the
//! upstream's usage arrives (else billed at an estimate, and marked so), a stream an output
//! guardrail stops is billed at the upstream's usage, a broken stream is billed at an estimate,
//! and a request without `max_tokens` cannot carry a budget past its end.

use std::time::{Duration, Instant};

use gw_shared::audit::AuditRecord;
use gw_tests::*;
use rust_decimal::Decimal;
use serde_json::{json, Value};
use uuid::Uuid;

/// A prompt of `words` words.
fn long_prompt(words: usize) -> String {
    (0..words).map(|i| format!("word{i}")).collect::<Vec<_>>().join(" ")
}

/// What the mock counts for a one-message prompt: its words plus 3.
fn mock_prompt_tokens(text: &str) -> i32 {
    text.split_whitespace().count() as i32 + 3
}

fn streamed(model: &str, text: &str, knobs: Value) -> Value {
    json!({"model": model, "messages": user_message(text), "stream": true, "mock": knobs})
}

/// A key with a roomy daily budget, so its spend can be read back: (session, key, key id).
async fn budgeted_key(stack: &Stack) -> (Session, String, String) {
    let s = stack.register().await;
    let r = stack.create_key(&s, json!({"name": "billed", "budget": {"amount_usd": 100, "period": "day"}})).await;
    assert_eq!(r.status(), 201);
    let b: Value = r.json().await.unwrap();
    (s, b["key"].as_str().unwrap().to_string(), b["id"].as_str().unwrap().to_string())
}

/// A request's audit row, written once the upstream has been read to its end.
async fn row_of(org_id: Uuid, id: Uuid) -> AuditRecord {
    db::audit_row_within(org_id, id, Duration::from_secs(20)).await
}

/// Waits until the key's budget shows `spent` (settlements land behind the request).
async fn budget_spend_reaches(stack: &Stack, s: &Session, key_id: &str, spent: Decimal) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let v: Value =
            stack.admin_get(&format!("/api-keys/{key_id}/limits"), &s.access_token).await.json().await.unwrap();
        let now = usd(&v["budget"]["spend_usd"]);
        let want = spent;
        if (now - want).abs() < dec("0.000000002") {
            return;
        }
        assert!(Instant::now() < deadline, "budget spend {now}, the audit row says {want}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Reads `events` SSE events of a response, then hangs up.
async fn read_then_leave(mut resp: reqwest::Response, events: usize) {
    let mut seen = String::new();
    while seen.matches("data: ").count() < events {
        match resp.chunk().await.expect("read the stream") {
            Some(c) => seen.push_str(&String::from_utf8_lossy(&c)),
            None => panic!("the stream ended before {events} events: {seen}"),
        }
    }
    drop(resp);
}

#[tokio::test]
async fn a_stream_the_client_leaves_is_billed_at_the_upstreams_usage() {
    let stack = Stack::shared().await;
    let (s, key, key_id) = budgeted_key(&stack).await;
    let text = long_prompt(2000);
    let tag = unique_tag();
    let b = streamed("gpt-4o-mini", &text, json!({"tag": tag, "chunk_delay_ms": 100}));
    let resp = post_chat(&stack, &key, None, &b).await;
    assert_eq!(resp.status(), 200);
    let id = request_id(&resp);
    read_then_leave(resp, 3).await;

    let row = row_of(s.org_id, id).await;
    assert_eq!(row.status_code, 499);
    assert_eq!(row.settled_by.as_deref(), Some("usage"), "the upstream was read on to its usage");
    assert_eq!(row.prompt_tokens, mock_prompt_tokens(&text));
    assert!(row.completion_tokens > 3, "every completion token the upstream made: {}", row.completion_tokens);
    let expected = (Decimal::from(row.prompt_tokens) * Decimal::new(15, 2)
        + Decimal::from(row.completion_tokens) * Decimal::new(60, 2))
        / Decimal::from(1_000_000);
    assert_eq!(row.cost_usd.normalize(), expected.normalize());
    budget_spend_reaches(&stack, &s, &key_id, row.cost_usd).await;
}

#[tokio::test]
async fn a_left_stream_without_usage_is_billed_at_an_estimate() {
    let stack = Stack::shared().await;
    let (s, key, key_id) = budgeted_key(&stack).await;
    let text = long_prompt(400);
    let b = streamed("gpt-4o-mini", &text, json!({"tag": unique_tag(), "chunk_delay_ms": 50, "no_usage": true}));
    let resp = post_chat(&stack, &key, None, &b).await;
    assert_eq!(resp.status(), 200);
    let id = request_id(&resp);
    read_then_leave(resp, 3).await;

    let row = row_of(s.org_id, id).await;
    assert_eq!(row.settled_by.as_deref(), Some("estimate"));
    // Four bytes a token: 400 words of 5 to 7 bytes, plus the message's framing.
    assert!(row.prompt_tokens > 400, "estimated prompt {}", row.prompt_tokens);
    assert!(row.completion_tokens > 0);
    assert!(row.cost_usd > Decimal::ZERO);
    budget_spend_reaches(&stack, &s, &key_id, row.cost_usd).await;
}

#[tokio::test]
async fn a_stream_that_breaks_after_content_is_billed_at_an_estimate() {
    let stack = Stack::shared().await;
    let (s, key, _) = budgeted_key(&stack).await;
    for knob in ["truncate_stream", "error_mid_stream", "drop_connection"] {
        let b = streamed("gpt-4o-mini", "Break this stream please", json!({"tag": unique_tag(), knob: true}));
        let resp = post_chat(&stack, &key, None, &b).await;
        let id = request_id(&resp);
        let _ = resp.text().await;
        let row = row_of(s.org_id, id).await;
        assert_eq!(row.settled_by.as_deref(), Some("estimate"), "{knob}");
        assert!(row.prompt_tokens > 0 && row.completion_tokens > 0, "{knob}: {row:?}");
        assert!(row.cost_usd > Decimal::ZERO, "{knob}");
    }
}

/// An organization whose policy `stop` blocks answers containing `FORBIDDEN` (its rule's name,
/// which the refusal names, is another word).
async fn blocking_org(stack: &Stack) -> (Session, String) {
    let (s, key, _) = stack.org_with_key().await;
    let doc = json!({"policies": [{"name": "stop", "guardrails": [
        {"type": "regex", "output": true, "rules": [{"name": "stopword", "pattern": "FORBIDDEN", "action": "block"}]}
    ]}]});
    let r = stack.admin_put("/organizations/current/policy", &s.access_token, &doc).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap_or_default());
    (s, key)
}

/// Sends `reply` as the mock's answer through policy `stop`, plain and streamed; returns the
/// audit rows (plain, streamed) and the streamed response's status.
async fn blocked_plain_and_streamed(
    stack: &Stack,
    s: &Session,
    key: &str,
    reply: &str,
) -> (AuditRecord, AuditRecord, u16) {
    let text = "Tell me the forbidden word";
    // A word an event, apart in time (so what was released goes out between them): the first
    // content event of "FORBIDDEN ..." holds the whole value.
    let knobs = json!({"tag": unique_tag(), "reply": reply, "chunk_delay_ms": 20});
    let plain = json!({"model": "gpt-4o-mini", "messages": user_message(text), "mock": knobs});
    let r = post_chat(stack, key, Some("stop"), &plain).await;
    let plain_id = request_id(&r);
    let e = expect_openai_error(r, 400).await;
    assert_eq!(e["error"]["code"], "content_policy_violation");
    let r = post_chat(stack, key, Some("stop"), &streamed("gpt-4o-mini", text, knobs)).await;
    let status = r.status().as_u16();
    let stream_id = request_id(&r);
    let body = r.text().await.unwrap();
    assert!(!body.contains("FORBIDDEN"), "{body}");
    (row_of(s.org_id, plain_id).await, row_of(s.org_id, stream_id).await, status)
}

#[tokio::test]
async fn a_stream_blocked_before_its_first_chunk_is_billed_at_the_upstreams_usage() {
    let stack = Stack::shared().await;
    let (s, key) = blocking_org(&stack).await;
    let (plain, streamed, status) = blocked_plain_and_streamed(&stack, &s, &key, "FORBIDDEN at once").await;
    assert_eq!(status, 400, "nothing had gone out: a plain refusal");
    for row in [&plain, &streamed] {
        assert_eq!(row.policy_action.as_deref(), Some("blocked"));
        assert_eq!(row.settled_by.as_deref(), Some("usage"));
        assert_eq!(row.prompt_tokens, mock_prompt_tokens("Tell me the forbidden word"));
        assert_eq!(row.completion_tokens, 3);
        assert!(row.cost_usd > Decimal::ZERO);
    }
    assert_eq!(streamed.cost_usd, plain.cost_usd, "the stream costs what the plain answer cost");
}

#[tokio::test]
async fn a_stream_blocked_after_its_first_chunk_is_billed_at_the_upstreams_usage() {
    let stack = Stack::shared().await;
    let (s, key) = blocking_org(&stack).await;
    let lead = "This answer starts innocently enough and goes on for quite a while, long enough for its \
                first words to reach the client before the guardrail sees what comes at the end:";
    let reply = format!("{lead} FORBIDDEN");
    let (plain, streamed, status) = blocked_plain_and_streamed(&stack, &s, &key, &reply).await;
    assert_eq!(status, 200, "the stream had started");
    assert!(streamed.ttft_ms.is_some());
    for row in [&plain, &streamed] {
        assert_eq!(row.policy_action.as_deref(), Some("blocked"));
        assert_eq!(row.settled_by.as_deref(), Some("usage"));
        assert_eq!(row.completion_tokens, reply.split_whitespace().count() as i32);
    }
    assert_eq!(streamed.cost_usd, plain.cost_usd);
    assert!(streamed.cost_usd > Decimal::ZERO);
}

/// The sum of an organization's audit rows' cost, once `n` rows are written.
async fn spent_by(org_id: Uuid, n: usize) -> Decimal {
    use diesel::prelude::*;
    use diesel_async::RunQueryDsl;
    use gw_shared::db::schema::audit_logs;
    let mut conn = db::connect().await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let costs: Vec<Decimal> = audit_logs::table
            .filter(audit_logs::org_id.eq(org_id))
            .filter(audit_logs::status_code.eq(200))
            .select(audit_logs::cost_usd)
            .load(&mut conn)
            .await
            .expect("audit rows");
        if costs.len() >= n {
            return costs.into_iter().sum();
        }
        assert!(Instant::now() < deadline, "only {} of {n} audit rows appeared", costs.len());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn without_max_tokens_a_budget_overspends_by_at_most_one_requests_reservation() {
    let stack = Stack::shared().await;
    let budget = Decimal::new(2, 3); // $0.002
                                     // gpt-4o-mini: the catalog knows its maximum output (16,384 tokens), which the budget
                                     // reserves; the request goes out unchanged and the mock answers 16,000 words. azure-test:
                                     // the catalog does not know `my-gpt4o`, so the budget reserves 4,096 tokens and the upstream
                                     // is sent that limit; the mock would answer 20,000 words and stops at the limit.
    let cases = [
        ("gpt-4o-mini", Decimal::new(15, 2), Decimal::new(60, 2), 16_384u64, 16_000usize),
        ("azure-test", Decimal::new(25, 1), Decimal::from(10), 4_096, 20_000),
    ];
    for (model, input, output, max_out, words) in cases {
        let s = stack.register().await;
        let r = stack
            .create_key(&s, json!({"name": "near its end", "budget": {"amount_usd": 0.002, "period": "day"}}))
            .await;
        assert_eq!(r.status(), 201);
        let key = r.json::<Value>().await.unwrap()["key"].as_str().unwrap().to_string();
        let b = json!({"model": model, "messages": user_message("spend it all"),
            "mock": {"tag": unique_tag(), "reply_words": words}});
        let mut answered = 0;
        for _ in 0..4 {
            let r = post_chat(&stack, &key, None, &b).await;
            if r.status() == 429 {
                let e = expect_openai_error(r, 429).await;
                assert_eq!(e["error"]["code"], "budget_exceeded");
                break;
            }
            assert_eq!(r.status(), 200, "{model}");
            let v: Value = r.json().await.unwrap();
            assert!(v["usage"]["completion_tokens"].as_u64().unwrap() <= max_out, "{model}: {}", v["usage"]);
            answered += 1;
        }
        assert_eq!(answered, 1, "{model}: one request used the budget up, the next was refused");
        let spent = spent_by(s.org_id, answered).await;
        // One request's reservation: its prompt (far below 1,000 tokens) and its maximum output.
        let reservation = (Decimal::from(1_000) * input + Decimal::from(max_out) * output) / Decimal::from(1_000_000);
        assert!(spent > budget, "{model}: the budget was used up ({spent})");
        assert!(
            spent <= budget + reservation,
            "{model}: spent {spent} of {budget}, past one reservation ({reservation})"
        );
    }
}

#[tokio::test]
async fn without_a_catalog_maximum_the_upstream_gets_the_limit_the_budget_reserved() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let r = stack.create_key(&s, json!({"name": "capped", "budget": {"amount_usd": 1, "period": "day"}})).await;
    assert_eq!(r.status(), 201);
    let key = r.json::<Value>().await.unwrap()["key"].as_str().unwrap().to_string();
    // azure-test's upstream model (`my-gpt4o`) is not in the catalog.
    let tag = unique_tag();
    let b = json!({"model": "azure-test", "messages": user_message("hello"), "mock": {"tag": tag}});
    assert_eq!(post_chat(&stack, &key, None, &b).await.status(), 200);
    let seen = stack.mock_stats_for(&tag).await;
    assert_eq!(seen["last_body"]["max_tokens"], 4096, "{}", seen["last_body"]);

    // Without a budget nothing is capped.
    let (_, open, _) = stack.org_with_key().await;
    let tag = unique_tag();
    let b = json!({"model": "azure-test", "messages": user_message("hello"), "mock": {"tag": tag}});
    assert_eq!(post_chat(&stack, &open, None, &b).await.status(), 200);
    assert_eq!(stack.mock_stats_for(&tag).await["last_body"]["max_tokens"], Value::Null);
}
