//! OpenAI wire types for the `/v1` surface. Request types keep unknown fields (`extra`) so
//! nothing a client sends is lost on the way upstream; response types always serialize the
//! fields OpenAI's OpenAPI document marks required, nullable ones as `null`.

pub mod chat;
pub mod embeddings;
pub mod error;
pub mod models;
pub mod request;
pub mod stream;
pub mod validate;

pub use chat::*;
pub use embeddings::*;
pub use error::*;
pub use models::*;
pub use request::*;
pub use stream::*;
