//! Provider adapters: how a request reaches an upstream and how its answer comes back.
//! `mock` answers in-process; `openai` speaks to any OpenAI-compatible HTTP API.

pub mod mock;
pub mod openai;
mod url;

pub use url::UpstreamUrl;
