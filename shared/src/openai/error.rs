//! The OpenAI error object, `{"error":{"message","type","param","code"}}`: official SDKs pick
//! their exception class from the HTTP status and read these fields.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ErrorBody {
    pub error: ErrorObject,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ErrorObject {
    pub message: String,
    #[serde(rename = "type")]
    pub kind: String,
    /// Required by the schema, nullable: always serialized.
    pub param: Option<String>,
    pub code: Option<String>,
}

impl ErrorBody {
    pub fn new(message: impl Into<String>, kind: &str, code: Option<&str>, param: Option<&str>) -> Self {
        Self {
            error: ErrorObject {
                message: message.into(),
                kind: kind.into(),
                param: param.map(Into::into),
                code: code.map(Into::into),
            },
        }
    }
}
