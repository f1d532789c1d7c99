//! The request extractors of `/api/v1`. `Json`: like `web::Json` (same size limit and error
//! handler), but the body must be a JSON object (serde would otherwise read a struct from a JSON
//! array by position, `["name"]` creating a team, which no client means). `Query`: like
//! `web::Query`. Both name every field at fault (`crate::decode`).

use std::ops::Deref;

use actix_web::dev::Payload;
use actix_web::{web, FromRequest, HttpRequest};
use futures::future::LocalBoxFuture;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::ApiError;

pub struct Json<T>(pub T);

/// The path of the first string (or key) holding a NUL, which PostgreSQL cannot store in text or
/// JSONB: refused here as the client's error rather than failing as the database's.
fn nul_at(value: &Value, path: &str) -> Option<String> {
    let join = |k: &str| if path.is_empty() { k.to_string() } else { format!("{path}.{k}") };
    match value {
        Value::String(s) if s.contains('\0') => Some(if path.is_empty() { "body".into() } else { path.to_string() }),
        Value::Array(items) => items.iter().enumerate().find_map(|(i, v)| nul_at(v, &format!("{path}[{i}]"))),
        Value::Object(map) => {
            map.iter().find_map(|(k, v)| if k.contains('\0') { Some(join("<key>")) } else { nul_at(v, &join(k)) })
        }
        _ => None,
    }
}

impl<T> Json<T> {
    pub fn into_inner(self) -> T {
        self.0
    }
}

impl<T> Deref for Json<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T: DeserializeOwned + 'static> FromRequest for Json<T> {
    type Error = actix_web::Error;
    type Future = LocalBoxFuture<'static, Result<Self, Self::Error>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let value = web::Json::<Value>::from_request(req, payload);
        Box::pin(async move {
            let value = value.await?.into_inner();
            if !value.is_object() {
                return Err(ApiError::Validation("the body must be a JSON object".into()).into());
            }
            if let Some(path) = nul_at(&value, "") {
                return Err(ApiError::field(path, "must not contain NUL characters").into());
            }
            crate::decode::json(value).map(Json).map_err(Into::into)
        })
    }
}

/// An optional JSON body: absent (or only whitespace) is `T::default()`, anything else must be a
/// JSON object that reads as `T` (problems named like [`Json`]'s).
pub fn optional_json<T: DeserializeOwned + Default>(raw: &[u8]) -> Result<T, ApiError> {
    if raw.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    let value: Value =
        serde_json::from_slice(raw).map_err(|e| ApiError::Validation(format!("invalid JSON body: {e}")))?;
    if !value.is_object() {
        return Err(ApiError::Validation("the body must be a JSON object".into()));
    }
    crate::decode::json(value)
}

/// A query string read into `T`; problems are 400s naming each parameter at fault.
pub struct Query<T>(pub T);

impl<T> Query<T> {
    pub fn into_inner(self) -> T {
        self.0
    }
}

impl<T> Deref for Query<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T: DeserializeOwned + 'static> FromRequest for Query<T> {
    type Error = actix_web::Error;
    type Future = std::future::Ready<Result<Self, Self::Error>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        std::future::ready(crate::decode::query(req.query_string()).map(Query).map_err(Into::into))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nul_characters_are_found_with_their_path() {
        let v = serde_json::json!({"name": "ok", "metadata": {"a": ["x", "b\u{0}"]}});
        assert_eq!(nul_at(&v, "").as_deref(), Some("metadata.a[1]"));
        assert_eq!(nul_at(&serde_json::json!({"a": 1, "b": [true, null]}), ""), None);
        assert_eq!(nul_at(&serde_json::json!({"k\u{0}": 1}), "").as_deref(), Some("<key>"));
    }
}
