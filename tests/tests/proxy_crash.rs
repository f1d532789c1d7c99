//! One of three proxy replicas killed with SIGKILL under load (plain and streamed requests): only
//! the requests in flight on it fail, and every answered request keeps its audit row. The rows
//! are held back in memory on purpose (a flush interval of ten minutes), so what the killed
//! process answered exists only in its audit journal when it dies; a sibling sharing the spool
//! disk adopts its folder and writes them.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gw_tests::*;
use serde_json::{json, Value};
use uuid::Uuid;

const WORDS: usize = 20;
const CLIENTS_PER_REPLICA: usize = 8;

fn extra() -> String {
    format!(
        "[[providers]]\nname = \"slow-plain\"\nkind = \"openai\"\n\
         base_url = \"{{mock}}/k/latency_ms=150,reply_words={WORDS}/v1\"\napi_key_env = \"GW_TEST_UPSTREAM_KEY\"\n\
         [[providers]]\nname = \"slow-stream\"\nkind = \"openai\"\n\
         base_url = \"{{mock}}/k/chunk_delay_ms=20,reply_words={WORDS}/v1\"\napi_key_env = \"GW_TEST_UPSTREAM_KEY\"\n\
         [[models]]\nname = \"slow-plain\"\ndeployments = [{{ provider = \"slow-plain\", model = \"gpt-4o-mini-2024-07-18\" }}]\n\
         [[models]]\nname = \"slow-stream\"\ndeployments = [{{ provider = \"slow-stream\", model = \"gpt-4o-mini-2024-07-18\" }}]\n"
    )
}

/// How a request ended.
enum Outcome {
    /// Answered whole: its request id.
    Answered(Uuid),
    /// An answer with an error status (never expected here).
    Refused(String),
    /// The connection failed or the answer was cut (what the requests on a killed process see).
    Broken(String),
}

async fn one(http: &reqwest::Client, proxy: &str, key: &str, stream: bool) -> Outcome {
    let model = if stream { "slow-stream" } else { "slow-plain" };
    let body = json!({"model": model, "stream": stream, "messages": [{"role": "user", "content": "hi"}]});
    let r = match http.post(format!("{proxy}/v1/chat/completions")).bearer_auth(key).json(&body).send().await {
        Ok(r) => r,
        Err(e) => return Outcome::Broken(format!("send: {e:?}")),
    };
    let status = r.status();
    let id = r.headers().get("x-gw-request-id").and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok());
    let text = match r.text().await {
        Ok(t) => t,
        Err(e) => return Outcome::Broken(format!("body: {e}")),
    };
    if status != 200 {
        return Outcome::Refused(format!("{status}: {text}"));
    }
    let content = if stream {
        let data: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("data: ")).collect();
        if data.last() != Some(&"[DONE]") {
            return Outcome::Broken(format!("a stream cut short: {text}"));
        }
        let mut content = String::new();
        for d in &data[..data.len() - 1] {
            let Ok(chunk) = serde_json::from_str::<Value>(d) else {
                return Outcome::Refused(format!("a broken event: {d}"));
            };
            content.push_str(chunk["choices"][0]["delta"]["content"].as_str().unwrap_or_default());
        }
        content
    } else {
        match serde_json::from_str::<Value>(&text) {
            Ok(v) => v["choices"][0]["message"]["content"].as_str().unwrap_or_default().to_string(),
            Err(e) => return Outcome::Broken(format!("{e}: {text}")),
        }
    };
    match id {
        Some(id) if content.split_whitespace().count() == WORDS => Outcome::Answered(id),
        _ => Outcome::Refused(format!("an answer not whole or without its id: {content:?}")),
    }
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
}

