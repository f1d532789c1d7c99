//! Routing: every fault on a first deployment ends in a good answer from the next one; retries,
//! model fallbacks and strategies; the circuit breaker opens and closes; per-deployment timeouts;
//! a request whose deadline passes gets 504 rather than hang. Faults are injected per deployment
//! through the mock's `/k/<knobs>/` base-URL prefix, so these tests run stacks of their own.

use std::time::Duration;

use gw_tests::{db, header, sse_data, user_message, Stack, StackOptions};
use serde_json::{json, Value};

/// (name, base-URL prefix knobs, provider kind) of each fault. Every faulty provider has a 1 s
/// first-byte timeout, which the `slow` fault exceeds.
const FAULTS: &[(&str, &str, &str)] = &[
    ("s500", "status=500", "openai"),
    ("s503", "status=503", "openai"),
    ("s429", "status=429", "openai"),
    ("garbage", "malformed=true", "openai"),
    ("dropped", "drop_connection=true", "openai"),
    ("slow", "latency_ms=3000", "openai"),
    ("auth", "require_credential=nope", "openai"),
    ("a529", "status=529", "anthropic"),
    ("a500", "status=500", "anthropic"),
    ("agarbage", "malformed=true", "anthropic"),
    ("g503", "status=503", "gemini"),
    ("g429", "status=429", "gemini"),
    ("ggarbage", "malformed=true", "gemini"),
];

fn fault_config() -> String {
    let mut text = String::new();
    for (name, knobs, kind) in FAULTS {
        let base = match *kind {
            "anthropic" => format!("{{mock}}/k/{knobs}/v1"),
            "gemini" => format!("{{mock}}/k/{knobs}/v1beta"),
            _ => format!("{{mock}}/k/{knobs}/v1"),
        };
        let upstream = match *kind {
            "anthropic" => "claude-sonnet-4-5",
            "gemini" => "gemini-2.5-flash",
            _ => "gpt-4o-mini-2024-07-18",
        };
        text.push_str(&format!(
            "[[providers]]\nname = \"f-{name}\"\nkind = \"{kind}\"\nbase_url = \"{base}\"\n\
             api_key_env = \"GW_TEST_UPSTREAM_KEY\"\nfirst_byte_timeout_ms = 1000\n\
             [[models]]\nname = \"fault-{name}\"\ndeployments = [{{ provider = \"f-{name}\", model = \"{upstream}\" }}, \
             {{ provider = \"upstream\", model = \"gpt-4o-mini-2024-07-18\" }}]\n"
        ));
    }
    text
}

async fn fault_stack() -> Stack {
    Stack::start_with(StackOptions { extra_config: fault_config(), ..Default::default() }).await
}

#[tokio::test]
async fn each_fault_on_the_first_deployment_ends_in_an_answer_from_the_second() {
    let stack = fault_stack().await;
    let (session, key, _) = stack.org_with_key().await;
    for (name, _, _) in FAULTS {
        // A connection dropped after content reached the client cannot fall back: that stream
        // ends with an error event instead (see proxy_chat_completions).
        let modes: &[bool] = if *name == "dropped" { &[false] } else { &[false, true] };
        for &stream in modes {
            let model = format!("fault-{name}");
            let body = json!({"model": model, "messages": user_message("fall back please"), "stream": stream});
            let resp = stack.chat(&key, body).await;
            assert_eq!(resp.status(), 200, "{name} stream={stream}");
            assert_eq!(header(&resp, "x-gw-provider"), "upstream", "{name} stream={stream}");
            assert_eq!(header(&resp, "x-gw-model"), "gpt-4o-mini-2024-07-18");
            let id: uuid::Uuid = header(&resp, "x-gw-request-id").parse().unwrap();
            let text = resp.text().await.unwrap();
            if stream {
                let events = sse_data(&text);
                assert_eq!(events.last().map(String::as_str), Some("[DONE]"), "{name}: {text}");
                assert!(!text.contains("\"error\""), "{name}: {text}");
            } else {
                let v: Value = serde_json::from_str(&text).unwrap();
                assert_eq!(v["object"], "chat.completion", "{name}");
            }
            let row = db::audit_row(session.org_id, id).await;
            let attempts = row.routing.as_array().unwrap();
            assert_eq!(attempts.len(), 2, "{name}: {attempts:?}");
            assert_eq!(attempts[0]["provider"], format!("f-{name}"));
            assert_eq!(attempts[0]["outcome"], "retryable_error", "{name}: {attempts:?}");
            assert_eq!(attempts[1]["outcome"], "ok");
            assert_eq!(row.provider.as_deref(), Some("upstream"));
        }
    }
}

