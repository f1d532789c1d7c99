//! OpenAI Responses: `POST /v1/responses`, plain and streamed, with every field OpenAI's
//! document requires. What the answer says follows the chat dialect's knobs (`reply`,
//! `refusal`, `tool_call_arguments`, `reply_words`, a completion limit in `max_output_tokens`);
//! `reasoning_tokens` adds a `reasoning` item before the answer.

use actix_web::HttpResponse;
use bytes::Bytes;
use serde_json::{json, Value};

use crate::convo::{char_pieces, pieces, reply_for, text_of};
use crate::openai::{error, Said};
use crate::usage::Spent;
use crate::{intact, json_reply, stream_reply, Call, StreamPlan};

/// The request's turns as OpenAI chat messages (what the reply's digest is taken over).
fn messages(body: &Value) -> Result<Vec<Value>, &'static str> {
    let mut msgs = Vec::new();
    if let Some(s) = body.get("instructions").and_then(Value::as_str) {
        msgs.push(json!({"role": "developer", "content": s}));
    }
    match body.get("input") {
        Some(Value::String(s)) => msgs.push(json!({"role": "user", "content": s})),
        Some(Value::Array(items)) => {
            for item in items {
                match item.get("type").and_then(Value::as_str) {
                    Some("function_call_output") => msgs
                        .push(json!({"role": "tool", "content": item.get("output").map(text_of).unwrap_or_default()})),
                    Some("message") | None if item.get("role").is_some() => {
                        let content = item.get("content").map(text_of).unwrap_or_default();
                        msgs.push(json!({"role": item["role"], "content": content}));
                    }
                    _ => {}
                }
            }
        }
        _ => return Err("'input' is required"),
    }
    Ok(msgs)
}

fn sse(seq: &mut u64, mut data: Value) -> Bytes {
    data["sequence_number"] = json!(*seq);
    *seq += 1;
    Bytes::from(format!("event: {}\ndata: {data}\n\n", data["type"].as_str().unwrap_or_default()))
}

