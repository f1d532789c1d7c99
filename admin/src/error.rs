//! The admin API's error type and its one mapping to HTTP. Every `/api/v1` error has the shape
//! `{"error":{"code":"...","message":"..."}}`.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
use serde::Serialize;
use thiserror::Error;

pub type ApiResult<T> = Result<T, ApiError>;

#[derive(Debug, Error)]
pub enum ApiError {
    #[error("{0}")]
    Validation(String),
    #[error("{0}")]
    Unauthorized(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("{0} not found")]
    NotFound(&'static str),
    /// A known path asked with a method it does not answer; holds the `Allow` list.
    #[error("method not allowed on this path; allowed: {0}")]
    MethodNotAllowed(&'static str),
    #[error("{0}")]
    Conflict(String),
    #[error("request body is larger than the {0}-byte limit")]
    PayloadTooLarge(usize),
    #[error("{0}")]
    Unavailable(String),
    #[error("internal error")]
    Internal(String),
}

#[derive(Serialize)]
struct Body<'a> {
    error: Inner<'a>,
}

#[derive(Serialize)]
struct Inner<'a> {
    code: &'a str,
    message: String,
}

impl ApiError {
    pub fn code(&self) -> &'static str {
        match self {
            ApiError::Validation(_) => "validation_error",
            ApiError::Unauthorized(_) => "unauthorized",
            ApiError::Forbidden(_) => "forbidden",
            ApiError::NotFound(_) => "not_found",
            ApiError::MethodNotAllowed(_) => "method_not_allowed",
            ApiError::Conflict(_) => "conflict",
            ApiError::PayloadTooLarge(_) => "payload_too_large",
            ApiError::Unavailable(_) => "unavailable",
            ApiError::Internal(_) => "internal_error",
        }
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        match self {
            ApiError::Validation(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn error_response(&self) -> HttpResponse {
        if let ApiError::Internal(detail) = self {
            // The detail may name tables or hosts: it goes to the log, never to the client.
            log::error!("internal error: {detail}");
        }
        let mut resp = HttpResponse::build(self.status_code());
        match self {
            ApiError::Unauthorized(_) => {
                resp.insert_header(("WWW-Authenticate", "Bearer"));
            }
            ApiError::MethodNotAllowed(allow) => {
                resp.insert_header(("Allow", *allow));
            }
            _ => {}
        }
        resp.json(Body { error: Inner { code: self.code(), message: self.to_string() } })
    }
}

impl From<gw_shared::Error> for ApiError {
    fn from(e: gw_shared::Error) -> Self {
        use gw_shared::Error as E;
        match e {
            E::Pool(m) => unavailable("database", &m),
            E::Redis(m) => unavailable("redis", &m),
            E::Invalid(m) => ApiError::Validation(m),
            other => ApiError::Internal(other.to_string()),
        }
    }
}

impl From<diesel::result::Error> for ApiError {
    fn from(e: diesel::result::Error) -> Self {
        ApiError::from(gw_shared::Error::from(e))
    }
}

impl From<diesel_async::pooled_connection::deadpool::PoolError> for ApiError {
    fn from(e: diesel_async::pooled_connection::deadpool::PoolError) -> Self {
        unavailable("database", &e.to_string())
    }
}

/// Store errors can name hosts and users: the detail goes to the log, the client gets the gist.
fn unavailable(store: &str, detail: &str) -> ApiError {
    log::error!("{store} unavailable: {detail}");
    ApiError::Unavailable(format!("the {store} is unavailable; retry shortly"))
}

/// Whether a shared error is a unique-constraint violation (e.g. an e-mail already registered).
pub fn is_unique_violation(e: &gw_shared::Error) -> bool {
    matches!(
        e,
        gw_shared::Error::Database(diesel::result::Error::DatabaseError(
            diesel::result::DatabaseErrorKind::UniqueViolation,
            _
        ))
    )
}
