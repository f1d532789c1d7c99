//! A provider kind added from outside the proxy: the adapter below (a made-up "shout" protocol
//! with its own request shape, its own stream event types and its own usage fields) is defined
//! in this test and registered with the proxy library, whose code is untouched. A plain and a
//! streamed completion go through the whole pipeline (auth, team, parse, validation, route,
//! relay, respond, audit) to a real HTTP upstream speaking that protocol.

use std::sync::OnceLock;

use actix_web::{post, web, App, HttpResponse, HttpServer};
use bytes::Bytes;
use gw_shared::config::Config;
use gw_shared::openai::{message_role, message_text};
use gw_shared::pricing::TokenUsage;
use gw_shared::providers::{
    default_error, Adapter, AdapterError, Call, Completion, Exchange, Flow, Registry, StreamSetup, StreamSink,
    StreamTranslator, UpstreamError, UpstreamRequest,
};
use gw_tests::{db, free_port, header, sse_data, user_message, wait_up, Stack, GW_HEADERS};
use serde_json::{json, Value};

/// The "shout" protocol: `POST {base}/generate` with `x-shout-key`, body
/// `{"engine","input","stream"}`; answers `{"output","tokens_in","tokens_out"}`, or a stream of
/// `event: piece` (`{"text"}`) events closed by one `event: end` (`{"tokens_in","tokens_out"}`).
struct ShoutAdapter;

impl Adapter for ShoutAdapter {
    fn build(&self, call: &Call<'_>) -> Result<Exchange, AdapterError> {
        let input = call
            .request
            .messages()
            .iter()
            .rev()
            .find(|m| message_role(m) == "user")
            .map(message_text)
            .unwrap_or_default();
        let body = json!({"engine": call.upstream_model, "input": input, "stream": call.request.stream});
        let key = call.api_key.ok_or_else(|| AdapterError::Config("shout needs a key".into()))?;
        Ok(Exchange::Http(UpstreamRequest {
            path: format!("{}/generate", call.base_path),
            headers: vec![(
                http::HeaderName::from_static("x-shout-key"),
                http::HeaderValue::from_str(key).map_err(|e| AdapterError::Config(e.to_string()))?,
            )],
            body: Bytes::from(body.to_string()),
        }))
    }

    fn parse_response(&self, call: &Call<'_>, body: &[u8]) -> Result<Completion, UpstreamError> {
        let v: Value = serde_json::from_slice(body).map_err(|e| UpstreamError::bad_response(e.to_string()))?;
        let text = v["output"].as_str().ok_or_else(|| UpstreamError::bad_response("no output"))?;
        let usage = usage(&v);
        let completion = json!({
            "id": call.completion_id(), "object": "chat.completion", "created": call.created,
            "model": call.upstream_model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text, "refusal": null},
                         "logprobs": null, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
                      "total_tokens": usage.total()},
        });
        Ok(Completion { body: Bytes::from(completion.to_string()), usage: Some(usage) })
    }

    fn stream(&self, setup: StreamSetup) -> Box<dyn StreamTranslator> {
        Box::new(ShoutStream { setup, started: false })
    }

    fn map_error(&self, status: u16, body: &[u8]) -> UpstreamError {
        default_error(status, body)
    }
}

fn usage(v: &Value) -> TokenUsage {
    TokenUsage {
        prompt_tokens: v["tokens_in"].as_u64().unwrap_or(0) as u32,
        completion_tokens: v["tokens_out"].as_u64().unwrap_or(0) as u32,
        ..Default::default()
    }
}

struct ShoutStream {
    setup: StreamSetup,
    started: bool,
}

