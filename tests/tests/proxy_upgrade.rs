//! Zero-downtime upgrade of gw-proxy (Pingora's graceful upgrade): a new process started with
//! `--upgrade` takes the listening sockets over; the old one, sent SIGQUIT, hands them over,
//! finishes what is in flight (streams included) and exits as soon as its audit rows are written.
//! Under load at 32 concurrent clients, plain and then streaming (two upgrades in a row: the new
//! process is upgraded in turn), nothing fails, every stream arrives whole, and every answered
//! request has its audit row.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gw_tests::*;
use serde_json::{json, Value};

const WORDS: usize = 20;

fn extra() -> String {
    format!(
        "[[providers]]\nname = \"slow-plain\"\nkind = \"openai\"\n\
         base_url = \"{{mock}}/k/latency_ms=150,reply_words={WORDS}/v1\"\napi_key_env = \"GW_TEST_UPSTREAM_KEY\"\n\
         [[providers]]\nname = \"slow-stream\"\nkind = \"openai\"\n\
         base_url = \"{{mock}}/k/chunk_delay_ms=40,reply_words={WORDS}/v1\"\napi_key_env = \"GW_TEST_UPSTREAM_KEY\"\n\
         [[models]]\nname = \"slow-plain\"\ndeployments = [{{ provider = \"slow-plain\", model = \"gpt-4o-mini-2024-07-18\" }}]\n\
         [[models]]\nname = \"slow-stream\"\ndeployments = [{{ provider = \"slow-stream\", model = \"gpt-4o-mini-2024-07-18\" }}]\n"
    )
}

/// One request: Ok(request id) when it was answered whole, Err(why) otherwise.
async fn one(http: &reqwest::Client, proxy: &str, key: &str, stream: bool) -> Result<String, String> {
    let model = if stream { "slow-stream" } else { "slow-plain" };
    let body = json!({"model": model, "stream": stream, "messages": [{"role": "user", "content": "hi"}]});
    let r = http
        .post(format!("{proxy}/v1/chat/completions"))
        .bearer_auth(key)
        .json(&body)
        .send()
        .await
        .map_err(|e| format!("send: {e}"))?;
    let status = r.status();
    let id = r.headers().get("x-gw-request-id").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    let text = r.text().await.map_err(|e| format!("body: {e}"))?;
    if status != 200 {
        return Err(format!("{status}: {text}"));
    }
    let content = if stream {
        let mut content = String::new();
        let data: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("data: ")).collect();
        if data.last() != Some(&"[DONE]") {
            return Err(format!("a stream cut short: {text}"));
        }
        let mut finished = false;
        for d in &data[..data.len() - 1] {
            let chunk: Value = serde_json::from_str(d).map_err(|e| format!("a broken event ({e}): {d}"))?;
            if let Some(c) = chunk["choices"][0]["delta"]["content"].as_str() {
                content.push_str(c);
            }
            finished |= chunk["choices"][0]["finish_reason"] == "stop";
        }
        if !finished {
            return Err(format!("a stream without its finish reason: {text}"));
        }
        content
    } else {
        let v: Value = serde_json::from_str(&text).map_err(|e| format!("{e}: {text}"))?;
        v["choices"][0]["message"]["content"].as_str().unwrap_or_default().to_string()
    };
    if content.split_whitespace().count() != WORDS {
        return Err(format!("an answer not whole ({content:?})"));
    }
    Ok(id)
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
}

/// Runs 32 clients (all plain, or all streaming) against the stack's address while the process
/// `old` is upgraded to a new one; returns the new one and every answered request's id.
async fn upgrade_under_load(stack: &Stack, key: &str, stream: bool, old: u32) -> (Proc, Vec<String>) {
    let stop = Arc::new(AtomicBool::new(false));
    let http = reqwest::Client::builder().timeout(Duration::from_secs(60)).build().unwrap();
    let workers: Vec<_> = (0..32)
        .map(|_| {
            let (http, proxy, key, stop) = (http.clone(), stack.proxy.clone(), key.to_string(), stop.clone());
            tokio::spawn(async move {
                let mut outcomes = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    outcomes.push(one(&http, &proxy, &key, stream).await);
                }
                outcomes
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(1)).await;

    // The new process waits on the upgrade socket; the old one hands the listeners over.
    let new = stack.proxy_upgrade();
    let text = std::fs::read_to_string(stack.config_path()).unwrap();
    let spool = text.lines().find_map(|l| l.strip_prefix("audit_spool_dir = ")).unwrap().trim_matches('"').to_string();
    let sock = std::path::Path::new(&spool).join("upgrade.sock");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !sock.exists() {
        assert!(Instant::now() < deadline, "the new process never listened on {}", sock.display());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let quit = std::process::Command::new("kill").args(["-QUIT", &old.to_string()]).status().unwrap();
    assert!(quit.success());
    // The old process finishes what it has in flight and exits.
    let deadline = Instant::now() + Duration::from_secs(45);
    while alive(old) {
        assert!(Instant::now() < deadline, "the old process never exited");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The new one alone serves a while.
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::Relaxed);
    let mut answered = Vec::new();
    let mut failed = Vec::new();
    for w in workers {
        for outcome in w.await.unwrap() {
            match outcome {
                Ok(id) => answered.push(id),
                Err(e) => failed.push(e),
            }
        }
    }
    let kind = if stream { "streamed" } else { "plain" };
    assert!(
        failed.is_empty(),
        "{} of {} {kind} requests failed: {:?}",
        failed.len(),
        answered.len() + failed.len(),
        &failed[..failed.len().min(5)]
    );
    assert!(answered.len() > 100, "only {} {kind} requests under load", answered.len());
    (new, answered)
}

#[tokio::test]
async fn a_graceful_upgrade_under_load_fails_nothing_and_cuts_no_stream() {
    let stack = Stack::start_with(StackOptions { extra_config: extra(), ..Default::default() }).await;
    let (s, key, _) = stack.org_with_key().await;
    let first = stack.proxy_pid.expect("the stack's proxy");
    let (second, plain) = upgrade_under_load(&stack, &key, false, first).await;
    let (_third, streamed) = upgrade_under_load(&stack, &key, true, second.pid()).await;
    drop(second);
    // Every answered request has its audit row (each old process wrote its own before exiting).
    let answered = plain.len() + streamed.len();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let rows = db::audit_count(s.org_id).await;
        if rows as usize == answered {
            break;
        }
        assert!(Instant::now() < deadline, "{rows} audit rows for {answered} answered requests");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
