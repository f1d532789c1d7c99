//! `/api/v1/experiments`: creating, starting, pausing and stopping experiments, the proxy's
//! sticky assignment (headers and audit rows), results by the sequential test, and completion
//! with `experiment.completed`. Two runs go end to end through the proxy on the mock upstream's
//! latency knobs: a true 20 % latency difference found within the sample size the docs predict,
//! and an A/A run checked after every 100 requests up to 10,000 that never declares a winner.
//! Lifecycle and validation run on the shared stack, each test with its own organization; the
//! end-to-end runs on stacks of their own (their models have fixed latencies).

use futures::StreamExt;
use gw_shared::experiments::stats::{samples_needed, Settings};
use gw_tests::{db, expect_api_error, header, json_of, Session, Stack, StackOptions};
use serde_json::{json, Value};
use uuid::Uuid;

fn experiment(model: &str, variants: Value) -> Value {
    json!({"name": "faster model", "metric": "latency", "traffic": {"model": model}, "variants": variants})
}

async fn create(stack: &Stack, s: &Session, body: &Value) -> Value {
    json_of(stack.admin_post("/experiments", &s.access_token, body).await, 201).await
}

async fn act(stack: &Stack, s: &Session, id: &str, action: &str) -> reqwest::Response {
    stack.admin_post(&format!("/experiments/{id}/{action}"), &s.access_token, &json!({})).await
}

async fn events_of(org: Uuid, kind: &str) -> Vec<Value> {
    let mut conn = db::connect().await;
    #[derive(diesel::QueryableByName)]
    struct Row {
        #[diesel(sql_type = diesel::sql_types::Jsonb)]
        payload: Value,
    }
    use diesel_async::RunQueryDsl;
    let rows: Vec<Row> =
        diesel::sql_query(format!("SELECT payload FROM events WHERE org_id = '{org}' AND event_type = '{kind}'"))
            .load(&mut conn)
            .await
            .expect("events");
    rows.into_iter().map(|r| r.payload).collect()
}

#[tokio::test]
async fn an_experiment_goes_from_draft_to_running_to_paused_to_stopped() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let e = create(
        &stack,
        &s,
        &experiment("mock-model", json!([{"name": "control"}, {"name": "up", "model": "gpt-4o-mini", "weight": 3}])),
    )
    .await;
    let id = e["id"].as_str().unwrap();
    assert_eq!(e["status"], "draft");
    assert_eq!(
        e["variants"][0],
        json!({"name": "control", "model": null, "template_version": null, "weight": 1, "share_percent": 25.0, "control": true})
    );
    assert_eq!(e["variants"][1]["share_percent"], 75.0);
    assert_eq!(json_of(act(&stack, &s, id, "start").await, 200).await["status"], "running");
    let b = expect_api_error(act(&stack, &s, id, "start").await, 409).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "conflict",
        "fields": [],
        "message": "the experiment is running; start needs it draft or paused"
      }
    }
    "#);
    assert_eq!(json_of(act(&stack, &s, id, "pause").await, 200).await["status"], "paused");
    let stopped = json_of(act(&stack, &s, id, "stop").await, 200).await;
    assert_eq!(
        (stopped["status"].as_str(), stopped["completion_reason"].as_str()),
        (Some("completed"), Some("stopped"))
    );
    assert_eq!(stopped["winner"], Value::Null);
    expect_api_error(act(&stack, &s, id, "start").await, 409).await;
    let done = events_of(s.org_id, "experiment.completed").await;
    assert_eq!(done.len(), 1);
    assert_eq!((done[0]["experiment_id"].as_str(), done[0]["reason"].as_str()), (Some(id), Some("stopped")));
    let list = stack.get_ok(&s, "/experiments?status=completed").await;
    assert_eq!(list["data"][0]["id"], id);
    assert_eq!(stack.get_ok(&s, "/experiments?status=running").await["data"], json!([]));
}