#[tokio::test]
async fn a_refused_connection_falls_back_too() {
    // `fallback-model` of the shared config: a dead address first, the mock second.
    let stack = Stack::shared().await;
    let (_, key, _) = stack.org_with_key().await;
    let resp = stack.chat(&key, json!({"model": "fallback-model", "messages": user_message("hi")})).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-gw-provider"), "upstream");
}

#[tokio::test]
async fn a_request_whose_deadline_passes_gets_504_and_never_hangs() {
    let stack = Stack::start_with(StackOptions {
        proxy_config: "request_timeout_ms = 800\naudit_flush_interval_ms = 50".into(),
        extra_config: "[[providers]]\nname = \"slow\"\nkind = \"openai\"\nbase_url = \"{mock}/k/latency_ms=5000/v1\"\n\
                       [[models]]\nname = \"slow-model\"\ndeployments = [{ provider = \"slow\", model = \"gpt-4o-mini\" }, \
                       { provider = \"slow\", model = \"gpt-4o-mini\" }]\n"
            .into(),
        ..Default::default()
    })
    .await;
    let (_, key, _) = stack.org_with_key().await;
    for stream in [false, true] {
        let resp = tokio::time::timeout(
            Duration::from_secs(20),
            stack.chat(&key, json!({"model": "slow-model", "messages": user_message("hi"), "stream": stream})),
        )
        .await
        .expect("the proxy answered");
        assert_eq!(resp.status(), 504, "stream={stream}");
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["error"]["code"], "upstream_timeout");
    }
}

#[tokio::test]
async fn a_deployment_total_timeout_moves_on_to_the_next() {
    let stack = Stack::start_with(StackOptions {
        extra_config:
            "[[providers]]\nname = \"slowish\"\nkind = \"openai\"\nbase_url = \"{mock}/k/latency_ms=3000/v1\"\n\
                       [[models]]\nname = \"timed\"\ndeployments = [{ provider = \"slowish\", model = \"gpt-4o-mini\", \
                       timeout_ms = 300 }, { provider = \"upstream\", model = \"gpt-4o-mini-2024-07-18\" }]\n"
                .into(),
        ..Default::default()
    })
    .await;
    let (session, key, _) = stack.org_with_key().await;
    let resp = stack.chat(&key, json!({"model": "timed", "messages": user_message("hi")})).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-gw-provider"), "upstream");
    let id: uuid::Uuid = header(&resp, "x-gw-request-id").parse().unwrap();
    let row = db::audit_row(session.org_id, id).await;
    assert_eq!(row.routing[0]["error"], "upstream_timeout", "{:?}", row.routing);
}

/// Requests the mock saw under `tag` (the tag rides in the deployment's base-URL knobs).
async fn seen(stack: &Stack, tag: &str) -> u64 {
    stack.mock_stats_for(tag).await["requests"].as_u64().unwrap_or(0)
}

