use proptest::prelude::*;
use serde_json::json;

use super::*;

fn map(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

fn key_of(text: &str) -> CacheKey {
    let v: Value = serde_json::from_str(text).unwrap();
    exact(Uuid::nil(), "/v1/chat/completions", &map(v))
}

#[test]
fn field_order_and_whitespace_do_not_matter() {
    let a = key_of(r#"{"model":"m","temperature":0.2,"messages":[{"role":"user","content":"hi"}]}"#);
    let b = key_of(
        "{ \"messages\" : [ { \"content\":\"hi\", \"role\":\"user\" } ],\n\t\"temperature\": 0.20, \"model\": \"m\" }",
    );
    assert_eq!(a, b);
}

#[test]
fn numbers_are_written_one_way() {
    let a = key_of(r#"{"model":"m","max_tokens":100,"temperature":1,"messages":[]}"#);
    let b = key_of(r#"{"model":"m","max_tokens":1e2,"temperature":1.0,"messages":[]}"#);
    assert_eq!(a, b);
    let c = key_of(r#"{"model":"m","max_tokens":100,"temperature":1.5,"messages":[]}"#);
    assert_ne!(a, c);
}

#[test]
fn delivery_fields_do_not_matter_but_answer_fields_do() {
    let base = json!({"model":"m","messages":[{"role":"user","content":"hi"}]});
    let k = |extra: Value| {
        let mut m = map(base.clone());
        m.extend(map(extra));
        exact(Uuid::nil(), "/v1/chat/completions", &m)
    };
    let plain = k(json!({}));
    assert_eq!(plain, k(json!({"stream": true, "stream_options": {"include_usage": true}})));
    assert_eq!(plain, k(json!({"user": "u-1", "metadata": {"a": "b"}, "store": false})));
    for changes in [
        json!({"temperature": 0.7}),
        json!({"top_p": 0.5}),
        json!({"max_tokens": 5}),
        json!({"seed": 1}),
        json!({"stop": ["x"]}),
        json!({"n": 2}),
        json!({"tool_choice": "none"}),
        json!({"response_format": {"type": "json_object"}}),
        json!({"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]}),
        json!({"model": "other"}),
        json!({"messages": [{"role": "user", "content": "hi!"}]}),
        json!({"x_vendor_knob": 1}),
    ] {
        assert_ne!(plain, k(changes.clone()), "{changes}");
    }
}

#[test]
fn organizations_and_endpoints_never_share_keys() {
    let body = map(json!({"model":"m","messages":[{"role":"user","content":"hi"}]}));
    let a = exact(Uuid::from_u128(1), "/v1/chat/completions", &body);
    let b = exact(Uuid::from_u128(2), "/v1/chat/completions", &body);
    assert_ne!(a.digest, b.digest);
    assert_ne!(a.redis_key(), b.redis_key());
    assert_ne!(a, exact(Uuid::from_u128(1), "/v1/embeddings", &body));
    assert!(a.redis_key().starts_with(&org_prefix(Uuid::from_u128(1))));
    assert!(a.redis_key().starts_with(&model_prefix(Uuid::from_u128(1), &model_tag("m"))));
}

#[test]
fn a_lone_text_part_is_plain_content() {
    let a = key_of(r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#);
    let b = key_of(r#"{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}"#);
    assert_eq!(a, b);
    let two = key_of(
        r#"{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"h"},{"type":"text","text":"i"}]}]}"#,
    );
    assert_ne!(a, two);
}

#[test]
fn semantic_scope_holds_everything_but_the_last_turn() {
    let org = Uuid::from_u128(7);
    let req = |sys: &str, last: &str, temp: f64| {
        map(json!({"model":"m","temperature":temp,"stream":true,"messages":[
            {"role":"system","content":sys},{"role":"user","content":last}]}))
    };
    let a = semantic(org, "minilm", &req("be brief", "How do I reverse a list?", 0.0)).unwrap();
    let b = semantic(org, "minilm", &req("be brief", "how to reverse a list", 0.0)).unwrap();
    assert_eq!(a.scope, b.scope);
    assert_eq!(a.prompt, "How do I reverse a list?");
    assert_ne!(a.scope, semantic(org, "minilm", &req("be verbose", "How do I reverse a list?", 0.0)).unwrap().scope);
    assert_ne!(a.scope, semantic(org, "minilm", &req("be brief", "How do I reverse a list?", 0.5)).unwrap().scope);
    assert_ne!(a.scope, semantic(Uuid::from_u128(8), "minilm", &req("be brief", "x", 0.0)).unwrap().scope);
    assert_ne!(a.scope, semantic(org, "other-embedder", &req("be brief", "x", 0.0)).unwrap().scope);
}

#[test]
fn semantic_needs_a_last_user_turn_with_text() {
    let org = Uuid::nil();
    assert!(semantic(org, "e", &map(json!({"model":"m","messages":[]}))).is_none());
    assert!(semantic(org, "e", &map(json!({"model":"m","messages":[{"role":"assistant","content":"x"}]}))).is_none());
    assert!(semantic(org, "e", &map(json!({"model":"m","messages":[{"role":"user","content":"  "}]}))).is_none());
    let image = json!({"model":"m","messages":[{"role":"user","content":[
        {"type":"text","text":"what is this"},{"type":"image_url","image_url":{"url":"https://x/y.png"}}]}]});
    assert!(semantic(org, "e", &map(image)).is_none());
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i32>().prop_map(|i| json!(i)),
        (-1e6f64..1e6).prop_map(|f| json!(f)),
        "[a-z ]{0,8}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z]{1,4}", inner, 0..4).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Writes `v` as JSON with object members in reverse order and spaces everywhere.
fn reordered(v: &Value) -> String {
    match v {
        Value::Object(m) => {
            let members: Vec<String> =
                m.iter().rev().map(|(k, v)| format!(" {} : {} ", Value::String(k.clone()), reordered(v))).collect();
            format!("{{ {} }}", members.join(" , "))
        }
        Value::Array(items) => format!("[ {} ]", items.iter().map(reordered).collect::<Vec<_>>().join(" ,\n ")),
        other => other.to_string(),
    }
}

proptest! {
    #[test]
    fn any_member_order_and_whitespace_give_the_same_key(fields in prop::collection::btree_map("[a-z_]{1,6}", arb_json(), 0..6)) {
        let mut body: Map<String, Value> = fields.into_iter().collect();
        body.insert("model".into(), json!("m"));
        // Two request bodies, as clients would send them: one compact, one reordered and spaced.
        let compact: Value = serde_json::from_str(&Value::Object(body.clone()).to_string()).unwrap();
        let spaced: Value = serde_json::from_str(&reordered(&Value::Object(body))).unwrap();
        prop_assert_eq!(exact(Uuid::nil(), "e", &map(compact)), exact(Uuid::nil(), "e", &map(spaced)));
    }

    #[test]
    fn different_bodies_give_different_keys(a in arb_json(), b in arb_json()) {
        let key = |v: &Value| exact(Uuid::nil(), "e", &map(json!({"model": "m", "x": v})));
        let mut ca = Vec::new();
        let mut cb = Vec::new();
        canonical(&a, &mut ca);
        canonical(&b, &mut cb);
        prop_assert_eq!(ca == cb, key(&a) == key(&b));
    }
}

#[test]
fn a_purge_generation_changes_the_redis_key_and_keeps_its_prefixes() {
    let mut a = key_of(r#"{"model":"m","messages":[{"role":"user","content":"same question"}]}"#);
    let before = a.redis_key();
    a.generation = (1, 0);
    let org_purged = a.redis_key();
    a.generation = (1, 3);
    let model_purged = a.redis_key();
    assert_ne!(before, org_purged);
    assert_ne!(org_purged, model_purged);
    for k in [&before, &org_purged, &model_purged] {
        assert!(k.starts_with(&model_prefix(a.org_id, &a.model)), "{k}");
    }
    let mut gens = crate::cache::settings::Generations::default();
    assert_eq!(gens.of(&a.model), (0, 0));
    gens.all = 2;
    gens.models.insert(hex::encode(a.model), 5);
    assert_eq!(gens.of(&a.model), (2, 5));
    assert_eq!(gens.of(&model_tag("another model")), (2, 0));
}

#[test]
fn an_entrys_generations_read_back_from_its_key() {
    let mut a = key_of(r#"{"model":"m","messages":[{"role":"user","content":"read back"}]}"#);
    assert_eq!(generation_of(&a.redis_key()), Some((0, 0)));
    a.generation = (4, 2);
    assert_eq!(generation_of(&a.redis_key()), Some((4, 2)));
    // Written before generations existed.
    let old = format!("{}{}", model_prefix(a.org_id, &a.model), hex::encode(a.digest));
    assert_eq!(generation_of(&old), Some((0, 0)));
    let (z, h) = crate::cache::l2_budget::ledger_keys(a.org_id);
    assert_eq!((generation_of(&z), generation_of(&h)), (None, None));
    assert_eq!(generation_of("gw:other"), None);
}

#[test]
fn a_messages_body_keys_what_its_translation_drops() {
    let chat =
        map(json!({"model": "claude", "messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 9}));
    let raw = |extra: Value| {
        let mut body = json!({"model": "claude", "max_tokens": 9, "messages": [{"role": "user", "content": "hi"}]});
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        serde_json::to_vec(&body).unwrap()
    };
    let org = Uuid::nil();
    let exact = |raw: &[u8], beta| exact(org, "/v1/chat/completions", &with_messages_body(&chat, raw, beta, true));
    let plain = raw(json!({}));
    // Spelled differently, the same body: the same key.
    let respelled = br#"{ "messages":[{"content":"hi","role":"user"}],"max_tokens":9, "model":"claude"}"#;
    assert_eq!(exact(&plain, None), exact(respelled, None));
    assert_eq!(exact(&plain, None), exact(&raw(json!({"stream": true})), None), "delivery is not a key");
    assert_ne!(exact(&plain, None), exact(&raw(json!({"top_k": 5})), None));
    assert_ne!(exact(&plain, None), exact(&plain, Some("context-1m-2025-08-07")));
    assert_ne!(exact(&plain, None), exact(&raw(json!({"output_config": {"effort": "low"}})), None));
    // The semantic scope leaves the turns to the semantic tier.
    let scope = |raw: &[u8]| with_messages_body(&chat, raw, None, false);
    let other_turns = br#"{"model": "claude", "max_tokens": 9, "messages": [{"role": "user", "content": "hello"}]}"#;
    assert_eq!(scope(&plain)["x-gw-messages"], scope(other_turns)["x-gw-messages"]);
    assert_ne!(scope(&plain)["x-gw-messages"], scope(&raw(json!({"top_k": 5})))["x-gw-messages"]);
}

#[test]
fn a_responses_body_keys_what_its_translation_drops() {
    let chat = map(json!({"model": "gpt", "messages": [{"role": "user", "content": "hi"}]}));
    let org = Uuid::nil();
    let exact = |raw: &[u8]| exact(org, "/v1/chat/completions", &with_responses_body(&chat, raw, true));
    let plain = br#"{"model": "gpt", "input": "hi"}"#;
    assert_eq!(exact(plain), exact(br#"{ "input":"hi", "model":"gpt" }"#));
    assert_eq!(exact(plain), exact(br#"{"model": "gpt", "input": "hi", "stream": true, "store": false}"#));
    assert_ne!(exact(plain), exact(br#"{"model": "gpt", "input": "hi", "include": ["reasoning.encrypted_content"]}"#));
    assert_ne!(exact(plain), exact(br#"{"model": "gpt", "input": "hi", "text": {"verbosity": "low"}}"#));
    let scope = |raw: &[u8]| with_responses_body(&chat, raw, false);
    assert_eq!(scope(plain)["x-gw-responses"], scope(br#"{"model": "gpt", "input": "hello"}"#)["x-gw-responses"]);
    assert_ne!(
        scope(plain)["x-gw-responses"],
        scope(br#"{"model": "gpt", "input": "hi", "top_logprobs": 2}"#)["x-gw-responses"]
    );
}
