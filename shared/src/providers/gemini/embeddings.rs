//! Gemini: OpenAI embeddings requests as batchEmbedContents, and back.

use super::*;

/// The `batchEmbedContents` body: one request per input, in order.
pub(super) fn to_gemini_embeddings(texts: &[String], model: &str, dimensions: Option<u32>) -> Value {
    let resource = format!("models/{model}");
    let requests: Vec<Value> = texts
        .iter()
        .map(|text| {
            let mut request = Map::new();
            request.insert("model".into(), Value::String(resource.clone()));
            request.insert("content".into(), json!({"parts": [{ "text": text }]}));
            if let Some(d) = dimensions {
                request.insert("outputDimensionality".into(), d.into());
            }
            Value::Object(request)
        })
        .collect();
    json!({ "requests": requests })
}

/// Prompt tokens of an embeddings request, estimated: `batchEmbedContents` reports no usage, yet
/// the request has a cost. About four characters per token (Google's rule of thumb for Gemini
/// models), rounded up for each input.
pub(super) fn estimate_tokens(texts: &[String]) -> u32 {
    texts.iter().map(|t| u32::try_from(t.chars().count().div_ceil(4)).unwrap_or(u32::MAX)).fold(0, u32::saturating_add)
}

#[derive(Debug, Deserialize)]
pub(super) struct BatchEmbeddings {
    pub(super) embeddings: Vec<Embedding>,
}

#[derive(Debug, Deserialize)]
pub(super) struct Embedding {
    pub(super) values: Vec<f32>,
}

/// A `batchEmbedContents` answer as OpenAI's `CreateEmbeddingResponse`, encoded as the client
/// asked, with the estimated prompt tokens as its usage (see [`estimate_tokens`]).
pub(super) fn from_gemini_embeddings(
    request: &EmbeddingsRequest,
    upstream_model: &str,
    body: &[u8],
) -> Result<Completion, UpstreamError> {
    let answer: BatchEmbeddings = serde_json::from_slice(body).map_err(|e| {
        UpstreamError::bad_response(format!("not a Gemini embeddings response: {e}: {}", log_snippet(body)))
    })?;
    if answer.embeddings.len() != request.len() {
        return Err(UpstreamError::bad_response(format!(
            "{} embeddings for {} inputs: {}",
            answer.embeddings.len(),
            request.len(),
            log_snippet(body)
        )));
    }
    let vectors: Vec<Vec<f32>> = answer.embeddings.into_iter().map(|e| e.values).collect();
    let prompt_tokens = request.texts().map(estimate_tokens).unwrap_or(0);
    let body = embeddings_response(&vectors, upstream_model, request.encoding, prompt_tokens)
        .map_err(|e| UpstreamError::bad_response(e.to_string()))?;
    Ok(Completion { body, usage: Some(TokenUsage { prompt_tokens, ..TokenUsage::default() }) })
}
