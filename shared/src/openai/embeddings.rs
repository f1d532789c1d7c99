//! `POST /v1/embeddings`: the request, kept as the client sent it (unknown fields pass through to
//! OpenAI-compatible upstreams), and the response OpenAI's document describes
//! (`CreateEmbeddingResponse`), built by adapters whose upstream speaks another dialect.

use base64::Engine as _;
use bytes::Bytes;
use serde::Serialize;
use serde_json::{Map, Value};

use super::RequestProblem;

/// Most inputs in one request (OpenAI's own limit).
pub const MAX_INPUTS: usize = 2048;

#[derive(Debug, Clone, PartialEq)]
pub enum EmbeddingInput {
    Texts(Vec<String>),
    /// Pre-tokenized input: one token array per input.
    Tokens(Vec<Vec<u32>>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EncodingFormat {
    #[default]
    Float,
    Base64,
}

impl EncodingFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            EncodingFormat::Float => "float",
            EncodingFormat::Base64 => "base64",
        }
    }
}

#[derive(Debug)]
pub struct EmbeddingsRequest {
    body: Map<String, Value>,
    pub model: String,
    pub input: EmbeddingInput,
    pub encoding: EncodingFormat,
    pub dimensions: Option<u32>,
}

impl EmbeddingsRequest {
    pub fn parse(bytes: &[u8]) -> Result<Self, RequestProblem> {
        let value: Value = serde_json::from_slice(bytes).map_err(|e| RequestProblem {
            message: format!("We could not parse the JSON body of your request: {e}"),
            param: None,
        })?;
        let Value::Object(body) = value else {
            return Err(RequestProblem { message: "The request body must be a JSON object.".into(), param: None });
        };
        Self::from_map(body)
    }

    pub fn from_map(body: Map<String, Value>) -> Result<Self, RequestProblem> {
        let model = match body.get("model") {
            Some(Value::String(m)) if !m.is_empty() => m.clone(),
            Some(Value::String(_)) | None => {
                return Err(RequestProblem::new("you must provide a model parameter", "model"));
            }
            Some(_) => return Err(RequestProblem::new("'model' must be a string.", "model")),
        };
        let input = parse_input(body.get("input"))?;
        let encoding = match body.get("encoding_format") {
            None | Some(Value::Null) => EncodingFormat::Float,
            Some(Value::String(s)) if s == "float" => EncodingFormat::Float,
            Some(Value::String(s)) if s == "base64" => EncodingFormat::Base64,
            Some(_) => {
                return Err(RequestProblem::new(
                    "'encoding_format' must be one of 'float' or 'base64'.",
                    "encoding_format",
                ))
            }
        };
        let dimensions = match body.get("dimensions") {
            None | Some(Value::Null) => None,
            Some(v) => match v.as_u64() {
                Some(d) if (1..=65_536).contains(&d) => u32::try_from(d).ok(),
                _ => return Err(RequestProblem::new("'dimensions' must be a positive integer.", "dimensions")),
            },
        };
        if let Some(u) = body.get("user") {
            if !u.is_string() {
                return Err(RequestProblem::new("'user' must be a string.", "user"));
            }
        }
        Ok(Self { body, model, input, encoding, dimensions })
    }

    pub fn body(&self) -> &Map<String, Value> {
        &self.body
    }

    /// The texts to embed, when the input is text (not token arrays).
    pub fn texts(&self) -> Option<&[String]> {
        match &self.input {
            EmbeddingInput::Texts(t) => Some(t),
            EmbeddingInput::Tokens(_) => None,
        }
    }

    /// Whether the input is token arrays: text no guardrail can read, since gw knows no tokenizer
    /// to decode them with.
    pub fn is_pretokenized(&self) -> bool {
        matches!(self.input, EmbeddingInput::Tokens(_))
    }

    /// The texts to embed, for guardrails to rewrite; call [`Self::sync_body`] after an edit.
    pub fn texts_mut(&mut self) -> Option<&mut Vec<String>> {
        match &mut self.input {
            EmbeddingInput::Texts(t) => Some(t),
            EmbeddingInput::Tokens(_) => None,
        }
    }

