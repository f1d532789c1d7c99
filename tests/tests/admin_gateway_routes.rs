//! The route catalog as data (`/api/v1/gateway`): models and providers added, changed and removed
//! through the API reach every running proxy through the invalidation channel, without a
//! restart; a broken change is refused with its path and changes nothing; a version a proxy
//! cannot load leaves its last good one in use, said in its metrics; a stream under way finishes
//! on the routes it started with; `SIGHUP` reloads the file's routes. Each test runs its stacks
//! on a database of its own, since the catalog is gateway-wide.

use std::time::{Duration, Instant};

use gw_tests::{db, expect_api_error, json_of, mock_chat, sse_data, Session, Stack, StackOptions};
use serde_json::{json, Value};

/// Proxies poll the catalog only every 10 minutes here: a change they apply at once came
/// through the invalidation channel.
const PUSHED_ONLY: &str =
    "routes = \"database\"\nroutes_poll_ms = 600000\ncircuit_failures = 1000000\nhealth_check_interval_ms = 0";

async fn catalog_stack(routing: &str) -> Stack {
    Stack::start_with(StackOptions {
        database_url: Some(db::fresh_database().await),
        routing_config: Some(routing.to_string()),
        ..Default::default()
    })
    .await
}

fn etag(resp: &reqwest::Response) -> i64 {
    let v = resp.headers().get("etag").expect("an ETag").to_str().unwrap();
    v.trim_matches('"').parse().expect("a version")
}

async fn catalog_version(stack: &Stack, op: &Session) -> i64 {
    let resp = stack.admin_get("/gateway/routes", &op.access_token).await;
    assert_eq!(resp.status(), 200);
    etag(&resp)
}

fn new_model(name: &str) -> Value {
    json!({"name": name, "deployments": [{"provider": "mock", "model": "made-up-upstream",
        "price": {"input_per_mtok": "1", "output_per_mtok": "2"}}]})
}

