//! An OpenAI Responses request (`POST /v1/responses`) as the chat request gw's pipeline runs.
//! Stateless: nothing is stored, so `previous_response_id`, `conversation`, `store: true` and
//! `background` are refused with a clear error rather than silently ignored.

use serde_json::{json, Map, Value};

use crate::openai::validate::{echo, RequestProblem};

fn problem(message: impl Into<String>, param: &str) -> RequestProblem {
    RequestProblem::new(message, param)
}

/// The chat body for a Responses request body.
pub fn chat_body(body: &Map<String, Value>) -> Result<Map<String, Value>, RequestProblem> {
    for (field, why) in [
        ("previous_response_id", "gw does not store responses: send the whole conversation in 'input'."),
        ("conversation", "gw does not store conversations: send the whole conversation in 'input'."),
        ("prompt", "Stored prompts are not supported: use gw's prompt templates on /v1/chat/completions."),
    ] {
        if body.get(field).is_some_and(|v| !v.is_null()) {
            return Err(problem(why, field));
        }
    }
    if body.get("store").and_then(Value::as_bool) == Some(true) {
        return Err(problem("gw does not store responses: send 'store': false (or leave it out).", "store"));
    }
    if body.get("background").and_then(Value::as_bool) == Some(true) {
        return Err(problem("Background responses are not supported.", "background"));
    }
    let mut out = Map::new();
    match body.get("model") {
        Some(Value::String(m)) if !m.is_empty() => {
            out.insert("model".into(), Value::String(m.clone()));
        }
        _ => return Err(problem("Missing required parameter: 'model'.", "model")),
    }
    let mut messages = Vec::new();
    match body.get("instructions") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => messages.push(json!({"role": "developer", "content": s})),
        Some(_) => return Err(problem("Invalid type for 'instructions': expected a string.", "instructions")),
    }
    match body.get("input") {
        Some(Value::String(s)) => messages.push(json!({"role": "user", "content": s})),
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                translate_item(item, i, &mut messages)?;
            }
        }
        None | Some(Value::Null) => return Err(problem("Missing required parameter: 'input'.", "input")),
        Some(_) => return Err(problem("Invalid type for 'input': expected a string or an array of items.", "input")),
    }
    if messages.is_empty() {
        return Err(problem("'input' holds no message.", "input"));
    }
    out.insert("messages".into(), Value::Array(messages));
    if let Some(v) = body.get("max_output_tokens").filter(|v| !v.is_null()) {
        match v.as_u64() {
            Some(n) if n >= 1 => {
                out.insert("max_completion_tokens".into(), n.into());
            }
            _ => return Err(problem("Invalid 'max_output_tokens': expected a positive integer.", "max_output_tokens")),
        }
    }
    for name in ["temperature", "top_p", "user", "safety_identifier", "parallel_tool_calls", "service_tier", "metadata"]
    {
        if let Some(v) = body.get(name).filter(|v| !v.is_null()) {
            out.insert(name.into(), v.clone());
        }
    }
    if let Some(tools) = body.get("tools").filter(|v| !v.is_null()) {
        let Some(tools) = tools.as_array() else {
            return Err(problem("Invalid type for 'tools': expected an array.", "tools"));
        };
        let mut converted = Vec::new();
        for (i, t) in tools.iter().enumerate() {
            translate_tool(t, i, &mut converted)?;
        }
        if !converted.is_empty() {
            out.insert("tools".into(), Value::Array(converted));
        }
    }
    if let Some(choice) = body.get("tool_choice").filter(|v| !v.is_null()) {
        out.insert("tool_choice".into(), translate_tool_choice(choice)?);
    }
    if let Some(format) = body.get("text").and_then(|t| t.get("format")).filter(|v| !v.is_null()) {
        if let Some(rf) = translate_format(format)? {
            out.insert("response_format".into(), rf);
        }
    }
    if let Some(effort) = body.get("reasoning").and_then(|r| r.get("effort")).filter(|v| !v.is_null()) {
        out.insert("reasoning_effort".into(), effort.clone());
    }
    if body.get("stream").and_then(Value::as_bool) == Some(true) {
        out.insert("stream".into(), Value::Bool(true));
        out.insert("stream_options".into(), json!({"include_usage": true}));
    }
    Ok(out)
}