impl ShoutStream {
    fn chunk(&self, delta: Value, finish: Value) -> Value {
        json!({"id": self.setup.completion_id, "object": "chat.completion.chunk", "created": self.setup.created,
               "model": self.setup.model, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    }
}

impl StreamTranslator for ShoutStream {
    fn event(&mut self, event: &str, data: &str, out: &mut StreamSink) -> Result<Flow, UpstreamError> {
        let v: Value = serde_json::from_str(data).map_err(|e| UpstreamError::bad_response(e.to_string()))?;
        let json_err = |e: serde_json::Error| UpstreamError::bad_response(e.to_string());
        match event {
            "piece" => {
                if !self.started {
                    self.started = true;
                    out.push_json(&self.chunk(json!({"role": "assistant", "content": ""}), Value::Null))
                        .map_err(json_err)?;
                }
                let text = v["text"].as_str().unwrap_or_default();
                out.push_json(&self.chunk(json!({"content": text}), Value::Null)).map_err(json_err)?;
                Ok(Flow::Continue)
            }
            "end" => {
                let u = usage(&v);
                out.usage = Some(u);
                out.push_json(&self.chunk(json!({}), json!("stop"))).map_err(json_err)?;
                if self.setup.include_usage {
                    let mut last = self.chunk(json!({}), Value::Null);
                    last["choices"] = json!([]);
                    last["usage"] = json!({"prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens,
                                           "total_tokens": u.total()});
                    out.push_json(&last).map_err(json_err)?;
                }
                Ok(Flow::Done)
            }
            other => Err(UpstreamError::bad_response(format!("unknown shout event {other:?}"))),
        }
    }
}

#[post("/shout/generate")]
async fn generate(req: actix_web::HttpRequest, body: web::Json<Value>) -> HttpResponse {
    if req.headers().get("x-shout-key").and_then(|v| v.to_str().ok()) != Some("shout-secret") {
        return HttpResponse::Unauthorized().finish();
    }
    let input = body["input"].as_str().unwrap_or_default().to_uppercase();
    let words: Vec<String> = input.split_whitespace().map(|w| format!("{w}!")).collect();
    let (tokens_in, tokens_out) = (words.len() + 1, words.len());
    if body["stream"].as_bool() != Some(true) {
        return HttpResponse::Ok()
            .json(json!({"output": words.join(" "), "tokens_in": tokens_in, "tokens_out": tokens_out}));
    }
    let mut events: Vec<String> = words
        .iter()
        .enumerate()
        .map(|(i, w)| {
            let text = if i == 0 { w.clone() } else { format!(" {w}") };
            format!("event: piece\ndata: {}\n\n", json!({"text": text}))
        })
        .collect();
    events.push(format!("event: end\ndata: {}\n\n", json!({"tokens_in": tokens_in, "tokens_out": tokens_out})));
    let stream = futures::stream::iter(events.into_iter().map(|e| Ok::<_, actix_web::Error>(Bytes::from(e))));
    HttpResponse::Ok().content_type("text/event-stream").streaming(stream)
}

struct Shout {
    proxy: String,
}

/// The shout upstream and a proxy library instance with the shout adapter registered, once per
/// test binary (both run on their own threads until the binary exits).
fn shout() -> &'static Shout {
    static SHOUT: OnceLock<Shout> = OnceLock::new();
    SHOUT.get_or_init(|| {
        let upstream_port = free_port();
        std::thread::spawn(move || {
            let sys = actix_web::rt::System::new();
            let server = HttpServer::new(|| App::new().service(generate)).workers(1).bind(("127.0.0.1", upstream_port));
            if let Ok(server) = server {
                let _ = sys.block_on(server.run());
            }
        });
        let (proxy_port, metrics_port, admin_port) = (free_port(), free_port(), free_port());
        let extra = format!(
            r#"
[[providers]]
name = "shouter"
kind = "shout"
base_url = "http://127.0.0.1:{upstream_port}/shout"
api_key_env = "GW_TEST_SHOUT_KEY"
[[models]]
name = "shout-model"
deployments = [{{ provider = "shouter", model = "shout-1" }}]
[pricing."shout-1"]
input_per_mtok = "1"
output_per_mtok = "2"
"#
        );
        let text = gw_tests::config_text(
            "http://127.0.0.1:1",
            &gw_tests::database_url(),
            (proxy_port, metrics_port, admin_port),
            "audit_flush_interval_ms = 20",
            &extra,
        );
        let cfg = Config::parse(&text, |k| (k == "GW_TEST_SHOUT_KEY").then(|| "shout-secret".to_string()))
            .expect("shout config");
        let mut registry = Registry::builtin();
        registry.register("shout", std::sync::Arc::new(ShoutAdapter));
        std::thread::spawn(move || {
            if let Err(e) = gw_proxy::run(cfg, registry) {
                eprintln!("embedded proxy failed: {e}");
            }
        });
        Shout { proxy: format!("http://127.0.0.1:{proxy_port}") }
    })
}

async fn chat(key: &str, body: Value) -> reqwest::Response {
    let shout = shout();
    let http = reqwest::Client::new();
    wait_up(&http, &format!("{}/v1/models", shout.proxy)).await;
    http.post(format!("{}/v1/chat/completions", shout.proxy)).bearer_auth(key).json(&body).send().await.unwrap()
}

#[tokio::test]
async fn plain_completion_through_a_provider_defined_in_the_test() {
    let stack = Stack::shared().await;
    let (session, key, _) = stack.org_with_key().await;
    let resp = chat(&key, json!({"model": "shout-model", "messages": user_message("hello there gateway")})).await;
    assert_eq!(resp.status(), 200);
    for h in GW_HEADERS {
        assert!(resp.headers().contains_key(h), "missing {h}");
    }
    assert_eq!(header(&resp, "x-gw-provider"), "shouter");
    assert_eq!(header(&resp, "x-gw-model"), "shout-1");
    // 4 prompt tokens at $1/M and 3 completion tokens at $2/M.
    assert_eq!(header(&resp, "x-gw-cost-usd"), "0.00001");
    let id = uuid::Uuid::parse_str(header(&resp, "x-gw-request-id")).unwrap();
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["choices"][0]["message"]["content"], "HELLO! THERE! GATEWAY!");
    assert_eq!(body["usage"]["total_tokens"], 7);
    let row = db::audit_row(session.org_id, id).await;
    assert_eq!(row.provider.as_deref(), Some("shouter"));
    assert_eq!((row.prompt_tokens, row.completion_tokens), (4, 3));
    assert_eq!(row.routing[0]["outcome"], "ok");
}

