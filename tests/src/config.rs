//! Configuration: the services' URLs and the gw config file a stack runs with.

use std::path::PathBuf;

pub fn database_url() -> String {
    std::env::var("DATABASE_URL").unwrap_or_else(|_| "postgres://gw@127.0.0.1:15432/gw".into())
}

/// The Redis a test binary's stacks use. `GW_TEST_REDIS` chooses: unset, the services' Redis
/// (`REDIS_URL`); `tls`, a Redis of this binary's own that speaks TLS only; `cluster`, a
/// 3-master Redis Cluster of this binary's own. Those live until the binary exits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedisMode {
    Standalone,
    Tls,
    Cluster,
}

pub fn redis_mode() -> RedisMode {
    match std::env::var("GW_TEST_REDIS").as_deref() {
        Ok("tls") => RedisMode::Tls,
        Ok("cluster") => RedisMode::Cluster,
        _ => RedisMode::Standalone,
    }
}

static SHARED_TLS: std::sync::OnceLock<crate::topology::TlsRedis> = std::sync::OnceLock::new();
static SHARED_CLUSTER: std::sync::OnceLock<crate::topology::RedisCluster> = std::sync::OnceLock::new();

/// This binary's TLS Redis (started on first use, stopped when the binary exits).
pub fn shared_tls_redis() -> &'static crate::topology::TlsRedis {
    SHARED_TLS.get_or_init(|| crate::topology::TlsRedis::start_guarded(true))
}

/// This binary's Redis Cluster (started on first use, stopped when the binary exits).
pub fn shared_cluster() -> &'static crate::topology::RedisCluster {
    SHARED_CLUSTER.get_or_init(|| crate::topology::RedisCluster::start_guarded(3, 0, true))
}

/// Whether this binary's gw processes reach Postgres through PgBouncer in transaction mode
/// (`GW_TEST_PG=pgbouncer`: started by the binary, stopped when it exits). The tests' own checks
/// of what gw wrote still go straight to the server.
pub fn through_pgbouncer() -> bool {
    std::env::var("GW_TEST_PG").as_deref() == Ok("pgbouncer")
}

static SHARED_BOUNCER: std::sync::OnceLock<crate::topology::PgBouncer> = std::sync::OnceLock::new();

/// This binary's PgBouncer (started on first use, stopped when the binary exits).
pub fn shared_pgbouncer() -> &'static crate::topology::PgBouncer {
    SHARED_BOUNCER.get_or_init(|| crate::topology::PgBouncer::start_guarded(&database_url(), true))
}

/// The `[database]` table's connection keys for gw processes on the database `db`, in this
/// binary's mode.
pub fn database_keys(db: &str) -> String {
    // Only the shared server sits behind the binary's PgBouncer (a test's private Postgres does not).
    let server = |u: &str| url::Url::parse(u).ok().map(|u| (u.host_str().map(str::to_string), u.port()));
    if through_pgbouncer() && server(db) == server(&database_url()) {
        format!("url = \"{}\"\npooler = \"transaction\"\ndirect_url = \"{db}\"", shared_pgbouncer().in_front_of(db))
    } else {
        format!("url = \"{db}\"")
    }
}

pub fn redis_url() -> String {
    match redis_mode() {
        RedisMode::Standalone => std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:16379".into()),
        RedisMode::Tls => shared_tls_redis().url(),
        RedisMode::Cluster => shared_cluster().seeds()[0].clone(),
    }
}

/// The `[redis]` keys beside `url` this binary's mode needs (a cluster's seeds, a TLS CA).
pub fn redis_topology_config() -> String {
    match redis_mode() {
        RedisMode::Standalone => String::new(),
        RedisMode::Tls => shared_tls_redis().tls_config(),
        RedisMode::Cluster => shared_cluster().config(),
    }
}

pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A dead address: nobody listens on port 1 of the loopback interface (a privileged port no
/// test can take), so connecting is refused at once, however long the stack lives.
pub fn dead_url() -> String {
    "http://127.0.0.1:1/v1".to_string()
}

pub fn config_text(mock: &str, db: &str, ports: (u16, u16, u16), proxy_extra: &str, extra: &str) -> String {
    config_text_with_routing(mock, db, ports, proxy_extra, extra, SHARED_ROUTING)
}

/// Many tests use dead deployments on purpose; on the shared stack their circuits must not open
/// and health checks must not route around them. Breaker and health-check tests start stacks of
/// their own with `StackOptions::routing_config`.
pub(crate) const SHARED_ROUTING: &str = "circuit_failures = 1000000\nhealth_check_interval_ms = 0";

/// [`config_text`] with the `[routing]` table's keys given. `{mock}` in `extra` stands for the
/// mock upstream's URL (so extra providers can point at it, with `/k/<knobs>/` fault prefixes).
pub fn config_text_with_routing(
    mock: &str,
    db: &str,
    ports: (u16, u16, u16),
    proxy_extra: &str,
    extra: &str,
    routing: &str,
) -> String {
    let (proxy_port, metrics_port, admin_port) = ports;
    let extra = extra.replace("{mock}", mock);
    let database = database_keys(db);
    // The harness's own limits, unless the stack's `[proxy]` keys set them.
    let proxy_defaults: String =
        ["max_body_bytes = 65536", "upstream_connect_timeout_ms = 1000", "upstream_read_timeout_ms = 5000"]
            .iter()
            .filter(|line| {
                let key = line.split_once('=').map_or("", |(k, _)| k.trim());
                !proxy_extra.lines().any(|l| l.split_once('=').is_some_and(|(k, _)| k.trim() == key))
            })
            .map(|line| format!("{line}\n"))
            .collect();
    format!(
        r#"
[database]
{database}
pool_size = 4
[redis]
url = "{redis}"
{redis_topology}
pool_size = 4
[proxy]
listen = "127.0.0.1:{proxy_port}"
metrics_listen = "127.0.0.1:{metrics_port}"
threads = 1
{proxy_defaults}audit_spool_dir = "{spool}"
{proxy_extra}
[admin]
listen = "127.0.0.1:{admin_port}"
workers = 1
# Every test signs up and in from 127.0.0.1: per-address throttling is tested on a stack of its
# own (admin_auth.rs), with addresses taken from X-Forwarded-For.
ip_attempts = 1000000
# Every test registers organizations of its own (sign-up modes are tested on stacks of their own).
signup = "open"
max_concurrent_hashes = 4
# Tests read overviews over hours the rollup job has just aggregated, and seed rows years old
# (retention is tested on a database of its own).
rollup_interval_secs = 1
audit_retention_months = 0
# admin-extra

[routing]
{routing}

[[providers]]
name = "mock"
kind = "mock"
[[providers]]
name = "upstream"
kind = "openai"
base_url = "{mock}/v1"
api_key_env = "GW_TEST_UPSTREAM_KEY"
[[providers]]
name = "dead"
kind = "openai"
base_url = "{dead}"
[[providers]]
name = "anthropic"
kind = "anthropic"
base_url = "{mock}/v1"
api_key_env = "GW_TEST_UPSTREAM_KEY"
[[providers]]
name = "gemini"
kind = "gemini"
base_url = "{mock}/v1beta"
api_key_env = "GW_TEST_UPSTREAM_KEY"
[[providers]]
name = "azure"
kind = "azure"
base_url = "{mock}"
api_key_env = "GW_TEST_UPSTREAM_KEY"
api_version = "2024-10-21"
[[providers]]
name = "bedrock"
kind = "bedrock"
base_url = "{mock}"
region = "us-east-1"
api_key_env = "GW_TEST_AWS_CREDENTIALS"

[[models]]
name = "gpt-4o-mini"
deployments = [{{ provider = "upstream", model = "gpt-4o-mini-2024-07-18" }}]
[[models]]
name = "mock-model"
deployments = [{{ provider = "mock", model = "gpt-4o-mini" }}]
[[models]]
name = "dead-model"
deployments = [{{ provider = "dead", model = "gpt-4o-mini" }}]
[[models]]
name = "fallback-model"
deployments = [{{ provider = "dead", model = "gpt-4o-mini" }}, {{ provider = "upstream", model = "gpt-4o-mini-2024-07-18" }}]
[[models]]
name = "claude-test"
aliases = ["claude"]
deployments = [{{ provider = "anthropic", model = "claude-sonnet-4-5" }}]
[[models]]
name = "gemini-test"
deployments = [{{ provider = "gemini", model = "gemini-2.5-flash" }}]
[[models]]
name = "azure-test"
deployments = [{{ provider = "azure", model = "my-gpt4o" }}]
[[models]]
name = "bedrock-test"
deployments = [{{ provider = "bedrock", model = "anthropic.claude-3-haiku-20240307-v1:0" }}]
[[models]]
name = "text-embedding-3-small"
mode = "embedding"
deployments = [{{ provider = "upstream", model = "text-embedding-3-small" }}]
[[models]]
name = "mock-embedding"
mode = "embedding"
deployments = [{{ provider = "mock", model = "text-embedding-3-small" }}]
[[models]]
name = "gemini-embedding"
mode = "embedding"
deployments = [{{ provider = "gemini", model = "gemini-embedding-001" }}]
[[models]]
name = "azure-embedding"
mode = "embedding"
deployments = [{{ provider = "azure", model = "my-embedding" }}]
{extra}

[pricing]
"gpt-4o-mini" = {{ input_per_mtok = "0.15", output_per_mtok = "0.60" }}
"gpt-4o-mini-2024-07-18" = {{ input_per_mtok = "0.15", output_per_mtok = "0.60" }}
"claude-sonnet-4-5" = {{ input_per_mtok = "3", output_per_mtok = "15", cached_input_per_mtok = "0.3", cache_write_per_mtok = "3.75" }}
"gemini-2.5-flash" = {{ input_per_mtok = "0.3", output_per_mtok = "2.5", cached_input_per_mtok = "0.03" }}
"my-gpt4o" = {{ input_per_mtok = "2.5", output_per_mtok = "10" }}
"anthropic.claude-3-haiku-20240307-v1:0" = {{ input_per_mtok = "0.25", output_per_mtok = "1.25" }}
"text-embedding-3-small" = {{ input_per_mtok = "0.02", output_per_mtok = "0" }}
"gemini-embedding-001" = {{ input_per_mtok = "0.15", output_per_mtok = "0" }}
"my-embedding" = {{ input_per_mtok = "0.02", output_per_mtok = "0" }}
"#,
        redis = redis_url(),
        redis_topology = redis_topology_config(),
        dead = dead_url(),
        spool = std::env::temp_dir().join(format!("gw-spool-{proxy_port}")).display(),
    )
}

/// `config` with the `[admin]` keys of `extra` added, replacing those it repeats.
pub(crate) fn with_admin_keys(config: &str, extra: &str) -> String {
    let keys: Vec<&str> = extra.lines().filter_map(|l| l.split_once('=')).map(|(k, _)| k.trim()).collect();
    let mut out = String::with_capacity(config.len() + extra.len());
    let mut in_admin = false;
    for line in config.lines() {
        let t = line.trim_start();
        if t.starts_with('[') {
            in_admin = t == "[admin]";
        }
        let repeated = in_admin && t.split_once('=').is_some_and(|(k, _)| keys.contains(&k.trim()));
        if !repeated {
            out.push_str(line);
            out.push('\n');
        }
        if t == "# admin-extra" {
            out.push_str(extra);
            out.push('\n');
        }
    }
    out
}

/// Extra config: `gpt-responses`, a deployment (provider `responses`) of the mock serving the
/// Responses API (`responses_api`), so `/v1/responses` requests pass through to it.
pub const RESPONSES_DEPLOYMENT: &str = r#"
[[providers]]
name = "responses"
kind = "openai"
base_url = "{mock}/v1"
api_key_env = "GW_TEST_UPSTREAM_KEY"
responses_api = true
[[models]]
name = "gpt-responses"
deployments = [{ provider = "responses", model = "gpt-4o-mini-2024-07-18" }]
"#;

/// An address the tool-calling deployments of [`tool_calling_models`] put in their arguments.
pub const TOOL_EMAIL: &str = "jane.roe@example.com";

/// Extra config for a private stack: OpenAI-compatible deployments of the mock that answer with a
/// call of the request's first tool (the mock makes OpenAI tool calls only when a knob says so,
/// and the Messages and Responses APIs' bodies have no room for its per-request knobs), streamed
/// three characters a delta. `gpt-tools` calls with `{"city":"Paris"}`, `gpt-pii-tools` with
/// `{"email":"<TOOL_EMAIL>","city":"Paris"}`; each has a twin named `<name>-responses` whose
/// provider serves the Responses API too (`responses_api`).
pub fn tool_calling_models() -> String {
    let knob = |args: &str| {
        let encoded: String = args
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || ".@".contains(c) {
                    c.to_string()
                } else {
                    format!("%{:02X}", c as u32)
                }
            })
            .collect();
        format!("tool_call_arguments={encoded},chunk_chars=3")
    };
    let mut out = String::new();
    for (name, args) in [
        ("gpt-tools", r#"{"city":"Paris"}"#.to_string()),
        ("gpt-pii-tools", format!(r#"{{"email":"{TOOL_EMAIL}","city":"Paris"}}"#)),
    ] {
        for (name, responses_api) in [(name.to_string(), false), (format!("{name}-responses"), true)] {
            out.push_str(&format!(
                "[[providers]]\nname = \"{name}\"\nkind = \"openai\"\nbase_url = \"{{mock}}/k/{}/v1\"\n\
                 api_key_env = \"GW_TEST_UPSTREAM_KEY\"\nresponses_api = {responses_api}\n\
                 [[models]]\nname = \"{name}\"\ndeployments = [{{ provider = \"{name}\", model = \"gpt-4o-mini\" }}]\n",
                knob(&args)
            ));
        }
    }
    out
}

/// The `pii_redact` policy (prompts and answers) [`org_with_output_pii_policy`] sets up.
pub const OUTPUT_PII_POLICY: &str = "pii_out";

/// A new organization with [`OUTPUT_PII_POLICY`] (requests opt in with `x-gw-policy`); its key.
pub async fn org_with_output_pii_policy(stack: &crate::Stack) -> String {
    let (s, key, _) = stack.org_with_key().await;
    let doc = serde_json::json!({"policies": [{"name": OUTPUT_PII_POLICY, "guardrails": [{"type": "pii_redact", "output": true}]}]});
    crate::json_of(stack.admin_put("/organizations/current/policy", &s.access_token, &doc).await, 200).await;
    key
}

/// Asserts that no piece of [`TOOL_EMAIL`]'s local part three characters long is in `text` (the
/// tool-calling deployments stream their arguments three characters a delta).
pub fn assert_no_piece_of_tool_email(text: &str) {
    let local = &TOOL_EMAIL[..TOOL_EMAIL.find('@').unwrap_or(0)];
    for start in 0..=local.len().saturating_sub(3) {
        let piece = &local[start..start + 3];
        assert!(!text.contains(piece), "{piece:?} of the address got through: {text}");
    }
}
