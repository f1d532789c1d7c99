//! The JSON body extractor of `/api/v1`: like `web::Json` (same size limit and error handler),
//! but the body must be a JSON object. serde would otherwise read a struct from a JSON array
//! by position (`["name"]` creating a team), which no client means.

use std::ops::Deref;

use actix_web::dev::Payload;
use actix_web::{web, FromRequest, HttpRequest};
use futures::future::LocalBoxFuture;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::ApiError;

pub struct Json<T>(pub T);

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
            serde_json::from_value(value)
                .map(Json)
                .map_err(|e| ApiError::Validation(format!("invalid JSON body: {e}")).into())
        })
    }
}