    /// The body the upstream gets carries the texts as they are now.
    pub fn sync_body(&mut self) {
        if let EmbeddingInput::Texts(t) = &self.input {
            let v = match (self.body.get("input"), t.as_slice()) {
                (Some(Value::String(_)), [one]) => Value::String(one.clone()),
                _ => Value::Array(t.iter().cloned().map(Value::String).collect()),
            };
            self.body.insert("input".into(), v);
        }
    }

    /// Tokens of pre-tokenized input (0 for text input).
    pub fn token_count(&self) -> u64 {
        match &self.input {
            EmbeddingInput::Texts(_) => 0,
            EmbeddingInput::Tokens(t) => t.iter().map(|x| x.len() as u64).sum(),
        }
    }

    /// How many inputs the request holds.
    pub fn len(&self) -> usize {
        match &self.input {
            EmbeddingInput::Texts(t) => t.len(),
            EmbeddingInput::Tokens(t) => t.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The body for an OpenAI-compatible upstream: the client's, with the deployment's model.
    pub fn openai_body(&self, upstream_model: &str) -> serde_json::Result<Bytes> {
        let mut body = self.body.clone();
        body.insert("model".into(), Value::String(upstream_model.into()));
        serde_json::to_vec(&body).map(Bytes::from)
    }
}

fn parse_input(v: Option<&Value>) -> Result<EmbeddingInput, RequestProblem> {
    let bad = || {
        RequestProblem::new(
            "'input' must be a non-empty string, an array of non-empty strings, an array of token ids, \
             or an array of token id arrays.",
            "input",
        )
    };
    let tokens = |a: &[Value]| -> Option<Vec<u32>> {
        if a.is_empty() {
            return None;
        }
        a.iter().map(|t| t.as_u64().and_then(|n| u32::try_from(n).ok())).collect()
    };
    let input = match v {
        None | Some(Value::Null) => return Err(RequestProblem::new("you must provide an input parameter", "input")),
        Some(Value::String(s)) if !s.is_empty() => EmbeddingInput::Texts(vec![s.clone()]),
        Some(Value::Array(items)) if !items.is_empty() => match &items[0] {
            Value::String(_) => EmbeddingInput::Texts(
                items
                    .iter()
                    .map(|i| i.as_str().filter(|s| !s.is_empty()).map(str::to_string))
                    .collect::<Option<_>>()
                    .ok_or_else(bad)?,
            ),
            Value::Number(_) => EmbeddingInput::Tokens(vec![tokens(items).ok_or_else(bad)?]),
            Value::Array(_) => EmbeddingInput::Tokens(
                items.iter().map(|i| i.as_array().and_then(|a| tokens(a))).collect::<Option<_>>().ok_or_else(bad)?,
            ),
            _ => return Err(bad()),
        },
        Some(_) => return Err(bad()),
    };
    let n = match &input {
        EmbeddingInput::Texts(t) => t.len(),
        EmbeddingInput::Tokens(t) => t.len(),
    };
    if n > MAX_INPUTS {
        return Err(RequestProblem::new(
            format!("'input' holds {n} items; at most {MAX_INPUTS} are allowed."),
            "input",
        ));
    }
    Ok(input)
}

/// OpenAI's `CreateEmbeddingResponse`, built from vectors (in input order).
pub fn embeddings_response(
    vectors: &[Vec<f32>],
    model: &str,
    encoding: EncodingFormat,
    prompt_tokens: u32,
) -> serde_json::Result<Bytes> {
    #[derive(Serialize)]
    struct Resp<'a> {
        object: &'static str,
        data: Vec<Item>,
        model: &'a str,
        usage: EmbUsage,
    }
    #[derive(Serialize)]
    struct Item {
        object: &'static str,
        index: usize,
        embedding: Value,
    }
    #[derive(Serialize)]
    struct EmbUsage {
        prompt_tokens: u32,
        total_tokens: u32,
    }
    let data = vectors
        .iter()
        .enumerate()
        .map(|(index, v)| Item { object: "embedding", index, embedding: encode(v, encoding) })
        .collect();
    let resp = Resp { object: "list", data, model, usage: EmbUsage { prompt_tokens, total_tokens: prompt_tokens } };
    serde_json::to_vec(&resp).map(Bytes::from)
}

/// A vector as the client asked for it: numbers, or base64 of little-endian `f32`s (what
/// OpenAI's SDKs decode).
pub fn encode(v: &[f32], encoding: EncodingFormat) -> Value {
    match encoding {
        EncodingFormat::Float => Value::Array(
            v.iter().map(|x| serde_json::Number::from_f64(f64::from(*x)).map_or(Value::Null, Value::Number)).collect(),
        ),
        EncodingFormat::Base64 => {
            let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
            Value::String(base64::engine::general_purpose::STANDARD.encode(bytes))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<EmbeddingsRequest, RequestProblem> {
        EmbeddingsRequest::parse(v.to_string().as_bytes())
    }

    #[test]
    fn inputs() {
        assert_eq!(parse(json!({"model":"m","input":"hi"})).unwrap().texts().unwrap(), ["hi"]);
        assert_eq!(parse(json!({"model":"m","input":["a","b"]})).unwrap().len(), 2);
        assert_eq!(
            parse(json!({"model":"m","input":[1,2,3]})).unwrap().input,
            EmbeddingInput::Tokens(vec![vec![1, 2, 3]])
        );
        assert_eq!(parse(json!({"model":"m","input":[[1],[2]]})).unwrap().len(), 2);
        assert!(parse(json!({"model":"m","input":[[1],[2]]})).unwrap().is_pretokenized());
        assert!(!parse(json!({"model":"m","input":["a"]})).unwrap().is_pretokenized());
        for bad in [json!(""), json!([]), json!([""]), json!(["a", 1]), json!([[]]), json!({}), json!(3), json!([-1])] {
            let e = parse(json!({"model":"m","input":bad})).unwrap_err();
            assert_eq!(e.param.as_deref(), Some("input"), "{bad}");
        }
        assert_eq!(parse(json!({"model":"m"})).unwrap_err().param.as_deref(), Some("input"));
        assert_eq!(parse(json!({"input":"x"})).unwrap_err().param.as_deref(), Some("model"));
        let many: Vec<String> = (0..=MAX_INPUTS).map(|i| i.to_string()).collect();
        assert!(parse(json!({"model":"m","input":many})).is_err());
    }

    #[test]
    fn options() {
        let r = parse(json!({"model":"m","input":"x","encoding_format":"base64","dimensions":8,"extra":1})).unwrap();
        assert_eq!(r.encoding, EncodingFormat::Base64);
        assert_eq!(r.dimensions, Some(8));
        let up: Value = serde_json::from_slice(&r.openai_body("real").unwrap()).unwrap();
        assert_eq!(up["model"], "real");
        assert_eq!(up["extra"], 1);
        assert!(parse(json!({"model":"m","input":"x","encoding_format":"int8"})).is_err());
        assert!(parse(json!({"model":"m","input":"x","dimensions":0})).is_err());
        assert!(parse(json!({"model":"m","input":"x","user":5})).is_err());
    }

    #[test]
    fn base64_is_little_endian_f32() {
        let v = encode(&[1.0, -0.5], EncodingFormat::Base64);
        let bytes = base64::engine::general_purpose::STANDARD.decode(v.as_str().unwrap()).unwrap();
        assert_eq!(bytes, [1.0f32.to_le_bytes(), (-0.5f32).to_le_bytes()].concat());
        let body = embeddings_response(&[vec![0.25]], "m", EncodingFormat::Float, 3).unwrap();
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["data"][0]["embedding"], json!([0.25]));
        assert_eq!(v["usage"]["total_tokens"], 3);
        assert_eq!(v["object"], "list");
    }
}
