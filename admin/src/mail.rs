//! Mail: what gw writes to the outbox (in the transaction of the change that needs it) and the
//! relay that delivers it over SMTP (`[mail]`): each message is leased, sent, and marked sent,
//! or retried with exponential backoff up to `mail.max_attempts` and then marked failed. Every
//! admin replica runs the relay; leases keep them from sending one message twice. Without
//! `mail.smtp_url` nothing is sent and mail waits in the outbox.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use diesel_async::AsyncPgConnection;
use gw_shared::db::registrations::{self, Mail};
use gw_shared::ids::new_id;
use lettre::message::Mailbox;
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};

use crate::error::ApiResult;
use crate::state::AppState;

/// Messages claimed per round.
const BATCH: i64 = 20;
/// How long a claimed message is reserved for the relay that claimed it.
const LEASE_SECS: i64 = 300;
/// The longest error kept on a message.
const MAX_ERROR_CHARS: usize = 500;

/// Queues a message, in the caller's transaction.
pub async fn enqueue(conn: &mut AsyncPgConnection, to: &str, kind: &str, subject: &str, body: String) -> ApiResult<()> {
    let mail = Mail {
        id: new_id(),
        to_address: to.to_string(),
        kind: kind.to_string(),
        subject: subject.to_string(),
        body,
        created_at: Utc::now(),
        sent_at: None,
    };
    registrations::enqueue(conn, &mail).await?;
    Ok(())
}

/// The wait before attempt `n + 1` after `n` failures: 30 s doubling, at most six hours.
pub fn backoff(failures: i32) -> chrono::Duration {
    let exp = u32::try_from(failures.clamp(0, 10)).unwrap_or(0);
    chrono::Duration::seconds((30i64 << exp).min(6 * 3600))
}

pub struct Relay {
    transport: AsyncSmtpTransport<Tokio1Executor>,
    from: Mailbox,
}

impl Relay {
    /// The relay of `[mail]`, or `None` when no SMTP server is configured.
    pub fn from_config(cfg: &gw_shared::config::MailConfig) -> Result<Option<Relay>, String> {
        let Some(url) = cfg.smtp_url.as_deref().filter(|u| !u.is_empty()) else {
            return Ok(None);
        };
        let from: Mailbox = cfg.from.parse().map_err(|e| format!("mail.from is not an address: {e}"))?;
        // The URL may hold a password: its error is reported without it.
        let transport = AsyncSmtpTransport::<Tokio1Executor>::from_url(url)
            .map_err(|e| format!("mail.smtp_url is invalid: {}", e.to_string().replace(url, "<smtp_url>")))?
            .timeout(Some(Duration::from_secs(cfg.timeout_secs.max(1))))
            .build();
        Ok(Some(Relay { transport, from }))
    }

    async fn send(&self, mail: &Mail) -> Result<(), String> {
        let to: Mailbox = mail.to_address.parse().map_err(|e| format!("invalid recipient: {e}"))?;
        let message = Message::builder()
            .from(self.from.clone())
            .to(to)
            .subject(mail.subject.clone())
            .message_id(Some(format!("<{}@gw>", mail.id)))
            .body(mail.body.clone())
            .map_err(|e| format!("building the message: {e}"))?;
        self.transport.send(message).await.map(|_| ()).map_err(|e| e.to_string())
    }
}

/// Runs the relay until the process ends.
pub fn spawn(state: Arc<AppState>, relay: Relay) {
    actix_web::rt::spawn(async move {
        let every = Duration::from_millis(state.cfg.mail.poll_ms.max(50));
        loop {
            match relay_once(&state, &relay).await {
                Ok(n) if n as i64 == BATCH => continue,
                Ok(_) => {}
                Err(e) => {
                    state.metrics.job_failures.with_label_values(&["mail"]).inc();
                    log::warn!("mail relay: {e}");
                }
            }
            actix_web::rt::time::sleep(every).await;
        }
    });
}

/// One round: claims due mail, sends it, records each outcome; returns how many were claimed.
async fn relay_once(state: &AppState, relay: &Relay) -> Result<usize, String> {
    let claimed = {
        let mut conn = state.db.get().await.map_err(|e| e.to_string())?;
        registrations::claim_due(&mut conn, BATCH, chrono::Duration::seconds(LEASE_SECS))
            .await
            .map_err(|e| e.to_string())?
    };
    let n = claimed.len();
    for (mail, attempts) in claimed {
        let outcome = relay.send(&mail).await;
        let mut conn = state.db.get().await.map_err(|e| e.to_string())?;
        match outcome {
            Ok(()) => {
                registrations::mark_sent(&mut conn, mail.id).await.map_err(|e| e.to_string())?;
                state.metrics.mail.with_label_values(&[mail.kind.as_str(), "sent"]).inc();
                log::info!("mail {} ({}) delivered", mail.id, mail.kind);
            }
            Err(e) => {
                let give_up = attempts + 1 >= state.cfg.mail.max_attempts;
                let error: String = e.chars().take(MAX_ERROR_CHARS).collect();
                let next = Utc::now() + backoff(attempts);
                registrations::mark_attempt_failed(&mut conn, mail.id, &error, next, give_up)
                    .await
                    .map_err(|e| e.to_string())?;
                let outcome = if give_up { "failed" } else { "retry" };
                state.metrics.mail.with_label_values(&[mail.kind.as_str(), outcome]).inc();
                log::warn!("mail {} ({}) attempt {} failed: {error}", mail.id, mail.kind, attempts + 1);
            }
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_back_off_to_a_ceiling() {
        assert_eq!(backoff(0).num_seconds(), 30);
        assert_eq!(backoff(1).num_seconds(), 60);
        assert_eq!(backoff(3).num_seconds(), 240);
        assert_eq!(backoff(40).num_seconds(), 6 * 3600);
    }

    #[test]
    fn no_url_no_relay_and_bad_settings_are_refused() {
        let mut cfg = gw_shared::config::MailConfig::default();
        assert!(Relay::from_config(&cfg).unwrap().is_none());
        cfg.smtp_url = Some("smtp://127.0.0.1:2525".into());
        assert!(Relay::from_config(&cfg).unwrap().is_some());
        cfg.from = "not an address".into();
        assert!(Relay::from_config(&cfg).is_err());
        cfg.from = "gw <gw@example.com>".into();
        cfg.smtp_url = Some("ftp://user:hunter2@example.com".into());
        let e = Relay::from_config(&cfg).err().unwrap();
        assert!(!e.contains("hunter2"), "{e}");
    }
}
