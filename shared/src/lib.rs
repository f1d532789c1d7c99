//! gw-shared: everything the data plane (`gw-proxy`) and the control plane (`gw-admin`) both need,
//! as plain functions and small types. No HTTP server code lives here.

pub mod accounts;
pub mod analytics;
pub mod audit;
pub mod billing;
pub mod cache;
pub mod catalog;
pub mod client_addr;
pub mod clock;
pub mod config;
pub mod crypto;
pub mod db;
pub mod email;
pub mod error;
pub mod experiments;
pub mod headers;
pub mod ids;
pub mod json_keys;
pub mod jwt;
pub mod keys;
pub mod limits;
pub mod messages;
pub mod money;
pub mod net_guard;
pub mod openai;
pub mod password;
pub mod policy;
pub mod pricing;
pub mod prompt_template;
pub mod providers;
pub mod reconcile;
pub mod redis;
pub mod responses;
pub mod roles;
pub mod routing;
pub mod sso;
pub mod webhooks;

pub use error::{Error, Result};