async fn signal_and_wait(signal: &str, pid: u32) {
    let sent = std::process::Command::new("kill").args([signal, &pid.to_string()]).status().unwrap();
    assert!(sent.success(), "kill {signal} {pid}");
    let deadline = Instant::now() + Duration::from_secs(45);
    while alive(pid) {
        assert!(Instant::now() < deadline, "process {pid} never exited after {signal}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn killing_one_of_three_replicas_fails_only_its_requests_in_flight_and_loses_no_audit_row() {
    let stack = Stack::start_with(StackOptions {
        extra_config: extra(),
        // Nothing is flushed until a process stops: every answered row is in memory (and in the
        // journal) when the replica is killed.
        proxy_config: "audit_flush_interval_ms = 600000\naudit_batch_size = 10000\n\
                       audit_channel_capacity = 100000\nauth_failures_per_minute = 1000000"
            .into(),
        ..Default::default()
    })
    .await;
    let (s, key, _) = stack.org_with_key().await;
    let (victim, victim_url) = stack.proxy_replica_sharing_spool().await;
    let (survivor, survivor_url) = stack.proxy_replica_sharing_spool().await;
    let replicas = [stack.proxy.clone(), victim_url, survivor_url];

    let stop = Arc::new(AtomicBool::new(false));
    let http = reqwest::Client::builder().timeout(Duration::from_secs(60)).build().unwrap();
    let mut workers = Vec::new();
    for (r, url) in replicas.iter().enumerate() {
        for c in 0..CLIENTS_PER_REPLICA {
            let (http, url, key, stop) = (http.clone(), url.clone(), key.clone(), stop.clone());
            let stream = c % 2 == 1;
            workers.push((
                r,
                tokio::spawn(async move {
                    let mut outcomes = Vec::new();
                    while !stop.load(Ordering::Relaxed) {
                        let outcome = one(&http, &url, &key, stream).await;
                        let broken = matches!(outcome, Outcome::Broken(_));
                        outcomes.push(outcome);
                        if broken {
                            break; // its replica is gone: this client's requests end here
                        }
                    }
                    outcomes
                }),
            ));
        }
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(db::audit_count(s.org_id).await, 0, "nothing is flushed before a process stops");
    signal_and_wait("-KILL", victim.pid()).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::Relaxed);

    let mut answered: Vec<HashSet<Uuid>> = vec![HashSet::new(); 3];
    let mut broken: Vec<Vec<String>> = vec![Vec::new(); 3];
    let mut refused = Vec::new();
    for (r, w) in workers {
        for outcome in w.await.unwrap() {
            match outcome {
                Outcome::Answered(id) => {
                    answered[r].insert(id);
                }
                Outcome::Broken(e) => broken[r].push(e),
                Outcome::Refused(e) => refused.push(e),
            }
        }
    }
    eprintln!(
        "answered per replica {:?}; broken on the killed one: {:?}",
        answered.iter().map(HashSet::len).collect::<Vec<_>>(),
        broken[1]
    );
    assert!(refused.is_empty(), "answers with an error: {refused:?}");
    assert!(broken[0].is_empty() && broken[2].is_empty(), "the surviving replicas failed: {broken:?}");
    // Each of the killed replica's clients had at most its one request in flight there.
    assert!(
        (1..=CLIENTS_PER_REPLICA).contains(&broken[1].len()),
        "{} failures on the killed replica: {:?}",
        broken[1].len(),
        broken[1]
    );
    assert!(
        answered.iter().all(|a| a.len() >= 8),
        "too little load: {:?}",
        answered.iter().map(HashSet::len).collect::<Vec<_>>()
    );

    // A survivor adopts the dead process's spool folder and writes its journaled rows.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let ids = db::audit_ids(s.org_id).await;
        let missing = answered[1].difference(&ids).count();
        if missing == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{missing} of the killed replica's {} answered rows never appeared",
            answered[1].len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The survivors stop and write their own.
    signal_and_wait("-TERM", survivor.pid()).await;
    stack.terminate_proxy().await;
    let ids = db::audit_ids(s.org_id).await;
    let all: HashSet<Uuid> = answered.iter().flatten().copied().collect();
    let missing: Vec<_> = all.difference(&ids).collect();
    assert!(missing.is_empty(), "{} of {} answered requests have no audit row", missing.len(), all.len());
    // Rows beyond the answered ones: requests the killed process had finished but whose last bytes
    // never reached their client.
    assert!(ids.len() <= all.len() + broken[1].len(), "{} rows for {} answered requests", ids.len(), all.len());
}