#[tokio::test]
async fn an_ill_formed_experiment_is_refused_naming_the_field() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let post = |body: Value| {
        let (stack, token) = (&stack, s.access_token.clone());
        async move { expect_api_error(stack.admin_post("/experiments", &token, &body).await, 400).await }
    };
    let b = post(experiment("m", json!([{"name": "only"}]))).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "validation_error",
        "fields": [
          {
            "field": "variants",
            "message": "must have 2 to 8 variants"
          }
        ],
        "message": "variants: must have 2 to 8 variants"
      }
    }
    "#);
    let b = post(experiment("m", json!([{"name": "a"}, {"name": "b"}]))).await;
    assert_eq!(b["error"]["fields"][0]["field"], "variants[1].model");
    let b = post(json!({"name": "x", "metric": "latency", "traffic": {}, "variants": [{"name": "a"}, {"name": "b", "model": "m"}]})).await;
    assert_eq!(b["error"]["fields"][0]["field"], "traffic");
    let b = post(experiment("m", json!([{"name": "a"}, {"name": "b", "template_version": 2}]))).await;
    assert_eq!(b["error"]["fields"][0]["field"], "variants[1].template_version");
    let b = post(json!({"name": "x", "metric": "latency", "traffic": {"model": "m", "team_id": Uuid::now_v7()},
                        "variants": [{"name": "a"}, {"name": "b", "model": "n"}]}))
    .await;
    assert_eq!(b["error"]["fields"][0]["field"], "traffic.team_id");
    let b = post(json!({"name": "x", "metric": "speed", "traffic": {"model": "m"}, "variants": []})).await;
    assert_eq!(b["error"]["code"], "validation_error");
    let b = post(experiment("mock-model", json!([{"name": "a"}, {"name": "b", "model": "no-such-model"}]))).await;
    assert_eq!(b["error"]["fields"][0]["field"], "variants[1].model");
    let b = post(experiment("no-such-model", json!([{"name": "a"}, {"name": "b", "model": "mock-model"}]))).await;
    assert_eq!(b["error"]["fields"][0]["field"], "traffic.model");
    let mut capped = experiment("m", json!([{"name": "a"}, {"name": "b", "model": "n"}]));
    capped["max_samples_per_variant"] = json!(10);
    assert_eq!(post(capped).await["error"]["fields"][0]["field"], "max_samples_per_variant");
}

#[tokio::test]
async fn another_organizations_experiment_does_not_exist() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let e =
        create(&stack, &s, &experiment("mock-model", json!([{"name": "a"}, {"name": "b", "model": "gpt-4o-mini"}])))
            .await;
    let id = e["id"].as_str().unwrap();
    let other = stack.register().await;
    expect_api_error(stack.admin_get(&format!("/experiments/{id}"), &other.access_token).await, 404).await;
    expect_api_error(act(&stack, &other, id, "start").await, 404).await;
    expect_api_error(stack.admin_get(&format!("/experiments/{id}/results"), &other.access_token).await, 404).await;
    assert_eq!(stack.get_ok(&other, "/experiments").await["data"], json!([]));
}

#[tokio::test]
async fn two_running_experiments_may_not_take_the_same_traffic() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let body = experiment("mock-model", json!([{"name": "a"}, {"name": "b", "model": "gpt-4o-mini"}]));
    let first = create(&stack, &s, &body).await;
    let second = create(&stack, &s, &body).await;
    json_of(act(&stack, &s, first["id"].as_str().unwrap(), "start").await, 200).await;
    let b = expect_api_error(act(&stack, &s, second["id"].as_str().unwrap(), "start").await, 409).await;
    assert!(b["error"]["message"].as_str().unwrap().contains("running over the same traffic"), "{b}");
}

#[tokio::test]
async fn feedback_is_recorded_per_request_and_checked() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let id = Uuid::now_v7();
    let path = format!("/requests/{id}/feedback");
    assert_eq!(stack.admin_put(&path, &s.access_token, &json!({"score": 4.5, "comment": "good"})).await.status(), 204);
    assert_eq!(stack.admin_put(&path, &s.access_token, &json!({"score": 1})).await.status(), 204);
    let b = expect_api_error(stack.admin_put(&path, &s.access_token, &json!({"score": 1e300})).await, 400).await;
    assert_eq!(b["error"]["fields"][0]["field"], "score");
    // Only ids the proxy could have minted: UUIDv7s from the past.
    let not_a_request = format!("/requests/{}/feedback", Uuid::new_v4());
    let b = expect_api_error(stack.admin_put(&not_a_request, &s.access_token, &json!({"score": 1})).await, 400).await;
    assert_eq!(b["error"]["fields"][0]["field"], "request_id");
    let mut conn = db::connect().await;
    use diesel_async::RunQueryDsl;
    #[derive(diesel::QueryableByName)]
    struct Score {
        #[diesel(sql_type = diesel::sql_types::Double)]
        score: f64,
    }
    let rows: Vec<Score> = diesel::sql_query(format!(
        "SELECT score FROM request_feedback WHERE org_id = '{}' AND request_id = '{id}'",
        s.org_id
    ))
    .load(&mut conn)
    .await
    .unwrap();
    assert_eq!(rows.iter().map(|r| r.score).collect::<Vec<_>>(), vec![1.0], "the later score replaced the first");
}

