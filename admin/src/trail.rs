//! Records writes on `/api/v1` in the admin audit trail. Call [`record`] with the connection of
//! the change, inside its transaction when there is one, so a change and its record commit
//! together.

use actix_web::{HttpMessage, HttpRequest};
use chrono::Utc;
use diesel_async::AsyncPgConnection;
use gw_shared::db::admin_audit::{self, Event};
use gw_shared::ids::new_id;
use serde_json::Value;
use uuid::Uuid;

use crate::error::ApiResult;
use crate::session::Session;

/// The request id the outer middleware assigned (also in the `x-request-id` response header).
#[derive(Debug, Clone)]
pub struct RequestId(pub String);

/// Who acted: a session's user and role, or the new user itself (sign-up, SSO provisioning,
/// invite acceptance).
pub struct Actor {
    pub user_id: Option<Uuid>,
    pub role: Option<String>,
}

impl From<&Session> for Actor {
    fn from(s: &Session) -> Self {
        Actor { user_id: Some(s.user_id), role: Some(s.role.to_string()) }
    }
}

/// What happened: `action` is `<resource>.<verb>` (e.g. `team.update`), `detail` what changed
/// (names, roles, changed field names; never a secret).
pub struct Entry<'a> {
    pub action: &'a str,
    pub resource_type: &'a str,
    pub resource_id: Option<String>,
    pub detail: Value,
}

pub fn request_id(req: &HttpRequest) -> Option<String> {
    req.extensions().get::<RequestId>().map(|r| r.0.clone())
}

/// What a write's record needs from its request and session, taken before a transaction
/// opens (the request itself cannot enter one), so the record commits with the change.
pub struct Trail {
    pub org_id: Uuid,
    pub actor_user_id: Option<Uuid>,
    pub actor_role: Option<String>,
    pub request_id: Option<String>,
}

impl Trail {
    /// A session's action.
    pub fn of(session: &Session, req: &HttpRequest) -> Self {
        Trail::new(session.org_id, Actor::from(session), req)
    }

    pub fn new(org_id: Uuid, actor: Actor, req: &HttpRequest) -> Self {
        Trail { org_id, actor_user_id: actor.user_id, actor_role: actor.role, request_id: request_id(req) }
    }

    pub async fn record(&self, conn: &mut AsyncPgConnection, entry: Entry<'_>) -> ApiResult<()> {
        let event = Event {
            id: new_id(),
            org_id: self.org_id,
            actor_user_id: self.actor_user_id,
            actor_role: self.actor_role.clone(),
            action: entry.action.to_string(),
            resource_type: entry.resource_type.to_string(),
            resource_id: entry.resource_id,
            request_id: self.request_id.clone(),
            detail: entry.detail,
            created_at: Utc::now(),
        };
        admin_audit::insert(conn, &event).await?;
        Ok(())
    }
}

pub async fn record(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    actor: Actor,
    req: &HttpRequest,
    entry: Entry<'_>,
) -> ApiResult<()> {
    Trail::new(org_id, actor, req).record(conn, entry).await
}

/// [`record`] for a session's action.
pub async fn by(conn: &mut AsyncPgConnection, session: &Session, req: &HttpRequest, entry: Entry<'_>) -> ApiResult<()> {
    Trail::of(session, req).record(conn, entry).await
}
