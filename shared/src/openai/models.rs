//! `GET /v1/models`.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ModelList {
    pub object: String,
    pub data: Vec<ModelObject>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ModelObject {
    pub id: String,
    pub object: String,
    pub created: i64,
    pub owned_by: String,
}

impl ModelList {
    pub fn new(data: Vec<ModelObject>) -> Self {
        Self { object: "list".into(), data }
    }
}

impl ModelObject {
    pub fn new(id: &str, created: i64, owned_by: &str) -> Self {
        Self { id: id.into(), object: "model".into(), created, owned_by: owned_by.into() }
    }
}