/// One input item. Consecutive function calls become one assistant message's tool calls.
fn translate_item(item: &Value, i: usize, out: &mut Vec<Value>) -> Result<(), RequestProblem> {
    let at = |f: &str| format!("input[{i}]{f}");
    let kind = item.get("type").and_then(Value::as_str);
    match kind {
        None | Some("message") => {
            let role = item.get("role").and_then(Value::as_str).unwrap_or_default();
            if !["user", "assistant", "system", "developer"].contains(&role) {
                return Err(problem(
                    format!("Invalid value for '{}': expected user, assistant, system or developer.", at(".role")),
                    "input",
                ));
            }
            let content = match item.get("content") {
                Some(Value::String(s)) => Value::String(s.clone()),
                Some(Value::Array(parts)) => {
                    let mut converted = Vec::new();
                    for (j, p) in parts.iter().enumerate() {
                        converted.push(translate_part(p, &format!("{}[{j}]", at(".content")), role)?);
                    }
                    if role == "assistant" {
                        // Earlier assistant turns as plain text: OpenAI's chat takes text parts only there.
                        let text: String = converted.iter().filter_map(|p| p["text"].as_str()).collect();
                        Value::String(text)
                    } else {
                        Value::Array(converted)
                    }
                }
                _ => return Err(problem(format!("Missing required parameter: '{}'.", at(".content")), "input")),
            };
            out.push(json!({"role": role, "content": content}));
        }
        Some("function_call") => {
            let (Some(call_id), Some(name)) =
                (item.get("call_id").and_then(Value::as_str), item.get("name").and_then(Value::as_str))
            else {
                return Err(problem(format!("'{}' needs 'call_id' and 'name'.", at("")), "input"));
            };
            let arguments = item.get("arguments").and_then(Value::as_str).unwrap_or("{}");
            let call = json!({"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}});
            let joins = out.last().is_some_and(|m| m["role"] == "assistant" && m.get("tool_calls").is_some());
            match out.last_mut() {
                Some(last) if joins => {
                    if let Some(calls) = last["tool_calls"].as_array_mut() {
                        calls.push(call);
                    }
                }
                _ => out.push(json!({"role": "assistant", "content": null, "tool_calls": [call]})),
            }
        }
        Some("function_call_output") => {
            let Some(call_id) = item.get("call_id").and_then(Value::as_str) else {
                return Err(problem(format!("Missing required parameter: '{}'.", at(".call_id")), "input"));
            };
            let output = match item.get("output") {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Array(parts)) => {
                    for (j, p) in parts.iter().enumerate() {
                        no_file(p, &at(&format!(".output[{j}]")))?;
                    }
                    parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect()
                }
                _ => return Err(problem(format!("Missing required parameter: '{}'.", at(".output")), "input")),
            };
            out.push(json!({"role": "tool", "tool_call_id": call_id, "content": output}));
        }
        // Reasoning from an earlier turn: the chat format has no place for it.
        Some("reasoning") => {}
        Some(other) => {
            return Err(problem(format!("Input items of type '{}' are not supported.", echo(other)), "input"));
        }
    }
    Ok(())
}

/// Refuses a part that names a file: a `file_id` is a file of the account gw calls OpenAI with
/// (shared by every tenant), never the client's to read, and a passed-through body would carry it.
fn no_file(p: &Value, at: &str) -> Result<(), RequestProblem> {
    if p.get("type").and_then(Value::as_str) == Some("input_file") {
        return Err(problem(format!("'{at}': file inputs are not supported."), "input"));
    }
    if p.get("file_id").is_some_and(|f| !f.is_null()) {
        return Err(problem(format!("'{at}': parts given by 'file_id' are not supported."), "input"));
    }
    Ok(())
}

fn translate_part(p: &Value, at: &str, role: &str) -> Result<Value, RequestProblem> {
    no_file(p, at)?;
    match p.get("type").and_then(Value::as_str) {
        Some("input_text") | Some("output_text") | Some("text") => {
            let text = p
                .get("text")
                .and_then(Value::as_str)
                .ok_or_else(|| problem(format!("Missing required parameter: '{at}.text'."), "input"))?;
            Ok(json!({"type": "text", "text": text}))
        }
        Some("refusal") if role == "assistant" => {
            Ok(json!({"type": "text", "text": p.get("refusal").and_then(Value::as_str).unwrap_or_default()}))
        }
        Some("input_image") => {
            let Some(url) = p.get("image_url").and_then(Value::as_str) else {
                return Err(problem(format!("'{at}': only images given by 'image_url' are supported."), "input"));
            };
            let mut image = json!({"url": url});
            if let Some(d) = p.get("detail").and_then(Value::as_str) {
                image["detail"] = Value::String(d.to_string());
            }
            Ok(json!({"type": "image_url", "image_url": image}))
        }
        Some(other) => Err(problem(format!("Content parts of type '{}' are not supported.", echo(other)), "input")),
        None => Err(problem(format!("Missing required parameter: '{at}.type'."), "input")),
    }
}

/// Tools OpenAI runs itself: no provider behind a translation can, so they are left out (the
/// model answers without them); one named in `tool_choice` is refused there.
const HOSTED_TOOLS: &[&str] = &[
    "web_search",
    "web_search_preview",
    "web_search_2025_08_26",
    "web_search_preview_2025_03_11",
    "file_search",
    "code_interpreter",
    "image_generation",
    "computer_use_preview",
    "mcp",
];

/// Whether a tool is one OpenAI runs itself.
pub fn is_hosted_tool(t: &Value) -> bool {
    t.get("type").and_then(Value::as_str).is_some_and(|k| HOSTED_TOOLS.contains(&k))
}

/// Whether the request offers a hosted tool.
pub fn offers_hosted_tools(body: &Map<String, Value>) -> bool {
    body.get("tools").and_then(Value::as_array).is_some_and(|tools| tools.iter().any(is_hosted_tool))
}

/// One tool as the chat request's function tools: a function as one, a namespace's functions
/// each (their calls come back naming the namespace), a hosted tool as none.
fn translate_tool(t: &Value, i: usize, out: &mut Vec<Value>) -> Result<(), RequestProblem> {
    match t.get("type").and_then(Value::as_str) {
        Some("function") => {}
        Some("namespace") => {
            let inner = t.get("tools").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
            for (j, f) in inner.iter().enumerate() {
                if f.get("type").and_then(Value::as_str) != Some("function") {
                    return Err(problem(
                        format!("'tools[{i}].tools[{j}]': a namespace holds functions only."),
                        "tools",
                    ));
                }
                translate_tool(f, i, out)?;
            }
            return Ok(());
        }
        Some(kind) if HOSTED_TOOLS.contains(&kind) => return Ok(()),
        Some(other) => return Err(problem(format!("Tools of type '{}' are not supported.", echo(other)), "tools")),
        None => return Err(problem(format!("Missing required parameter: 'tools[{i}].type'."), "tools")),
    }
    let name = t
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| problem(format!("Missing required parameter: 'tools[{i}].name'."), "tools"))?;
    let mut function = json!({"name": name});
    for field in ["description", "parameters", "strict"] {
        if let Some(v) = t.get(field).filter(|v| !v.is_null()) {
            function[field] = v.clone();
        }
    }
    out.push(json!({"type": "function", "function": function}));
    Ok(())
}