/// A response; with it, what the answer spent when it goes out whole.
pub fn responses(call: Call) -> (HttpResponse, Option<Spent>) {
    let Call { k, body, n, .. } = call;
    let Some(model) = body.get("model").and_then(Value::as_str).map(str::to_string) else {
        return (error(400, "Missing required parameter: 'model'.", Some("model")), None);
    };
    let msgs = match messages(&body) {
        Ok(m) => m,
        Err(e) => return (error(400, e, Some("input")), None),
    };
    let reply = reply_for(&msgs);
    // The chat dialect's choice, over this request's function tools and output limit.
    let first_tool = body
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|t| t.get("type").and_then(Value::as_str) == Some("function"))
        .and_then(|t| t.get("name"))
        .cloned();
    let view = json!({"tools": first_tool.map(|name| vec![json!({"function": {"name": name}})]),
                      "max_completion_tokens": body.get("max_output_tokens")});
    let said = Said::choose(&k, &view, reply.text);
    let completion_tokens = said.tokens() + k.reasoning_tokens;
    let prompt_tokens = reply.prompt_tokens;
    let cached = k.cached_tokens.min(prompt_tokens);
    let stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let spent = intact(&k, stream).then(|| Spent {
        model: model.clone(),
        input_tokens: prompt_tokens,
        output_tokens: completion_tokens,
        cached_tokens: cached,
    });
    let usage = json!({"input_tokens": prompt_tokens, "input_tokens_details": {"cached_tokens": cached},
                       "output_tokens": completion_tokens,
                       "output_tokens_details": {"reasoning_tokens": k.reasoning_tokens},
                       "total_tokens": prompt_tokens + completion_tokens});
    let digest = reply.digest;
    let created = 1_700_000_000 + n as i64;
    let echo = |status: &str, output: Vec<Value>, done: bool| {
        let get = |name: &str, default: Value| body.get(name).filter(|v| !v.is_null()).cloned().unwrap_or(default);
        let incomplete = matches!(said, Said::Cut(_)) && done;
        let mut r = json!({
            "id": format!("resp_mock{digest}{n}"), "object": "response", "created_at": created,
            "status": status, "completed_at": if done { json!(created + 1) } else { Value::Null },
            "error": null,
            "incomplete_details": if incomplete { json!({"reason": "max_output_tokens"}) } else { Value::Null },
            "model": model, "output": output, "instructions": get("instructions", Value::Null),
            "tools": get("tools", json!([])), "tool_choice": get("tool_choice", json!("auto")),
            "parallel_tool_calls": get("parallel_tool_calls", json!(true)),
            "temperature": get("temperature", json!(1.0)), "top_p": get("top_p", json!(1.0)),
            "metadata": get("metadata", json!({})), "max_output_tokens": get("max_output_tokens", Value::Null),
            "text": get("text", json!({"format": {"type": "text"}})), "reasoning": get("reasoning", Value::Null),
            "store": get("store", json!(true)), "truncation": get("truncation", json!("disabled")),
            "service_tier": "default",
        });
        if done && !k.no_usage {
            r["usage"] = usage.clone();
        }
        r
    };
    let status = if matches!(said, Said::Cut(_)) { "incomplete" } else { "completed" };
    let msg_id = format!("msg_mock{digest}");
    let reasoning =
        (k.reasoning_tokens > 0).then(|| json!({"type": "reasoning", "id": format!("rs_mock{digest}"), "summary": []}));
    let text_part = |t: &str| json!({"type": "output_text", "text": t, "annotations": [], "logprobs": []});
    let item = match &said {
        Said::Text(t) => json!({"type": "message", "id": msg_id, "status": "completed",
                                "role": "assistant", "content": [text_part(t)]}),
        Said::Cut(t) => json!({"type": "message", "id": msg_id, "status": "incomplete",
                               "role": "assistant", "content": [text_part(t)]}),
        Said::Refusal(t) => json!({"type": "message", "id": msg_id, "status": "completed", "role": "assistant",
                                   "content": [{"type": "refusal", "refusal": t}]}),
        Said::Tool { name, arguments } => json!({"type": "function_call", "id": format!("fc_mock{digest}"),
                                                  "call_id": format!("call_mock{n}"), "name": name,
                                                  "arguments": arguments, "status": "completed"}),
    };
    let output: Vec<Value> = reasoning.iter().cloned().chain([item.clone()]).collect();
    if !stream {
        return (json_reply(&echo(status, output, true), &k), spent);
    }

    let mut seq = 0;
    let mut events = vec![
        sse(&mut seq, json!({"type": "response.created", "response": echo("in_progress", vec![], false)})),
        sse(&mut seq, json!({"type": "response.in_progress", "response": echo("in_progress", vec![], false)})),
    ];
    let mut index = 0;
    if let Some(r) = &reasoning {
        events.push(sse(&mut seq, json!({"type": "response.output_item.added", "output_index": 0, "item": r})));
        events.push(sse(&mut seq, json!({"type": "response.output_item.done", "output_index": 0, "item": r})));
        index = 1;
    }
    // How many events go up to and including the first content event.
    let mut first = 0;
    let split = |text: &str, default: Option<usize>| match (k.chunk_chars, default) {
        (0, None) => pieces(text, 1),
        (0, Some(n)) => char_pieces(text, n),
        (n, _) => char_pieces(text, n),
    };
    let at = json!({"item_id": msg_id, "output_index": index, "content_index": 0});
    let with = |mut v: Value, extra: &Value| {
        if let (Some(o), Some(e)) = (v.as_object_mut(), extra.as_object()) {
            o.extend(e.clone());
        }
        v
    };
    let mut added = item.clone();
    added["status"] = json!("in_progress");
    match &said {
        Said::Text(t) | Said::Cut(t) | Said::Refusal(t) => {
            let refusal = matches!(said, Said::Refusal(_));
            added["content"] = json!([]);
            events.push(sse(
                &mut seq,
                json!({"type": "response.output_item.added", "output_index": index, "item": added}),
            ));
            let (part, kind) = match refusal {
                true => (json!({"type": "refusal", "refusal": ""}), "response.refusal"),
                false => (text_part(""), "response.output_text"),
            };
            events.push(sse(&mut seq, with(json!({"type": "response.content_part.added", "part": part}), &at)));
            for piece in split(t, None) {
                let mut delta = json!({"type": format!("{kind}.delta"), "delta": piece});
                if !refusal {
                    delta["logprobs"] = json!([]);
                }
                events.push(sse(&mut seq, with(delta, &at)));
                if first == 0 {
                    first = events.len();
                }
            }
            let done = match refusal {
                true => json!({"type": "response.refusal.done", "refusal": t}),
                false => json!({"type": "response.output_text.done", "text": t, "logprobs": []}),
            };
            events.push(sse(&mut seq, with(done, &at)));
            let part = item["content"][0].clone();
            events.push(sse(&mut seq, with(json!({"type": "response.content_part.done", "part": part}), &at)));
        }
        Said::Tool { name, arguments } => {
            added["arguments"] = json!("");
            events.push(sse(
                &mut seq,
                json!({"type": "response.output_item.added", "output_index": index, "item": added}),
            ));
            let at = json!({"item_id": item["id"], "output_index": index});
            for piece in split(arguments, Some(6)) {
                let delta = json!({"type": "response.function_call_arguments.delta", "delta": piece});
                events.push(sse(&mut seq, with(delta, &at)));
                if first == 0 {
                    first = events.len();
                }
            }
            let done = json!({"type": "response.function_call_arguments.done", "name": name, "arguments": arguments});
            events.push(sse(&mut seq, with(done, &at)));
        }
    }
    events.push(sse(&mut seq, json!({"type": "response.output_item.done", "output_index": index, "item": item})));
    let end = if status == "completed" { "response.completed" } else { "response.incomplete" };
    events.push(sse(&mut seq, json!({"type": end, "response": echo(status, output, true)})));
    let partial = first + 1;
    let mut error_seq = partial as u64;
    let error = sse(
        &mut error_seq,
        json!({"type": "error", "code": "server_error", "message": "mock upstream failed mid-stream", "param": null}),
    );
    let plan = StreamPlan {
        events,
        first,
        partial,
        error,
        bad_chunk: Bytes::from_static(b"event: response.output_text.delta\ndata: {not json\n\n"),
    };
    (stream_reply(plan, &k), spent)
}