/// A stack whose models answer after fixed delays: `exp-fast` (100 ms), `exp-slow` (120 ms: a
/// true 20 % latency difference) and `aa-one` / `aa-two` (the same 5 ms deployment).
async fn latency_stack() -> Stack {
    let extra = "\
[[providers]]\nname = \"fast\"\nkind = \"openai\"\nbase_url = \"{mock}/k/latency_ms=100,latency_jitter_ms=30/v1\"\napi_key_env = \"GW_TEST_UPSTREAM_KEY\"\n\
[[providers]]\nname = \"slow\"\nkind = \"openai\"\nbase_url = \"{mock}/k/latency_ms=120,latency_jitter_ms=30/v1\"\napi_key_env = \"GW_TEST_UPSTREAM_KEY\"\n\
[[providers]]\nname = \"twin\"\nkind = \"openai\"\nbase_url = \"{mock}/k/latency_ms=5/v1\"\napi_key_env = \"GW_TEST_UPSTREAM_KEY\"\n\
[[models]]\nname = \"exp-fast\"\ndeployments = [{ provider = \"fast\", model = \"gpt-4o-mini-2024-07-18\" }]\n\
[[models]]\nname = \"exp-slow\"\ndeployments = [{ provider = \"slow\", model = \"gpt-4o-mini-2024-07-18\" }]\n\
[[models]]\nname = \"aa-one\"\ndeployments = [{ provider = \"twin\", model = \"gpt-4o-mini-2024-07-18\" }]\n\
[[models]]\nname = \"aa-two\"\ndeployments = [{ provider = \"twin\", model = \"gpt-4o-mini-2024-07-18\" }]\n";
    Stack::start_with(StackOptions { extra_config: extra.into(), ..Default::default() }).await
}

/// Sends `n` requests for `model`, `user` `u<offset+i>`, 16 at a time.
async fn traffic(stack: &Stack, key: &str, model: &str, offset: usize, n: usize) -> Vec<reqwest::Response> {
    futures::stream::iter(offset..offset + n)
        .map(|i| {
            let body =
                json!({"model": model, "user": format!("u{i}"), "messages": [{"role": "user", "content": "hi"}]});
            async move { stack.chat(key, body).await }
        })
        .buffer_unordered(16)
        .collect()
        .await
}

async fn results(stack: &Stack, s: &Session, id: &str) -> Value {
    stack.get_ok(s, &format!("/experiments/{id}/results")).await
}