fn translate_tool_choice(choice: &Value) -> Result<Value, RequestProblem> {
    match choice {
        Value::String(s) if ["auto", "none", "required"].contains(&s.as_str()) => Ok(choice.clone()),
        Value::Object(o) if o.get("type").and_then(Value::as_str) == Some("function") => {
            let name = o
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| problem("Missing required parameter: 'tool_choice.name'.", "tool_choice"))?;
            Ok(json!({"type": "function", "function": {"name": name}}))
        }
        _ => Err(problem("Invalid 'tool_choice': expected 'auto', 'none', 'required' or a function.", "tool_choice")),
    }
}

/// `text.format` as chat's `response_format` (`None` for plain text).
fn translate_format(format: &Value) -> Result<Option<Value>, RequestProblem> {
    match format.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(json!({"type": "json_object"}))),
        Some("json_schema") => {
            let (Some(name), Some(schema)) = (format.get("name").and_then(Value::as_str), format.get("schema")) else {
                return Err(problem("'text.format' of type 'json_schema' needs 'name' and 'schema'.", "text.format"));
            };
            let mut js = json!({"name": name, "schema": schema});
            for field in ["description", "strict"] {
                if let Some(v) = format.get(field).filter(|v| !v.is_null()) {
                    js[field] = v.clone();
                }
            }
            Ok(Some(json!({"type": "json_schema", "json_schema": js})))
        }
        _ => {
            Err(problem("Invalid 'text.format.type': expected 'text', 'json_object' or 'json_schema'.", "text.format"))
        }
    }
}
