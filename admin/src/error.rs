//! The admin API's error type and its one mapping to HTTP. Every `/api/v1` error has the shape
//! `{"error":{"code":"...","message":"...","fields":[{"field":"...","message":"..."}]}}`;
//! `fields` names the request fields at fault (empty when the fault is not a field's).

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
use serde::Serialize;
use thiserror::Error;

pub type ApiResult<T> = Result<T, ApiError>;

#[derive(Debug, Error)]
pub enum ApiError {
    #[error("{0}")]
    Validation(String),
    /// One request field is invalid.
    #[error("{field}: {message}")]
    Field { field: String, message: String },
    /// Several request fields are invalid (never empty).
    #[error("{}", fields_text(.0))]
    Fields(Vec<FieldError>),
    #[error("{0}")]
    Unauthorized(String),
    /// The password was right and the account's second factor is missing or wrong.
    #[error("{0}")]
    SecondFactorRequired(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("{0} not found")]
    NotFound(&'static str),
    /// A known path asked with a method it does not answer; holds the `Allow` list.
    #[error("method not allowed on this path; allowed: {0}")]
    MethodNotAllowed(String),
    /// The organization's plan does not include the feature.
    #[error("{0}")]
    PlanRequired(String),
    #[error("{0}")]
    Conflict(String),
    #[error("request body is larger than the {0}-byte limit")]
    PayloadTooLarge(usize),
    #[error("{0}")]
    Unavailable(String),
    /// A server gw called on the caller's behalf (a provider's report API) failed; the message
    /// names it and at most a status, never its answer.
    #[error("{0}")]
    BadGateway(String),
    /// Too many attempts; holds the seconds after which a retry may succeed.
    #[error("too many attempts; retry in {0} seconds")]
    TooManyRequests(u64),
    #[error("internal error")]
    Internal(String),
}

/// The error body of every `/api/v1` response that is not a success.
#[derive(Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct ErrorDetail {
    /// Machine-readable: `validation_error`, `unauthorized`, `second_factor_required`, `forbidden`, `not_found`,
    /// `method_not_allowed`, `conflict`, `payload_too_large`, `rate_limited`, `plan_required`,
    /// `unavailable`, `bad_gateway`, `internal_error`.
    pub code: String,
    pub message: String,
    /// The request fields at fault; empty when the error is not about a field.
    pub fields: Vec<FieldError>,
}

#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

fn fields_text(fields: &[FieldError]) -> String {
    fields.iter().map(|f| format!("{}: {}", f.field, f.message)).collect::<Vec<_>>().join("; ")
}

impl ApiError {
    pub fn field(field: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError::Field { field: field.into(), message: message.into() }
    }
}

impl ApiError {
    pub fn code(&self) -> &'static str {
        match self {
            ApiError::Validation(_) | ApiError::Field { .. } | ApiError::Fields(_) => "validation_error",
            ApiError::Unauthorized(_) => "unauthorized",
            ApiError::SecondFactorRequired(_) => "second_factor_required",
            ApiError::Forbidden(_) => "forbidden",
            ApiError::NotFound(_) => "not_found",
            ApiError::MethodNotAllowed(_) => "method_not_allowed",
            ApiError::Conflict(_) => "conflict",
            ApiError::PayloadTooLarge(_) => "payload_too_large",
            ApiError::Unavailable(_) => "unavailable",
            ApiError::BadGateway(_) => "bad_gateway",
            ApiError::TooManyRequests(_) => "rate_limited",
            ApiError::PlanRequired(_) => "plan_required",
            ApiError::Internal(_) => "internal_error",
        }
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        match self {
            ApiError::Validation(_) | ApiError::Field { .. } | ApiError::Fields(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized(_) | ApiError::SecondFactorRequired(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::BadGateway(_) => StatusCode::BAD_GATEWAY,
            ApiError::TooManyRequests(_) => StatusCode::TOO_MANY_REQUESTS,
            ApiError::PlanRequired(_) => StatusCode::PAYMENT_REQUIRED,
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
                resp.insert_header(("Allow", allow.as_str()));
            }
            ApiError::TooManyRequests(secs) => {
                resp.insert_header(("Retry-After", secs.max(&1).to_string()));
            }
            _ => {}
        }
        let (message, fields) = match self {
            ApiError::Field { field, message } => {
                (format!("{field}: {message}"), vec![FieldError { field: field.clone(), message: message.clone() }])
            }
            ApiError::Fields(fields) => (fields_text(fields), fields.clone()),
            other => (other.to_string(), Vec::new()),
        };
        resp.json(ErrorBody { error: ErrorDetail { code: self.code().to_string(), message, fields } })
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

/// The error responses any `/api/v1` operation may give, all with [`ErrorBody`]; listed on every
/// operation of the OpenAPI document.
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)]
pub enum Errors {
    /// The request is invalid: a field (named in `fields`), the body or the query.
    #[response(status = 400)]
    BadRequest(ErrorBody),
    /// No valid session access token, or its session has ended.
    #[response(status = 401)]
    Unauthorized(ErrorBody),
    /// The organization's plan does not include the feature.
    #[response(status = 402)]
    PlanRequired(ErrorBody),
    /// The member's role does not allow the operation.
    #[response(status = 403)]
    Forbidden(ErrorBody),
    /// No such resource in this organization.
    #[response(status = 404)]
    NotFound(ErrorBody),
    /// The path does not answer this method; `Allow` lists the ones it does.
    #[response(status = 405)]
    MethodNotAllowed(ErrorBody),
    /// The request conflicts with the resource's state.
    #[response(status = 409)]
    Conflict(ErrorBody),
    /// The body is larger than the limit.
    #[response(status = 413)]
    PayloadTooLarge(ErrorBody),
    /// Too many attempts; see `Retry-After`.
    #[response(status = 429)]
    TooManyRequests(ErrorBody),
    /// Something failed inside gw; the detail is in its log, under the request's id.
    #[response(status = 500)]
    Internal(ErrorBody),
    /// A server gw called for the request failed (a provider's report API).
    #[response(status = 502)]
    BadGateway(ErrorBody),
    /// A store is unavailable; retry shortly.
    #[response(status = 503)]
    Unavailable(ErrorBody),
}
