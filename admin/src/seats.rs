//! The plan's seats, enforced where people join (`docs/billing.md`): a new invite needs a seat
//! free counting members and pending invites, accepting one needs a member seat free (its own
//! invite held it), and so does a first SSO sign-in that would add a member. A downgrade never
//! removes anyone: an organization over its new plan's seats keeps its members and adds no more
//! until it is under again. Refusals are 402, naming the plan and its seats.

use chrono::Utc;
use diesel_async::AsyncPgConnection;
use gw_shared::db::{orgs, seats};
use uuid::Uuid;

use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

/// What joining asks for.
#[derive(Debug, Clone, Copy)]
pub enum Join<'a> {
    /// A new invite to this (normalized) address: a pending invite to it already is replaced.
    Invite(&'a str),
    /// Someone becoming a member (an invite accepted, a first SSO sign-in).
    Member,
}

/// Ok when the organization's plan has a seat for `join`; call inside the transaction that
/// takes it (the organization's row stays locked until it ends).
pub async fn check(state: &AppState, conn: &mut AsyncPgConnection, org_id: Uuid, join: Join<'_>) -> ApiResult<()> {
    let org = orgs::find(conn, org_id).await?.ok_or(ApiError::NotFound("organization"))?;
    let Some(limit) = state.cfg.plans.seats(&org.plan) else {
        return Ok(());
    };
    let except = match join {
        Join::Invite(email) => Some(email),
        Join::Member => None,
    };
    let taken = seats::taken_locked(conn, org_id, Utc::now(), except).await?;
    let used = match join {
        Join::Invite(_) => taken.members + taken.pending_invites,
        Join::Member => taken.members,
    };
    if used < i64::from(limit) {
        return Ok(());
    }
    let name = state.cfg.plans.get(&org.plan).name;
    Err(ApiError::PlanRequired(format!(
        "the {name} plan has {limit} seats and all are taken ({} members, {} pending invites); remove members, \
         revoke invites or upgrade",
        taken.members, taken.pending_invites
    )))
}