#[tokio::test]
async fn the_circuit_opens_after_the_configured_failures_and_closes_after_the_cooldown() {
    let stack = Stack::start_with(StackOptions {
        routing_config: Some("circuit_failures = 3\ncircuit_cooldown_ms = 1500\nhealth_check_interval_ms = 0".into()),
        extra_config: "[[providers]]\nname = \"flaky\"\nkind = \"openai\"\n\
                       base_url = \"{mock}/k/fail_first=3,tag=cb-flaky/v1\"\n\
                       [[providers]]\nname = \"steady\"\nkind = \"openai\"\nbase_url = \"{mock}/k/tag=cb-steady/v1\"\n\
                       [[models]]\nname = \"cb\"\ndeployments = [{ provider = \"flaky\", model = \"gpt-4o-mini\" }, \
                       { provider = \"steady\", model = \"gpt-4o-mini\" }]\n"
            .into(),
        ..Default::default()
    })
    .await;
    let (_, key, _) = stack.org_with_key().await;
    let ask = || stack.chat(&key, json!({"model": "cb", "messages": user_message("hi")}));
    // Three failures on `flaky`, each answered by `steady`.
    for _ in 0..3 {
        let r = ask().await;
        assert_eq!(r.status(), 200);
        assert_eq!(header(&r, "x-gw-provider"), "steady");
    }
    assert_eq!(seen(&stack, "cb-flaky").await, 3);
    // Open: `flaky` is not even tried.
    for _ in 0..5 {
        let r = ask().await;
        assert_eq!(header(&r, "x-gw-provider"), "steady");
    }
    assert_eq!(seen(&stack, "cb-flaky").await, 3, "an open circuit sends nothing");
    tokio::time::sleep(Duration::from_millis(1700)).await;
    // After the cooldown one trial goes through; it succeeds (the fault is spent) and closes it.
    let r = ask().await;
    assert_eq!(header(&r, "x-gw-provider"), "flaky");
    assert_eq!(seen(&stack, "cb-flaky").await, 4);
    for _ in 0..3 {
        assert_eq!(header(&ask().await, "x-gw-provider"), "flaky");
    }
}

#[tokio::test]
async fn all_circuits_open_is_a_prompt_503() {
    let stack = Stack::start_with(StackOptions {
        routing_config: Some("circuit_failures = 2\ncircuit_cooldown_ms = 60000\nhealth_check_interval_ms = 0".into()),
        extra_config: "[[providers]]\nname = \"broken\"\nkind = \"openai\"\nbase_url = \"{mock}/k/status=500,tag=cb-broken/v1\"\n\
                       [[models]]\nname = \"only-broken\"\ndeployments = [{ provider = \"broken\", model = \"gpt-4o-mini\" }]\n"
            .into(),
        ..Default::default()
    })
    .await;
    let (_, key, _) = stack.org_with_key().await;
    for _ in 0..2 {
        let r = stack.chat(&key, json!({"model": "only-broken", "messages": user_message("hi")})).await;
        assert_eq!(r.status(), 502);
    }
    let r = stack.chat(&key, json!({"model": "only-broken", "messages": user_message("hi")})).await;
    assert_eq!(r.status(), 503);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "no_available_deployment");
    assert_eq!(seen(&stack, "cb-broken").await, 2);
}

/// Model `spread-<strategy>` over providers `<strategy>-one` (weight 3) and `<strategy>-two`.
fn strategy_config(s: &str) -> String {
    format!(
        "[[providers]]\nname = \"{s}-one\"\nkind = \"openai\"\nbase_url = \"{{mock}}/k/tag=st-{s}-one/v1\"\n\
         [[providers]]\nname = \"{s}-two\"\nkind = \"openai\"\nbase_url = \"{{mock}}/k/tag=st-{s}-two/v1\"\n\
         [[models]]\nname = \"spread-{s}\"\nstrategy = \"{s}\"\n\
         deployments = [{{ provider = \"{s}-one\", model = \"gpt-4o-mini\", weight = 3 }}, \
         {{ provider = \"{s}-two\", model = \"gpt-4o-mini-2024-07-18\", weight = 1 }}]\n"
    )
}