#[tokio::test]
async fn streamed_completion_through_a_provider_defined_in_the_test() {
    let stack = Stack::shared().await;
    let (session, key, _) = stack.org_with_key().await;
    let resp = chat(
        &key,
        json!({"model": "shout-model", "messages": user_message("stream me now"), "stream": true,
               "stream_options": {"include_usage": true}}),
    )
    .await;
    assert_eq!(resp.status(), 200);
    assert!(header(&resp, "content-type").starts_with("text/event-stream"));
    let id = uuid::Uuid::parse_str(header(&resp, "x-gw-request-id")).unwrap();
    let data = sse_data(&resp.text().await.unwrap());
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Value> = data[..data.len() - 1].iter().map(|d| serde_json::from_str(d).unwrap()).collect();
    let text: String =
        chunks.iter().filter_map(|c| c["choices"].get(0)).filter_map(|c| c["delta"]["content"].as_str()).collect();
    assert_eq!(text, "STREAM! ME! NOW!");
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"], json!([]));
    assert_eq!(last["usage"]["total_tokens"], 7);
    let row = db::audit_row(session.org_id, id).await;
    assert!(row.stream);
    assert_eq!((row.prompt_tokens, row.completion_tokens), (4, 3));
    assert_eq!(row.cost_usd.normalize().to_string(), "0.00001");
}

#[tokio::test]
async fn validation_applies_to_the_new_provider_too() {
    let stack = Stack::shared().await;
    let (_, key, _) = stack.org_with_key().await;
    let resp = chat(&key, json!({"model": "shout-model", "messages": user_message("x"), "temperature": "hot"})).await;
    assert_eq!(resp.status(), 400);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["param"], "temperature");
}
