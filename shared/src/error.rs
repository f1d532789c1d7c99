//! The shared crate's error type. Each binary maps it to HTTP in exactly one place.

use thiserror::Error;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, Error)]
pub enum Error {
    #[error("configuration error: {0}")]
    Config(String),
    #[error("database error: {0}")]
    Database(#[from] diesel::result::Error),
    #[error("database pool error: {0}")]
    Pool(String),
    #[error("redis error: {0}")]
    Redis(String),
    #[error("crypto error: {0}")]
    Crypto(String),
    #[error("invalid token: {0}")]
    Token(String),
    #[error("{0}")]
    Invalid(String),
}

impl From<redis::RedisError> for Error {
    fn from(e: redis::RedisError) -> Self {
        Error::Redis(e.to_string())
    }
}

impl From<diesel_async::pooled_connection::deadpool::PoolError> for Error {
    fn from(e: diesel_async::pooled_connection::deadpool::PoolError) -> Self {
        Error::Pool(e.to_string())
    }
}