#[tokio::test]
async fn strategies_spread_or_pick_deployments() {
    let extra: String = ["round_robin", "weighted", "lowest_cost"].iter().map(|s| strategy_config(s)).collect();
    let stack = Stack::start_with(StackOptions { extra_config: extra, ..Default::default() }).await;
    let (_, key, _) = stack.org_with_key().await;
    for s in ["round_robin", "weighted", "lowest_cost"] {
        for _ in 0..40 {
            let r = stack.chat(&key, json!({"model": format!("spread-{s}"), "messages": user_message("hi")})).await;
            assert_eq!(r.status(), 200);
        }
    }
    let (rr1, rr2) = (seen(&stack, "st-round_robin-one").await, seen(&stack, "st-round_robin-two").await);
    assert_eq!((rr1, rr2), (20, 20), "round robin alternates");
    let (w1, w2) = (seen(&stack, "st-weighted-one").await, seen(&stack, "st-weighted-two").await);
    assert_eq!(w1 + w2, 40);
    assert!(w1 > w2 && w2 > 0, "weights 3:1 gave {w1}:{w2}");
    // gpt-4o-mini and its dated snapshot are priced alike in the test config, so the first
    // listed wins ties: every request goes to `one`.
    let (c1, c2) = (seen(&stack, "st-lowest_cost-one").await, seen(&stack, "st-lowest_cost-two").await);
    assert_eq!((c1, c2), (40, 0));
}

#[tokio::test]
async fn retries_and_model_fallbacks_within_one_request() {
    let stack = Stack::start_with(StackOptions {
        extra_config:
            "[[providers]]\nname = \"once\"\nkind = \"openai\"\nbase_url = \"{mock}/k/fail_first=1,tag=rt-once/v1\"\n\
                       [[models]]\nname = \"retrying\"\nretries = 1\nretry_backoff_ms = 10\n\
                       deployments = [{ provider = \"once\", model = \"gpt-4o-mini\" }]\n\
                       [[models]]\nname = \"primary\"\nfallbacks = [\"mock-model\"]\n\
                       deployments = [{ provider = \"dead\", model = \"gpt-4o-mini\" }]\n"
                .into(),
        ..Default::default()
    })
    .await;
    let (session, key, _) = stack.org_with_key().await;
    let r = stack.chat(&key, json!({"model": "retrying", "messages": user_message("hi")})).await;
    assert_eq!(r.status(), 200);
    let id: uuid::Uuid = header(&r, "x-gw-request-id").parse().unwrap();
    assert_eq!(db::audit_row(session.org_id, id).await.attempts, 2);
    assert_eq!(seen(&stack, "rt-once").await, 2);

    let r = stack.chat(&key, json!({"model": "primary", "messages": user_message("hi")})).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-gw-provider"), "mock");
    let id: uuid::Uuid = header(&r, "x-gw-request-id").parse().unwrap();
    let row = db::audit_row(session.org_id, id).await;
    assert_eq!(row.routing[0]["provider"], "dead");
    assert_eq!(row.routing[1]["provider"], "mock");
}

#[tokio::test]
async fn a_provider_failing_its_health_check_is_routed_around() {
    let stack = Stack::start_with(StackOptions {
        routing_config: Some("circuit_failures = 1000000\nhealth_check_interval_ms = 200".into()),
        ..Default::default()
    })
    .await;
    let (session, key, _) = stack.org_with_key().await;
    // `fallback-model`: the `dead` provider (nothing listens) first. Two failed checks mark it
    // down; from then on requests go straight to the second deployment.
    let mut attempts = 0;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let r = stack.chat(&key, json!({"model": "fallback-model", "messages": user_message("hi")})).await;
        assert_eq!(r.status(), 200);
        let id: uuid::Uuid = header(&r, "x-gw-request-id").parse().unwrap();
        attempts = db::audit_row(session.org_id, id).await.attempts;
        if attempts == 1 {
            break;
        }
    }
    assert_eq!(attempts, 1, "the unhealthy provider was still tried");
    let metrics =
        stack.http.get(format!("{}/metrics", stack.proxy_metrics)).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("gw_proxy_provider_healthy{provider=\"dead\"} 0"), "{metrics}");
    assert!(metrics.contains("gw_proxy_provider_healthy{provider=\"upstream\"} 1"));
    // `dead-model` has no healthy deployment at all: it is still tried (and fails), not refused.
    let r = stack.chat(&key, json!({"model": "dead-model", "messages": user_message("hi")})).await;
    assert_eq!(r.status(), 502);
}

