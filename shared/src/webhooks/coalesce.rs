//! Coalescing of `policy.blocked` floods. An endpoint gets the first [`COALESCE_AFTER`] blocks of
//! a minute one delivery each; the rest of that minute's blocks go out as one summary delivery,
//! due when the minute ends, that counts them (in all and per policy), spans their times and
//! names up to [`SAMPLE_REQUEST_IDS`] of their requests. Every block is in exactly one delivery,
//! alone or counted in a summary. The minute is the relay's, when it hands the events over.

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use serde_json::{json, Map, Value};
use uuid::Uuid;

/// Blocks an endpoint gets one by one per minute before the rest are summarized.
pub const COALESCE_AFTER: i64 = 10;
/// Request ids a summary names at most.
pub const SAMPLE_REQUEST_IDS: usize = 100;

/// The minute `now` falls in: its start and end.
pub fn window(now: DateTime<Utc>) -> (DateTime<Utc>, DateTime<Utc>) {
    let start = now.duration_trunc(TimeDelta::minutes(1)).unwrap_or(now);
    (start, start + TimeDelta::minutes(1))
}

/// The key that makes a summary one per endpoint and minute.
pub fn key(window_start: DateTime<Utc>) -> String {
    format!("policy.blocked:{}", window_start.format("%Y-%m-%dT%H:%M:%SZ"))
}

/// A summary with nothing in it yet: the `data` of a `policy.blocked` delivery.
pub fn empty(org_id: Uuid, window: (DateTime<Utc>, DateTime<Utc>)) -> Value {
    json!({
        "type": "policy.blocked",
        "organization_id": org_id,
        "occurred_at": window.0,
        "coalesced": {
            "count": 0,
            "window_start": window.0,
            "window_end": window.1,
            "first_at": null,
            "last_at": null,
            "by_policy": {},
            "request_ids": [],
        },
    })
}

/// Counts one block (the `data` of its event) into a summary.
pub fn add(summary: &mut Value, block: &Value) {
    let Some(c) = summary.get_mut("coalesced").and_then(Value::as_object_mut) else {
        return;
    };
    let count = c.get("count").and_then(Value::as_i64).unwrap_or(0);
    c.insert("count".into(), json!(count + 1));
    if let Some(at) = block.get("occurred_at").and_then(Value::as_str) {
        let earlier = |other: Option<&Value>| other.and_then(Value::as_str).is_none_or(|o| at < o);
        let later = |other: Option<&Value>| other.and_then(Value::as_str).is_none_or(|o| at > o);
        if earlier(c.get("first_at")) {
            c.insert("first_at".into(), json!(at));
        }
        if later(c.get("last_at")) {
            c.insert("last_at".into(), json!(at));
        }
    }
    let policy = block.get("policy").and_then(Value::as_str).unwrap_or("unknown").to_string();
    if let Some(by) = c.entry("by_policy").or_insert_with(|| Value::Object(Map::new())).as_object_mut() {
        let n = by.get(&policy).and_then(Value::as_i64).unwrap_or(0);
        by.insert(policy, json!(n + 1));
    }
    if let (Some(ids), Some(id)) =
        (c.get_mut("request_ids").and_then(Value::as_array_mut), block.get("request_id").and_then(Value::as_str))
    {
        if ids.len() < SAMPLE_REQUEST_IDS {
            ids.push(json!(id));
        }
    }
}

/// How many blocks a summary counts.
pub fn count(summary: &Value) -> i64 {
    summary.pointer("/coalesced/count").and_then(Value::as_i64).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn block(i: usize, policy: &str) -> Value {
        json!({"request_id": format!("r{i}"), "policy": policy, "occurred_at": format!("2026-11-27T19:00:{:02}Z", i % 60)})
    }

    #[test]
    fn windows_are_whole_minutes() {
        let at: DateTime<Utc> = "2026-11-27T19:04:37.25Z".parse().unwrap();
        let (start, end) = window(at);
        assert_eq!(start.to_rfc3339(), "2026-11-27T19:04:00+00:00");
        assert_eq!(end - start, TimeDelta::minutes(1));
        assert_eq!(key(start), "policy.blocked:2026-11-27T19:04:00Z");
    }

    #[test]
    fn a_summary_counts_spans_and_samples() {
        let w = window("2026-11-27T19:00:00Z".parse().unwrap());
        let mut s = empty(Uuid::nil(), w);
        add(&mut s, &block(30, "a"));
        add(&mut s, &block(5, "b"));
        add(&mut s, &block(40, "a"));
        assert_eq!(count(&s), 3);
        assert_eq!(s["coalesced"]["by_policy"], json!({"a": 2, "b": 1}));
        assert_eq!(s["coalesced"]["first_at"], json!("2026-11-27T19:00:05Z"));
        assert_eq!(s["coalesced"]["last_at"], json!("2026-11-27T19:00:40Z"));
        assert_eq!(s["coalesced"]["request_ids"], json!(["r30", "r5", "r40"]));
    }

    proptest! {
        #[test]
        fn every_block_is_counted_and_samples_stay_bounded(n in 0usize..400) {
            let mut s = empty(Uuid::nil(), window(Utc::now()));
            for i in 0..n {
                add(&mut s, &block(i, if i % 3 == 0 { "x" } else { "y" }));
            }
            prop_assert_eq!(count(&s), n as i64);
            let by: i64 = s["coalesced"]["by_policy"].as_object().unwrap().values().map(|v| v.as_i64().unwrap()).sum();
            prop_assert_eq!(by, n as i64);
            prop_assert_eq!(s["coalesced"]["request_ids"].as_array().unwrap().len(), n.min(SAMPLE_REQUEST_IDS));
        }
    }
}