#[tokio::test]
async fn a_true_20_percent_latency_difference_is_found_within_the_predicted_samples() {
    let stack = latency_stack().await;
    let (s, key, _) = stack.org_with_key().await;
    let e = create(
        &stack,
        &s,
        &experiment("exp-fast", json!([{"name": "control"}, {"name": "slower", "model": "exp-slow"}])),
    )
    .await;
    let id = e["id"].as_str().unwrap().to_string();
    json_of(act(&stack, &s, &id, "start").await, 200).await;

    // Sticky: one user always gets one variant, said in the headers and the audit row.
    let mut seen = Vec::new();
    for _ in 0..5 {
        let body = json!({"model": "exp-fast", "user": "sticky-user", "messages": [{"role": "user", "content": "hi"}]});
        let r = stack.chat(&key, body).await;
        assert_eq!(r.status(), 200);
        assert_eq!(header(&r, "x-gw-experiment"), id);
        seen.push((
            header(&r, "x-gw-experiment-variant").to_string(),
            header(&r, "x-gw-request-id").parse::<Uuid>().unwrap(),
        ));
    }
    assert!(seen.iter().all(|(v, _)| *v == seen[0].0), "{seen:?}");
    let row = db::audit_row(s.org_id, seen[0].1).await;
    assert_eq!(
        (row.experiment_id.map(|e| e.to_string()), row.experiment_variant),
        (Some(id.clone()), Some(seen[0].0.clone()))
    );
    let expected_model = if seen[0].0 == "slower" { "exp-slow" } else { "exp-fast" };
    assert_eq!(row.model.as_deref(), Some(expected_model));
    // The documented header keys requests without a `user` alike.
    let keyed = |k: &'static str| {
        let (stack, key) = (&stack, key.clone());
        async move {
            let body = json!({"model": "exp-fast", "messages": [{"role": "user", "content": "hi"}]});
            let r = stack.chat_with(&stack.proxy, &key, &body, &[("x-gw-experiment-key", k)]).await;
            header(&r, "x-gw-experiment-variant").to_string()
        }
    };
    let first = keyed("device-7").await;
    assert_eq!(keyed("device-7").await, first);

    // Rounds of 10 requests, results read after each, until the experiment completes.
    let mut sent = 0;
    let done = loop {
        for r in traffic(&stack, &key, "exp-fast", sent, 10).await {
            assert_eq!(r.status(), 200);
        }
        sent += 10;
        let res = results(&stack, &s, &id).await;
        if res["status"] == "completed" {
            break res;
        }
        assert_eq!(res["winner"], Value::Null, "no winner without completion: {res}");
        assert!(sent < 2000, "no winner after {sent} requests: {res}");
    };
    assert_eq!(
        (done["completion_reason"].as_str(), done["winner"].as_str()),
        (Some("winner"), Some("control")),
        "{done}"
    );
    let (control, slower) = (&done["variants"][0], &done["variants"][1]);
    assert_eq!(slower["comparison"]["verdict"], "worse");
    assert!(slower["comparison"]["significant"].as_bool().unwrap());
    // The difference found is about the 20 ms the deployments differ by, inside its interval.
    let cmp = &slower["comparison"];
    let diff = cmp["difference"].as_f64().unwrap();
    assert!(diff > 10.0, "{done}");
    let (low, high) = (cmp["interval"][0].as_f64().unwrap(), cmp["interval"][1].as_f64().unwrap());
    assert!(0.0 < low && low <= diff && diff <= high, "{done}");
    assert!(cmp["p_value"].as_f64().unwrap() <= 0.05, "{done}");
    assert_eq!(
        (&done["test"], &done["alpha"], &done["min_samples"]),
        (&json!("msprt"), &json!(0.05), &json!(Settings::default().min_samples)),
        "{done}"
    );
    // One comparison: the whole alpha is its own.
    assert_eq!(done["alpha_per_comparison"], json!(0.05), "{done}");
    // Both deployments' latencies have a 30 ms standard deviation (the mock's jitter), so the
    // true effect is 20/30 = 0.67 standard deviations: the smaller arm is within what
    // docs/experiments.md predicts for it at 99.9 % power (173), plus one round of looks (results
    // are read every 10 requests, and audit rows are written behind the answers). Each run is a
    // new random experiment, so one run is held to the 99.9 % figure (the seeded simulations in
    // `stats` check the 80 % one).
    for arm in [control, slower] {
        let sd = arm["std_dev"].as_f64().unwrap();
        assert!((15.0..60.0).contains(&sd), "the jitter shows: {done}");
    }
    let predicted = samples_needed(20.0 / 30.0, 0.999, &Settings::default());
    assert_eq!(predicted, 173, "2/3 of a standard deviation, a hair under the table's 0.67 (172)");
    let fewest = control["samples"].as_u64().unwrap().min(slower["samples"].as_u64().unwrap());
    assert!(fewest <= predicted + 20, "{fewest} samples in the smaller arm, predicted {predicted}: {done}");
    // Completed once, with its event; the proxy stops assigning.
    let events = events_of(s.org_id, "experiment.completed").await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["winner"], "control");
    // The completion reaches the proxies through an invalidation (within a second).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let r = stack.chat(&key, json!({"model": "exp-fast", "messages": [{"role": "user", "content": "hi"}]})).await;
        if r.headers().get("x-gw-experiment").is_none() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the proxy still assigns a completed experiment");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn an_a_a_experiment_looked_at_every_100_requests_up_to_10000_declares_no_winner() {
    let stack = latency_stack().await;
    let (s, key, _) = stack.org_with_key().await;
    let e =
        create(&stack, &s, &experiment("aa-one", json!([{"name": "one"}, {"name": "two", "model": "aa-two"}]))).await;
    let id = e["id"].as_str().unwrap().to_string();
    json_of(act(&stack, &s, &id, "start").await, 200).await;
    for round in 0..100 {
        for r in traffic(&stack, &key, "aa-one", round * 100, 100).await {
            assert_eq!(r.status(), 200);
        }
        let res = results(&stack, &s, &id).await;
        assert_eq!(res["status"], "running", "after {} requests: {res}", (round + 1) * 100);
        assert_eq!(res["winner"], Value::Null);
    }
    let res = results(&stack, &s, &id).await;
    let total: u64 = res["variants"].as_array().unwrap().iter().map(|v| v["samples"].as_u64().unwrap()).sum();
    assert!(total >= 9_900, "{res}");
}
