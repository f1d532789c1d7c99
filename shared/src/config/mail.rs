//! The `[mail]` table: how the admin's outbox relay delivers mail (invites, sign-up
//! confirmations, password resets) over SMTP. Without `smtp_url` nothing is sent: mail waits in
//! the outbox, and invites return their token to the inviter instead (docs/mail.md).

use serde::Deserialize;

#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MailConfig {
    /// `smtp://host:587?tls=required` (STARTTLS, refused without it), `smtps://host:465` (TLS
    /// from the start), `?tls=opportunistic` (STARTTLS when offered), or plain `smtp://host:25`
    /// (a local relay); `user:password@` authenticates. Overridden by `GW_SMTP_URL` (it may hold a password: keep it out of
    /// files).
    pub smtp_url: Option<String>,
    /// The sender address (`gw <noreply@example.com>`).
    pub from: String,
    /// Delivery attempts of one message before it is given up (with `failed_at` set).
    pub max_attempts: i32,
    /// Seconds one SMTP conversation may take.
    pub timeout_secs: u64,
    /// How often the relay looks for due mail.
    pub poll_ms: u64,
}

impl Default for MailConfig {
    fn default() -> Self {
        Self { smtp_url: None, from: "gw <noreply@localhost>".into(), max_attempts: 8, timeout_secs: 30, poll_ms: 1000 }
    }
}

impl std::fmt::Debug for MailConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MailConfig")
            .field("smtp_url", &self.smtp_url.as_ref().map(|_| "<set>"))
            .field("from", &self.from)
            .field("max_attempts", &self.max_attempts)
            .finish()
    }
}

impl MailConfig {
    /// Whether mail is delivered at all.
    pub fn enabled(&self) -> bool {
        self.smtp_url.as_deref().is_some_and(|u| !u.is_empty())
    }
}
