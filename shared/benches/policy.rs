//! Guardrail costs on the request path: `pii_redact` over a 4 KB prompt (with and without values
//! to find), the whole policy step for a chat request (resolve, read the texts, run every
//! guardrail, prepare the answer's guard), a complete answer and a streamed one through the output
//! guard.
//! `cargo bench -p gw-shared --bench policy`.

use std::hint::black_box;

use bytes::BytesMut;
use criterion::{criterion_group, criterion_main, Criterion};
use gw_shared::openai::ChatRequest;
use gw_shared::policy::answer::guard_completion;
use gw_shared::policy::engine::{run_input, OutputGuard, PolicySet, RequestFacts, Segment, TeamPolicies};
use gw_shared::policy::pii::{detector, EntitySet};
use gw_shared::policy::spec::OrgPolicy;
use gw_shared::policy::stream::GuardedStream;
use gw_shared::policy::vault::Vault;
use gw_shared::providers::{ChunkFilter, Frames};

const PROSE: &str = "The quarterly report covers revenue, churn and the roadmap for next year. Our team met with \
the customer to discuss onboarding, pricing tiers and support hours; they asked about data retention and \
regional hosting. ";

/// About 4 KB of ordinary prose with `values` (e-mails, phones, a card, an IBAN) spread through it.
fn prompt(values: bool) -> String {
    let mut s = String::new();
    let extras = [
        " Contact jane.roe@example.com for details.",
        " Call +1 415 555 2671 after lunch.",
        " Card on file: 4111 1111 1111 1111.",
        " Wire to DE89 3704 0044 0532 0130 00 by Friday.",
    ];
    let mut i = 0;
    while s.len() < 4096 {
        s.push_str(PROSE);
        if values && i < extras.len() {
            s.push_str(extras[i]);
            i += 1;
        }
    }
    s.truncate(4096);
    while !s.is_char_boundary(s.len()) {
        s.pop();
    }
    s
}

fn policies() -> PolicySet {
    let doc: OrgPolicy = serde_json::from_value(serde_json::json!({
        "mandatory": ["pii_redact"],
        "policies": [{"name": "topic_guard", "guardrails": [{"type": "topic_guard", "topics": [
            {"name": "weapons", "phrases": ["build a bomb", "make a weapon", "firearm", "explosives"]},
            {"name": "medical advice", "phrases": ["diagnose my", "prescribe me", "what dosage"]}]}]}]
    }))
    .expect("bench policy document");
    PolicySet::compile(1, &doc)
}

fn bench(c: &mut Criterion) {
    let d = detector().expect("detector");
    for (name, text) in [("pii_find_4kb_clean", prompt(false)), ("pii_find_4kb_values", prompt(true))] {
        c.bench_function(name, |b| b.iter(|| black_box(d.find(black_box(&text), EntitySet::all()))));
    }

    let set = policies();
    let ps = set.resolve(TeamPolicies::NONE, Some("pii_redact")).expect("resolve");
    let text = prompt(true);
    c.bench_function("pii_redact_4kb", |b| {
        b.iter(|| {
            let mut t = text.clone();
            let mut vault = Vault::new();
            let mut segs = [Segment { user: true, text: &mut t }];
            black_box(run_input(&ps, &mut segs, &RequestFacts { model: "gpt-4o", prompt_tokens: 1024 }, &mut vault));
        })
    });

    let body = serde_json::to_vec(&serde_json::json!({
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "system", "content": "You are a helpful assistant for Example Corp."},
            {"role": "user", "content": prompt(true)},
        ]
    }))
    .expect("body");
    c.bench_function("policy_step_chat_4kb", |b| {
        b.iter(|| {
            let mut req = ChatRequest::parse(&body).expect("request");
            let ps = set.resolve(TeamPolicies::NONE, Some("topic_guard,prompt_injection")).expect("resolve");
            let mut vault = Vault::new();
            let mut texts = req.texts_mut();
            let mut segs: Vec<Segment> = texts.iter_mut().map(|(u, t)| Segment { user: *u, text: t }).collect();
            let out =
                run_input(&ps, &mut segs, &RequestFacts { model: "gpt-4o-mini", prompt_tokens: 1024 }, &mut vault);
            black_box((out, OutputGuard::new(&ps, vault)));
        })
    });
    // The parse alone, to subtract.
    c.bench_function("chat_parse_4kb", |b| b.iter(|| black_box(ChatRequest::parse(&body).expect("request"))));

    // A clean answer of ~1 KB: the common case, which goes out as it came.
    let clean = serde_json::to_vec(&serde_json::json!({"id": "c", "object": "chat.completion", "created": 1,
        "model": "m", "choices": [{"index": 0, "message": {"role": "assistant", "content": prompt(false)[..1024]},
        "logprobs": null, "finish_reason": "stop"}]}))
    .expect("answer");
    c.bench_function("guard_completion_1kb_clean", |b| {
        b.iter(|| {
            let mut guard = OutputGuard::new(&ps, Vault::new()).expect("guard");
            black_box(guard_completion(&mut guard, black_box(&clean)).expect("guarded"));
        })
    });

    // An answer of ~1 KB streamed in 4-byte pieces, as chunks, through the output guard.
    let answer = prompt(true)[..1024].to_string();
    let chunks: Vec<String> = answer
        .as_bytes()
        .chunks(4)
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .map(|t| {
            serde_json::json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": {"content": t}, "finish_reason": null}]})
            .to_string()
        })
        .collect();
    c.bench_function("output_guard_stream_1kb_in_4b_chunks", |b| {
        b.iter(|| {
            let guard = OutputGuard::new(&ps, Vault::new()).expect("guard");
            let mut f = GuardedStream::new(guard);
            let mut buf = BytesMut::with_capacity(4096);
            let mut count = 0;
            for ch in &chunks {
                let _ = f.filter(ch, &mut Frames::new(&mut buf, &mut count));
            }
            let _ = f.flush(&mut Frames::new(&mut buf, &mut count));
            black_box(buf);
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
