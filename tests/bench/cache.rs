//! The response cache's per-request costs against the real stores, through the same shared
//! functions the proxy calls: local embedding of one prompt; an L2 hit (one Redis round trip,
//! GET + PTTL pipelined, then decompression); an L3 lookup (embedding plus the pgvector query,
//! with the organization holding many entries in its scope, then the same-question check). Prints
//! p50/p99. Run through `tests/bench/cache.sh`.
//!
//! Usage: cache-bench DATABASE_URL REDIS_URL MODEL_DIR [lookups] [l3-entries]

use std::time::{Duration, Instant};

use bytes::Bytes;
use gw_shared::cache::embed::LocalEmbedder;
use gw_shared::cache::entry::{Entry, Meta, StoredUsage};
use gw_shared::cache::key;
use gw_shared::cache::verify;
use gw_shared::db::{cache as db_cache, orgs};
use rust_decimal::Decimal;
use serde_json::json;
use uuid::Uuid;

fn pct(samples: &mut [Duration], p: f64) -> f64 {
    samples.sort();
    let i = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[i].as_secs_f64() * 1e6
}

fn report(name: &str, samples: &mut [Duration]) {
    println!(
        "{name:<44} p50 {:>9.1} µs   p99 {:>9.1} µs   (n={})",
        pct(samples, 0.5),
        pct(samples, 0.99),
        samples.len()
    );
}

const TOPICS: &[&str] = &[
    "reverse a list in Python",
    "sort an array in JavaScript",
    "the capital of Australia",
    "boil an egg",
    "convert miles to kilometers",
    "write a haiku about autumn",
    "the side effects of ibuprofen",
    "open a file in Rust",
    "center a div in CSS",
    "a visa for Japan",
    "the French Revolution",
    "compound interest",
];

fn prompt(i: usize) -> String {
    format!("Question {i}: how do I deal with {} when the input has {} items?", TOPICS[i % TOPICS.len()], i % 97)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (db_url, redis_url, dir) = (&args[1], &args[2], &args[3]);
    let n: usize = args.get(4).and_then(|s| s.parse().ok()).unwrap_or(1000);
    let entries: usize = args.get(5).and_then(|s| s.parse().ok()).unwrap_or(10_000);

    let started = Instant::now();
    let embedder = LocalEmbedder::load(std::path::Path::new(dir)).expect("load the embedding model");
    println!("model loaded in {:?}", started.elapsed());
    let mut embed_times = Vec::with_capacity(n);
    let mut vectors = Vec::with_capacity(n);
    for i in 0..n {
        let p = prompt(i);
        let t = Instant::now();
        let v = embedder.embed(&p).expect("embed");
        embed_times.push(t.elapsed());
        vectors.push(v);
    }
    report("embedding one prompt (all-MiniLM-L6-v2)", &mut embed_times);

    // L2: one entry of a typical answer size, read back as a hit.
    let body = json!({"id": "chatcmpl-x", "object": "chat.completion", "created": 1, "model": "bench",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "word ".repeat(120), "refusal": null},
        "logprobs": null, "finish_reason": "stop"}], "usage": {"prompt_tokens": 20, "completion_tokens": 120, "total_tokens": 140}});
    let entry = Entry {
        body: Bytes::from(serde_json::to_vec(&body).unwrap_or_default()),
        meta: Meta {
            usage: StoredUsage { prompt_tokens: 20, completion_tokens: 120, ..Default::default() },
            cost: Decimal::new(81, 6),
            provider: "bench-upstream".into(),
            upstream_model: "bench".into(),
            created_at: 0,
        },
    };
    let data = entry.encode().expect("encode");
    println!("entry: {} bytes of answer, {} bytes stored", entry.body.len(), data.len());
    let client = redis::Client::open(redis_url.as_str()).expect("redis url");
    let mut conn = redis::aio::ConnectionManager::new(client).await.expect("redis");
    let org = Uuid::now_v7();
    let k = key::exact(org, "/v1/chat/completions", json!({"model": "bench", "messages": []}).as_object().unwrap());
    let rk = k.redis_key();
    let _: () = redis::cmd("SET").arg(&rk).arg(&data).arg("PX").arg(600_000).query_async(&mut conn).await.expect("set");
    let mut l2 = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let mut pipe = redis::pipe();
        pipe.get(&rk).cmd("PTTL").arg(&rk);
        let (got, _ttl): (Option<Vec<u8>>, i64) = pipe.query_async(&mut conn).await.expect("get");
        let e = Entry::decode(&got.expect("hit")).expect("decode");
        std::hint::black_box(e);
        l2.push(t.elapsed());
    }
    report("L2 hit (GET+PTTL round trip, decompress)", &mut l2);
    let _: () = redis::cmd("DEL").arg(&rk).query_async(&mut conn).await.expect("del");

    // L3: an organization with `entries` entries in one scope, looked up with new prompts.
    let pool = gw_shared::db::pool(&gw_shared::config::DatabaseConfig::at(db_url), 2).expect("pool");
    let mut db = pool.get().await.expect("db");
    orgs::insert(&mut db, &orgs::NewOrganization { id: org, name: "cache bench" }).await.expect("org");
    let scope = [9u8; 32];
    let t = Instant::now();
    for i in 0..entries {
        let v = match vectors.get(i) {
            Some(v) => v.clone(),
            None => embedder.embed(&prompt(i)).expect("embed"),
        };
        let row = db_cache::NewSemantic {
            id: Uuid::now_v7(),
            org_id: org,
            model: "bench",
            scope: &scope,
            embedding: v,
            prompt: &prompt(i),
            answer: &data,
            ttl: Duration::from_secs(3600),
        };
        db_cache::insert_semantic(&mut db, row).await.expect("insert");
    }
    println!("{entries} semantic entries written in {:?}", t.elapsed());
    let mut l3 = Vec::with_capacity(n);
    let mut query_only = Vec::with_capacity(n);
    let mut hits = 0;
    for i in 0..n {
        // A rewording of a stored prompt: same content words, other framing.
        let asked = format!(
            "Question {i}: can you tell me how to deal with {} when the input has {} items",
            TOPICS[i % TOPICS.len()],
            i % 97
        );
        let t = Instant::now();
        let v = embedder.embed(&asked).expect("embed");
        let q = Instant::now();
        let near = db_cache::nearest(&mut db, org, &scope, &v, 0.9, 5).await.expect("nearest");
        query_only.push(q.elapsed());
        let terms = verify::terms(&asked);
        if near.iter().any(|nb| verify::same_question(&terms, &verify::terms(&nb.prompt))) {
            hits += 1;
        }
        l3.push(t.elapsed());
    }
    report(&format!("L3 query alone ({entries} entries in scope)"), &mut query_only);
    report("L3 lookup (embedding + query + check)", &mut l3);
    println!("L3 hits {hits}/{n}");
    let purged = db_cache::purge(&mut db, org, None).await.expect("purge");
    println!("purged {purged}");
}