/// Sends a chat for `model` to `proxy` until its status is `want` (at most 10 s); answers how
/// long that took.
async fn until_status(stack: &Stack, proxy: &str, key: &str, model: &str, want: u16) -> Duration {
    let started = Instant::now();
    loop {
        let mut body = mock_chat("hello");
        body["model"] = json!(model);
        let status = stack.chat_with(proxy, key, &body, &[]).await.status().as_u16();
        if status == want {
            return started.elapsed();
        }
        assert!(started.elapsed() < Duration::from_secs(10), "{proxy} still answers {status} for {model}, not {want}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_model_added_is_served_by_three_proxies_and_a_removed_one_answers_404() {
    let stack = catalog_stack(PUSHED_ONLY).await;
    let (_r1, replica1) = stack.proxy_replica().await;
    let (_r2, replica2) = stack.proxy_replica().await;
    let proxies = [stack.proxy.clone(), replica1, replica2];
    let op = stack.operator().await;
    let (key, _) = stack.key_with(&op, json!({})).await;
    for p in &proxies {
        until_status(&stack, p, &key, "fresh-model", 404).await;
    }

    let resp = stack.admin_post("/gateway/models", &op.access_token, &new_model("fresh-model")).await;
    let version = etag(&resp);
    let created = json_of(resp, 201).await;
    assert_eq!(version, 2, "the seed is version 1");
    assert!(created["deployments"][0]["id"].is_string(), "{created}");
    for p in &proxies {
        let took = until_status(&stack, p, &key, "fresh-model", 200).await;
        println!("{p} served the new model after {took:?}");
    }
    let answer = json_of(
        stack
            .chat_with(
                &proxies[2],
                &key,
                &json!({"model": "fresh-model",
        "messages": [{"role": "user", "content": "hi"}]}),
                &[],
            )
            .await,
        200,
    )
    .await;
    assert_eq!(answer["model"], "made-up-upstream", "{answer}");

    let resp = stack.admin_delete("/gateway/models/fresh-model", &op.access_token).await;
    assert_eq!(resp.status(), 204);
    assert_eq!(etag(&resp), 3);
    for p in &proxies {
        until_status(&stack, p, &key, "fresh-model", 404).await;
    }
    let models =
        json_of(stack.http.get(format!("{}/v1/models", proxies[1])).bearer_auth(&key).send().await.unwrap(), 200).await;
    assert!(!models.to_string().contains("fresh-model"), "{models}");

    // The history keeps every version; restoring one writes it again as the newest.
    let versions = json_of(stack.admin_get("/gateway/routes/versions?limit=2", &op.access_token).await, 200).await;
    let changes: Vec<&str> =
        versions["data"].as_array().unwrap().iter().map(|v| v["change"].as_str().unwrap()).collect();
    assert_eq!(changes, ["gateway_model.delete fresh-model", "gateway_model.create fresh-model"]);
    assert_eq!(versions["next_cursor"], "2");
    let rest = json_of(stack.admin_get("/gateway/routes/versions?cursor=2", &op.access_token).await, 200).await;
    assert_eq!(rest["data"][0]["version"], 1);
    assert_eq!(rest["next_cursor"], Value::Null);
    let resp = stack.admin_post("/gateway/routes/versions/2/restore", &op.access_token, &json!({})).await;
    assert_eq!(etag(&resp), 4);
    for p in &proxies {
        until_status(&stack, p, &key, "fresh-model", 200).await;
    }
}

#[tokio::test]
async fn a_broken_change_is_refused_with_its_path_and_changes_nothing() {
    let stack = catalog_stack(PUSHED_ONLY).await;
    let op = stack.operator().await;
    let (key, _) = stack.key_with(&op, json!({})).await;
    let before = catalog_version(&stack, &op).await;

    let mut bad = new_model("broken");
    bad["deployments"][0]["provider"] = json!("nope");
    let body = expect_api_error(stack.admin_post("/gateway/models", &op.access_token, &bad).await, 400).await;
    insta::assert_json_snapshot!(body, @r#"
    {
      "error": {
        "code": "validation_error",
        "fields": [
          {
            "field": "models[12].deployments[0].provider",
            "message": "model \"broken\" uses unknown provider \"nope\""
          }
        ],
        "message": "models[12].deployments[0].provider: model \"broken\" uses unknown provider \"nope\""
      }
    }
    "#);

    let body = expect_api_error(
        stack.admin_patch("/gateway/models/mock-model", &op.access_token, &json!({"fallbacks": ["mock-model"]})).await,
        400,
    )
    .await;
    insta::assert_json_snapshot!(body, @r#"
    {
      "error": {
        "code": "validation_error",
        "fields": [
          {
            "field": "models[1].fallbacks[0]",
            "message": "model \"mock-model\" lists itself as a fallback"
          }
        ],
        "message": "models[1].fallbacks[0]: model \"mock-model\" lists itself as a fallback"
      }
    }
    "#);

    let unpriced = json!({"name": "unpriced", "deployments": [{"provider": "mock", "model": "nobody-prices-this"}]});
    let body = expect_api_error(stack.admin_post("/gateway/models", &op.access_token, &unpriced).await, 400).await;
    insta::assert_json_snapshot!(body, @r#"
    {
      "error": {
        "code": "validation_error",
        "fields": [
          {
            "field": "models[12].deployments[0].price",
            "message": "model \"unpriced\": upstream model \"nobody-prices-this\" is not in the catalog and has no [pricing] entry (give it a price)"
          }
        ],
        "message": "models[12].deployments[0].price: model \"unpriced\": upstream model \"nobody-prices-this\" is not in the catalog and has no [pricing] entry (give it a price)"
      }
    }
    "#);

    // Only OpenAI-compatible providers speak the Responses API.
    let body = expect_api_error(
        stack.admin_patch("/gateway/providers/anthropic", &op.access_token, &json!({"responses_api": true})).await,
        400,
    )
    .await;
    insta::assert_json_snapshot!(body, @r#"
    {
      "error": {
        "code": "validation_error",
        "fields": [
          {
            "field": "providers[3].responses_api",
            "message": "provider \"anthropic\": only openai providers serve the Responses API"
          }
        ],
        "message": "providers[3].responses_api: provider \"anthropic\": only openai providers serve the Responses API"
      }
    }
    "#);

    let body = expect_api_error(stack.admin_delete("/gateway/providers/upstream", &op.access_token).await, 409).await;
    insta::assert_json_snapshot!(body, @r#"
    {
      "error": {
        "code": "conflict",
        "fields": [],
        "message": "provider \"upstream\" serves models gpt-4o-mini, fallback-model, text-embedding-3-small: remove or move their deployments first"
      }
    }
    "#);

    assert_eq!(catalog_version(&stack, &op).await, before, "nothing was written");
    until_status(&stack, &stack.proxy, &key, "mock-model", 200).await;
    until_status(&stack, &stack.proxy, &key, "broken", 404).await;
}

#[tokio::test]
async fn a_write_on_a_stale_version_is_refused() {
    let stack = catalog_stack(PUSHED_ONLY).await;
    let op = stack.operator().await;
    let version = catalog_version(&stack, &op).await;
    let resp = stack.admin_post("/gateway/models", &op.access_token, &new_model("first")).await;
    assert_eq!(resp.status(), 201);
    let stale = stack
        .http
        .post(format!("{}/api/v1/gateway/models", stack.admin))
        .bearer_auth(&op.access_token)
        .header("If-Match", format!("\"{version}\""))
        .json(&new_model("second"))
        .send()
        .await
        .unwrap();
    let body = expect_api_error(stale, 409).await;
    insta::assert_json_snapshot!(body, @r#"
    {
      "error": {
        "code": "conflict",
        "fields": [],
        "message": "the catalog is at version 2, not 1: read it again and retry"
      }
    }
    "#);
    let fresh = stack
        .http
        .post(format!("{}/api/v1/gateway/models", stack.admin))
        .bearer_auth(&op.access_token)
        .header("If-Match", format!("\"{}\"", version + 1))
        .json(&new_model("second"))
        .send()
        .await
        .unwrap();
    assert_eq!(fresh.status(), 201);
}

#[tokio::test]
async fn a_version_a_proxy_cannot_load_leaves_the_last_good_one_in_use() {
    // Polling often: the bad version below is written behind the API's back, without a message.
    let stack = catalog_stack("routes = \"database\"\nroutes_poll_ms = 100\nhealth_check_interval_ms = 0").await;
    let op = stack.operator().await;
    let (key, _) = stack.key_with(&op, json!({})).await;
    let resp = stack.admin_post("/gateway/models", &op.access_token, &new_model("kept")).await;
    assert_eq!(resp.status(), 201);
    until_status(&stack, &stack.proxy, &key, "kept", 200).await;
    assert_eq!(stack.proxy_metric("gw_proxy_routes_version ").await, 2.0);

    // A version this proxy cannot read (as from a newer gw writing a field it does not know).
    {
        use diesel_async::{AsyncConnection, RunQueryDsl};
        let config = std::fs::read_to_string(stack.config_path()).unwrap();
        // The database itself, not the PgBouncer gw may reach it through (a plain driver's
        // prepared statements do not survive a transaction pooler).
        let url =
            |key: &str| config.lines().find_map(|l| l.strip_prefix(&format!("{key} = \"postgres")).map(str::to_string));
        let url = url("direct_url").or_else(|| url("url")).unwrap();
        let url = url.trim_end_matches('"');
        let mut conn = diesel_async::AsyncPgConnection::establish(&format!("postgres{url}")).await.unwrap();
        diesel::sql_query(
            "INSERT INTO route_catalog_versions (version, routes, change) VALUES (3, '{\"providers\": [], \"models\": [], \"shards\": 4}', 'manual')",
        )
        .execute(&mut conn)
        .await
        .unwrap();
    }
    let started = Instant::now();
    while stack.proxy_metric("gw_proxy_routes_latest_version ").await < 3.0 {
        assert!(started.elapsed() < Duration::from_secs(10), "the proxy never saw version 3");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    while stack.proxy_metric("gw_proxy_routes_reload_failures_total ").await < 1.0 {
        assert!(started.elapsed() < Duration::from_secs(10), "the failure was not counted");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(stack.proxy_metric("gw_proxy_routes_version ").await, 2.0, "still on the last good version");
    until_status(&stack, &stack.proxy, &key, "kept", 200).await;

    // The operator puts a good version back: the proxy takes it.
    let resp = stack.admin_post("/gateway/routes/versions/1/restore", &op.access_token, &json!({})).await;
    assert_eq!(etag(&resp), 4);
    until_status(&stack, &stack.proxy, &key, "kept", 404).await;
}

#[tokio::test]
async fn a_stream_under_way_finishes_while_its_model_changes() {
    let stack = catalog_stack(PUSHED_ONLY).await;
    let op = stack.operator().await;
    let (key, _) = stack.key_with(&op, json!({})).await;
    let model = json!({"name": "streamed", "strategy": "weighted", "deployments": [
        {"provider": "upstream", "model": "gpt-4o-mini", "weight": 1},
        {"provider": "upstream", "model": "gpt-4o-mini-2024-07-18", "weight": 1}]});
    let created = json_of(stack.admin_post("/gateway/models", &op.access_token, &model).await, 201).await;
    until_status(&stack, &stack.proxy, &key, "streamed", 200).await;

    let body = json!({"model": "streamed", "stream": true, "messages": [{"role": "user", "content": "hi"}],
        "mock": {"reply": "one two three four five six seven eight", "chunk_delay_ms": 150}});
    let mut resp = stack.chat_with(&stack.proxy, &key, &body, &[]).await;
    assert_eq!(resp.status(), 200);
    let first = resp.chunk().await.unwrap().expect("a first chunk");
    let mut text = String::from_utf8_lossy(&first).to_string();

    // While it streams: a weight changes, then the model goes away altogether.
    let dep = created["deployments"][0]["id"].as_str().unwrap();
    let path = format!("/gateway/models/streamed/deployments/{dep}");
    let resp2 = stack.admin_patch(&path, &op.access_token, &json!({"weight": 5})).await;
    assert_eq!(resp2.status(), 200);
    let resp3 = stack.admin_delete("/gateway/models/streamed", &op.access_token).await;
    assert_eq!(resp3.status(), 204);
    until_status(&stack, &stack.proxy, &key, "streamed", 404).await;

    while let Some(chunk) = resp.chunk().await.unwrap() {
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    let data = sse_data(&text);
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"), "{text}");
    let words: String = gw_tests::delta_text(&gw_tests::sse_json(&data[..data.len() - 1]));
    assert_eq!(words, "one two three four five six seven eight");
}

#[tokio::test]
async fn sighup_reloads_the_file_and_api_writes_are_refused_while_it_rules() {
    let stack = Stack::start_with(StackOptions {
        database_url: Some(db::fresh_database().await),
        routing_config: Some("health_check_interval_ms = 0".into()),
        ..Default::default()
    })
    .await;
    let op = stack.operator().await;
    let (key, _) = stack.key_with(&op, json!({})).await;
    let body =
        expect_api_error(stack.admin_post("/gateway/models", &op.access_token, &new_model("x")).await, 409).await;
    insta::assert_json_snapshot!(body, @r#"
    {
      "error": {
        "code": "conflict",
        "fields": [],
        "message": "routes come from the configuration file (routing.routes = \"file\"): edit it and send SIGHUP to the proxies, or set routing.routes = \"database\" to manage them here"
      }
    }
    "#);
    let routes = json_of(stack.admin_get("/gateway/routes", &op.access_token).await, 200).await;
    assert_eq!((routes["version"].as_i64(), routes["source"].as_str()), (Some(0), Some("file")));

    until_status(&stack, &stack.proxy, &key, "hup-model", 404).await;
    let path = stack.config_path().to_path_buf();
    let original = std::fs::read_to_string(&path).unwrap();
    let added = format!(
        "{original}\n[[models]]\nname = \"hup-model\"\ndeployments = [{{ provider = \"mock\", model = \"gpt-4o-mini\" }}]\n"
    );
    std::fs::write(&path, added).unwrap();
    let hup = || {
        let pid = stack.proxy_pid.unwrap().to_string();
        assert!(std::process::Command::new("kill").args(["-HUP", &pid]).status().unwrap().success());
    };
    hup();
    until_status(&stack, &stack.proxy, &key, "hup-model", 200).await;
    let reloads = stack.proxy_metric("gw_proxy_routes_reloads_total ").await;

    // A broken file: refused, counted, the routes in use stay.
    std::fs::write(&path, format!("{original}\n[[models]]\nname = \"half\"\n")).unwrap();
    hup();
    let started = Instant::now();
    while stack.proxy_metric("gw_proxy_routes_reload_failures_total ").await < 1.0 {
        assert!(started.elapsed() < Duration::from_secs(10), "the broken file was not counted");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(stack.proxy_metric("gw_proxy_routes_reloads_total ").await, reloads);
    until_status(&stack, &stack.proxy, &key, "hup-model", 200).await;
}

#[tokio::test]
async fn providers_are_managed_and_deployments_follow_them() {
    let stack = catalog_stack(PUSHED_ONLY).await;
    let op = stack.operator().await;
    let (key, _) = stack.key_with(&op, json!({})).await;
    let mock = format!("{}/k/tag=via-new-provider/v1", stack.mock);
    let provider = json!({"name": "second-upstream", "kind": "openai", "base_url": mock,
        "api_key_env": "GW_TEST_UPSTREAM_KEY"});
    let created = json_of(stack.admin_post("/gateway/providers", &op.access_token, &provider).await, 201).await;
    assert_eq!(created["health_check"], true);
    let dup = expect_api_error(stack.admin_post("/gateway/providers", &op.access_token, &provider).await, 409).await;
    insta::assert_json_snapshot!(dup, @r#"
    {
      "error": {
        "code": "conflict",
        "fields": [],
        "message": "provider \"second-upstream\" exists: change it with PATCH"
      }
    }
    "#);

    let model = json!({"name": "on-second", "deployments": [{"provider": "second-upstream", "model": "gpt-4o-mini"}]});
    json_of(stack.admin_post("/gateway/models", &op.access_token, &model).await, 201).await;
    until_status(&stack, &stack.proxy, &key, "on-second", 200).await;
    assert!(stack.mock_stats_for("via-new-provider").await["requests"].as_u64().unwrap() >= 1);

    // It serves the Responses API too: Responses requests pass through to it from then on.
    let patch = json!({"responses_api": true});
    let switched =
        json_of(stack.admin_patch("/gateway/providers/second-upstream", &op.access_token, &patch).await, 200).await;
    assert_eq!(switched["responses_api"], true);
    let started = Instant::now();
    loop {
        let r = reqwest::Client::new()
            .post(format!("{}/v1/responses", stack.proxy))
            .bearer_auth(&key)
            .json(&json!({"model": "on-second", "input": "Say hello"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        if stack.mock_stats_for("via-new-provider").await["last_body"]["input"] == "Say hello" {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "the switch never reached the proxy");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The provider moves (a dead address): its deployment follows at once.
    let moved = json_of(
        stack
            .admin_patch(
                "/gateway/providers/second-upstream",
                &op.access_token,
                &json!({"base_url": gw_tests::dead_url()}),
            )
            .await,
        200,
    )
    .await;
    assert_eq!(moved["api_key_env"], "GW_TEST_UPSTREAM_KEY", "fields not sent stay");
    until_status(&stack, &stack.proxy, &key, "on-second", 502).await;

    let page = json_of(stack.admin_get("/gateway/providers?limit=2", &op.access_token).await, 200).await;
    assert_eq!(page["data"].as_array().unwrap().len(), 2);
    assert_eq!(page["next_cursor"], page["data"][1]["name"]);
    let one = json_of(stack.admin_get("/gateway/models/on-second", &op.access_token).await, 200).await;
    assert_eq!(one["deployments"][0]["model"], "gpt-4o-mini");
    let missing = expect_api_error(stack.admin_get("/gateway/providers/nope", &op.access_token).await, 404).await;
    insta::assert_json_snapshot!(missing, @r#"
    {
      "error": {
        "code": "not_found",
        "fields": [],
        "message": "provider not found"
      }
    }
    "#);
}

#[tokio::test]
async fn only_gateway_operators_manage_the_catalog() {
    let stack = catalog_stack(PUSHED_ONLY).await;
    let owner = stack.register().await;
    let body = expect_api_error(stack.admin_get("/gateway/routes", &owner.access_token).await, 403).await;
    insta::assert_json_snapshot!(body, @r#"
    {
      "error": {
        "code": "forbidden",
        "fields": [],
        "message": "this action needs the gateway operator role"
      }
    }
    "#);
    stack.admin_command(&["operator", "grant", &owner.email]);
    assert_eq!(stack.admin_get("/gateway/routes", &owner.access_token).await.status(), 200);
    stack.admin_command(&["operator", "revoke", &owner.email]);
    expect_api_error(stack.admin_get("/gateway/routes", &owner.access_token).await, 403).await;
}

#[tokio::test]
async fn an_allow_list_model_is_served_only_to_keys_that_name_it() {
    let stack = catalog_stack(PUSHED_ONLY).await;
    let op = stack.operator().await;
    let mut model = new_model("vip-model");
    model["visibility"] = json!("allow_list");
    let created = json_of(stack.admin_post("/gateway/models", &op.access_token, &model).await, 201).await;
    assert_eq!(created["visibility"], "allow_list");
    let (named, _) = stack.key_with(&op, json!({"models": ["vip-model", "mock-model"]})).await;
    let (open, _) = stack.key_with(&op, json!({})).await;
    until_status(&stack, &stack.proxy, &named, "vip-model", 200).await;
    until_status(&stack, &stack.proxy, &open, "vip-model", 404).await;
    until_status(&stack, &stack.proxy, &open, "mock-model", 200).await;
    let listed =
        json_of(stack.http.get(format!("{}/v1/models", stack.proxy)).bearer_auth(&open).send().await.unwrap(), 200)
            .await;
    assert!(!listed.to_string().contains("vip-model"), "{listed}");

    // Made public: every key may call it.
    let patched = json_of(
        stack.admin_patch("/gateway/models/vip-model", &op.access_token, &json!({"visibility": "public"})).await,
        200,
    )
    .await;
    assert!(patched.get("visibility").is_none(), "public is the default and not shown: {patched}");
    until_status(&stack, &stack.proxy, &open, "vip-model", 200).await;
}
