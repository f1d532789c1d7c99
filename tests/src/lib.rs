//! Test harness: starts the real binaries (mock upstream, gw-admin, gw-proxy) on free loopback
//! ports against the real Postgres and Redis, and helpers to drive them over HTTP.
//!
//! Most tests use [`Stack::shared`]: one stack per test binary, started on first use and stopped
//! when the binary exits. Tests stay apart by owning their data: each registers its own
//! organization, and steers the shared mock upstream per request (a `"mock": {...}` object in the
//! request body, with a unique `tag` when it reads `GET /_mock/stats`), never globally. A test
//! that needs its own configuration, or to stop or signal a process, starts a private stack with
//! [`Stack::start_with`], whose processes die with the handle.

//! The harness is split by role: `process` (binaries, ports, spawning), `config` (URLs and the
//! config file), `stack` (shared and private stacks, sessions), `client` (HTTP helpers),
//! `assert` (answers and error bodies), `db` (direct database reads), `private` (a Postgres or
//! Redis of a test's own). Everything is re-exported here: tests `use gw_tests::*`.

mod assert;
mod client;
mod config;
pub mod db;
mod private;
mod process;
mod stack;
pub mod topology;

pub use assert::*;
pub use client::*;
pub use config::*;
pub use private::*;
pub use process::*;
pub use stack::*;

pub const JWT_SECRET: &str = "gw-test-jwt-secret-0123456789abcdef0123456789";

/// The master key every test stack seals provider keys with (32 bytes, base64).
pub const ENCRYPTION_KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

/// Bedrock credentials of the test stacks (`ACCESS_KEY_ID:SECRET`): the mock checks the
/// signature's shape, not its value.
pub const AWS_TEST_CREDENTIALS: &str = "AKIDGWTEST:gw-test-aws-secret";

/// The password [`Stack::register`] gives every user.
pub const PASSWORD: &str = "correct horse battery";