#[tokio::test]
async fn a_client_that_leaves_mid_stream_is_billed_and_the_upstream_read_no_further_than_the_drain_bound() {
    use futures::StreamExt;
    // gw reads on after a client leaves, for the upstream's usage, but only this many bytes.
    let opts = StackOptions {
        proxy_config: "audit_flush_interval_ms = 50\nstream_drain_max_bytes = 1".into(),
        ..Default::default()
    };
    let stack = Stack::start_with(opts).await;
    let (session, key, _) = stack.org_with_key().await;
    let long = "a long prompt so the reply has many words to stream one by one";
    let body = json!({"model": "gpt-4o-mini", "messages": user_message(long), "stream": true,
                      "mock": {"chunk_delay_ms": 300}});
    let resp = stack.chat(&key, body).await;
    assert_eq!(resp.status(), 200);
    let id: uuid::Uuid = header(&resp, "x-gw-request-id").parse().unwrap();
    let mut chunks = resp.bytes_stream();
    assert!(chunks.next().await.is_some_and(|c| c.is_ok()), "a first chunk arrives");
    drop(chunks);
    // Past the bound gw closes its upstream connection rather than read the rest: the mock's
    // body is dropped, and the attempt is billed at an estimate.
    let mut abandoned = 0;
    for _ in 0..100 {
        abandoned = stack.mock_stats().await["abandoned_bodies"].as_u64().unwrap_or(0);
        if abandoned > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(abandoned, 1);
    let row = db::audit_row_within(session.org_id, id, Duration::from_secs(10)).await;
    assert_eq!(row.status_code, 499);
    assert_eq!(row.error_type.as_deref(), Some("client_disconnected"));
    assert_eq!(row.settled_by.as_deref(), Some("estimate"));
    assert!(row.prompt_tokens > 0 && row.cost_usd > rust_decimal::Decimal::ZERO, "{row:?}");
}

#[tokio::test]
async fn an_organizations_requests_stay_in_its_data_residency_region() {
    let stack = Stack::start_with(StackOptions {
        extra_config: "[[providers]]\nname = \"in-us\"\nkind = \"openai\"\nbase_url = \"{mock}/v1\"\n\
                       api_key_env = \"GW_TEST_UPSTREAM_KEY\"\n\
                       [[providers]]\nname = \"in-eu\"\nkind = \"openai\"\nbase_url = \"{mock}/v1\"\n\
                       api_key_env = \"GW_TEST_UPSTREAM_KEY\"\n\
                       [[models]]\nname = \"resident\"\nstrategy = \"round_robin\"\n\
                       deployments = [{ provider = \"in-us\", model = \"gpt-4o-mini\", region = \"us\" }, \
                       { provider = \"in-eu\", model = \"gpt-4o-mini\", region = \"eu\" }]\n\
                       [[models]]\nname = \"us-only\"\n\
                       deployments = [{ provider = \"in-us\", model = \"gpt-4o-mini\", region = \"us\" }]\n"
            .into(),
        ..Default::default()
    })
    .await;
    let (eu, eu_key, _) = stack.org_with_key().await;
    let r = stack
        .admin_patch("/organizations/current", &eu.access_token, &json!({"data_residency": {"region": "eu"}}))
        .await;
    assert_eq!(r.status(), 200);
    let (_, us_key, _) = stack.org_with_key().await;
    for _ in 0..6 {
        let r = stack.chat(&eu_key, json!({"model": "resident", "messages": user_message("hi")})).await;
        assert_eq!(r.status(), 200);
        assert_eq!(header(&r, "x-gw-provider"), "in-eu", "an eu organization's request left the eu");
        let r = stack.chat(&us_key, json!({"model": "resident", "messages": user_message("hi")})).await;
        assert_eq!(header(&r, "x-gw-provider"), "in-us");
    }
    let r = stack.chat(&eu_key, json!({"model": "us-only", "messages": user_message("hi")})).await;
    assert_eq!(r.status(), 400);
    let b: Value = r.json().await.unwrap();
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "model_not_in_region",
        "message": "The model 'us-only' has no deployment in this organization's data-residency region (eu).",
        "param": "model",
        "type": "invalid_request_error"
      }
    }
    "#);
}
