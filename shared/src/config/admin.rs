//! The `[admin]` table: the management API's listener, sessions, sign-in throttling and
//! password hashing.

use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdminConfig {
    pub listen: String,
    pub workers: usize,
    pub access_token_ttl_secs: i64,
    /// Lifetime of one refresh token (each refresh issues a new one).
    pub refresh_token_ttl_secs: i64,
    /// Absolute lifetime of a sign-in session, whatever its refreshes.
    pub session_max_age_secs: i64,
    /// How long after a refresh a second refresh with the same token gets the same successor
    /// (two tabs refreshing at once) instead of tripping reuse detection.
    pub refresh_grace_secs: i64,
    pub max_body_bytes: usize,
    /// The address users reach this API at (SSO redirect URIs are built from it).
    pub public_url: Option<String>,
    /// Lifetime of an invite token.
    pub invite_ttl_secs: i64,
    /// Password hashes (argon2id, ~19 MiB and tens of ms each) computed at once; more wait.
    pub max_concurrent_hashes: usize,
    /// How long a sign-in waits for a hashing slot before 503.
    pub hash_wait_ms: u64,
    /// Sign-in and sign-up attempts allowed per client address per `ip_window_secs`.
    pub ip_attempts: u64,
    pub ip_window_secs: u64,
    /// Failed sign-ins allowed per account from one client address per `account_window_secs`:
    /// guessing from one place stops here, and the owner signing in from another is not kept
    /// out.
    pub account_failures: u64,
    pub account_window_secs: u64,
    /// Failed sign-ins allowed per account from all addresses together per
    /// `account_window_secs` (a distributed guess); a password reset clears it.
    pub account_total_failures: u64,
    /// Take the client address from the last `X-Forwarded-For` entry (behind a trusted proxy).
    pub trust_forwarded_for: bool,
    /// Sign-up answers 202 the same way for new and registered addresses and mails a link;
    /// the account exists once the link's token comes back (`POST /auth/verify-email`). Off:
    /// sign-up answers with a session at once (and 409 for a registered address).
    pub email_verification: bool,
    /// Lifetime of a sign-up confirmation link.
    pub verification_ttl_secs: i64,
    /// Months of audit log kept, counting the current one: older monthly partitions are
    /// dropped whole. 0 keeps everything.
    pub audit_retention_months: u32,
    /// How often the leader refreshes the hourly analytics aggregates.
    pub rollup_interval_secs: u64,
    /// How often the leader raises each budget's Redis counter to the spend the audit log holds
    /// (a Redis that lost data); at once, whatever this says, when Redis's epoch marker is gone.
    pub budget_reconcile_secs: u64,
    /// How long invalidation-log entries are kept: a proxy cut off for longer clears every
    /// cache when it reconnects instead of applying what it missed.
    pub invalidation_retention_secs: u64,
    /// Rows one compliance export holds at most.
    pub export_max_rows: u64,
    /// Networks (CIDR) that requests to tenant-chosen URLs (SSO identity providers) may reach
    /// although they are not public: an identity provider on the operator's own network. Empty:
    /// public addresses only (`gw_shared::net_guard`).
    pub outbound_allow: Vec<ipnet::IpNet>,
    /// Webhook endpoints may be plain `http://` URLs (tests, a receiver on the operator's own
    /// network); otherwise `https://` only.
    pub webhooks_allow_http: bool,
    /// How often the webhook relay looks for new events and due deliveries.
    pub webhooks_poll_ms: u64,
    /// Days a finished webhook delivery (and its attempts) stays in the history.
    pub webhook_history_days: u32,
    /// The DNS server (`ip:port`) that e-mail domain proofs (TXT records) and the names of
    /// outbound destinations (webhook endpoints, identity providers) are looked up through;
    /// unset: the system's resolvers (`/etc/resolv.conf`).
    pub dns_resolver: Option<std::net::SocketAddr>,
    /// Lifetime of a password reset link.
    pub password_reset_ttl_secs: i64,
    /// The issuer name in TOTP authenticator apps.
    pub totp_issuer: String,
    /// Who may create accounts and organizations: `open` (anyone signs up an organization),
    /// `invite_only` (the default: no sign-up; invites and SSO create accounts), `closed` (no new
    /// accounts at all: invites admit existing accounts only, SSO creates none; the operator's
    /// `gw-admin bootstrap` still works).
    pub signup: SignupMode,
    /// How often the leader checks running experiments for completion (a winner, or every
    /// variant at its sample cap).
    pub experiment_check_secs: u64,
    /// Where the playground sends its calls: the proxy's `/v1` base (`http://host:port`); unset:
    /// `http://<proxy.listen>` (an unspecified address as loopback).
    pub proxy_url: Option<String>,
    /// Longest a playground comparison waits for its models.
    pub playground_timeout_secs: u64,
}

/// `admin.signup`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SignupMode {
    Open,
    InviteOnly,
    Closed,
}

impl SignupMode {
    pub fn as_str(self) -> &'static str {
        match self {
            SignupMode::Open => "open",
            SignupMode::InviteOnly => "invite_only",
            SignupMode::Closed => "closed",
        }
    }
}

impl Default for AdminConfig {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:8081".into(),
            workers: 2,
            access_token_ttl_secs: 15 * 60,
            refresh_token_ttl_secs: 14 * 24 * 3600,
            session_max_age_secs: 30 * 24 * 3600,
            refresh_grace_secs: 10,
            max_body_bytes: 256 * 1024,
            public_url: None,
            invite_ttl_secs: 7 * 24 * 3600,
            max_concurrent_hashes: 2,
            hash_wait_ms: 5000,
            ip_attempts: 30,
            ip_window_secs: 60,
            account_failures: 10,
            account_window_secs: 15 * 60,
            account_total_failures: 100,
            trust_forwarded_for: false,
            email_verification: false,
            verification_ttl_secs: 24 * 3600,
            audit_retention_months: 13,
            rollup_interval_secs: 60,
            budget_reconcile_secs: 60,
            invalidation_retention_secs: 86_400,
            export_max_rows: 50_000_000,
            outbound_allow: Vec::new(),
            webhooks_allow_http: false,
            webhooks_poll_ms: 1000,
            webhook_history_days: 30,
            dns_resolver: None,
            password_reset_ttl_secs: 3600,
            totp_issuer: "gw".into(),
            signup: SignupMode::InviteOnly,
            experiment_check_secs: 30,
            proxy_url: None,
            playground_timeout_secs: 120,
        }
    }
}

impl AdminConfig {
    /// `public_url`, or `http://<listen>`.
    pub fn public_base(&self) -> String {
        self.public_url.clone().unwrap_or_else(|| format!("http://{}", self.listen)).trim_end_matches('/').to_string()
    }
}
