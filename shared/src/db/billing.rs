//! Organizations' accounts with the billing provider, and the provider's events as received.
//! Every query that serves an organization takes its `org_id`.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use super::schema::{billing_accounts, billing_events, organizations, sso_connections};
use crate::billing::{Event, Subscription};
use crate::error::Result;

/// Records an event as received; false when it was received before (a replay or a retry).
pub async fn record_event(conn: &mut AsyncPgConnection, e: &Event) -> Result<bool> {
    let n = diesel::insert_into(billing_events::table)
        .values((
            billing_events::id.eq(&e.id),
            billing_events::event_type.eq(&e.event_type),
            billing_events::created_at.eq(e.created),
        ))
        .on_conflict_do_nothing()
        .execute(conn)
        .await?;
    Ok(n == 1)
}

/// What became of an event, and whose it was.
pub async fn set_outcome(conn: &mut AsyncPgConnection, id: &str, org_id: Option<Uuid>, outcome: &str) -> Result<()> {
    diesel::update(billing_events::table.filter(billing_events::id.eq(id)))
        .set((billing_events::org_id.eq(org_id), billing_events::outcome.eq(outcome)))
        .execute(conn)
        .await?;
    Ok(())
}

/// The organization a provider customer belongs to.
pub async fn org_of_customer(conn: &mut AsyncPgConnection, customer: &str) -> Result<Option<Uuid>> {
    Ok(billing_accounts::table
        .filter(billing_accounts::customer_id.eq(customer))
        .select(billing_accounts::org_id)
        .first(conn)
        .await
        .optional()?)
}

/// Whether an organization exists (an event's `gw_org_id` must name one).
pub async fn org_exists(conn: &mut AsyncPgConnection, org_id: Uuid) -> Result<bool> {
    Ok(organizations::table.filter(organizations::id.eq(org_id)).count().get_result::<i64>(conn).await? == 1)
}

/// What applying a subscription's state did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// The state was applied: the plan before and after, and SSO connections turned off because
    /// the new plan has no SSO.
    Changed { from: String, to: String, sso_disabled: usize },
    /// An event older than the state already applied: nothing changed.
    Stale,
}

/// Applies a subscription's state as of `at` (its event's time) to an organization, in the
/// caller's transaction: the account, the plan (`plan`), and SSO connections turned off (never
/// deleted) when the plan loses SSO. An event older than the newest applied one changes nothing.
pub async fn apply_subscription(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    s: &Subscription,
    plan: &str,
    at: DateTime<Utc>,
) -> Result<Applied> {
    diesel::insert_into(billing_accounts::table)
        .values(billing_accounts::org_id.eq(org_id))
        .on_conflict_do_nothing()
        .execute(conn)
        .await?;
    let (state_at, past_due_since): (Option<DateTime<Utc>>, Option<DateTime<Utc>>) = billing_accounts::table
        .filter(billing_accounts::org_id.eq(org_id))
        .select((billing_accounts::state_at, billing_accounts::past_due_since))
        .for_update()
        .first(conn)
        .await?;
    if state_at.is_some_and(|t| t > at) {
        return Ok(Applied::Stale);
    }
    let past_due_since = (s.status == "past_due").then(|| past_due_since.unwrap_or(at));
    diesel::update(billing_accounts::table.filter(billing_accounts::org_id.eq(org_id)))
        .set((
            billing_accounts::customer_id.eq(&s.customer),
            billing_accounts::subscription_id.eq(&s.id),
            billing_accounts::subscription_status.eq(&s.status),
            billing_accounts::price_id.eq(&s.price),
            billing_accounts::current_period_end.eq(s.current_period_end),
            billing_accounts::cancel_at_period_end.eq(s.cancel_at_period_end),
            billing_accounts::past_due_since.eq(past_due_since),
            billing_accounts::state_at.eq(at),
            billing_accounts::updated_at.eq(Utc::now()),
        ))
        .execute(conn)
        .await?;
    let (from, sso_disabled) = set_plan(conn, org_id, plan).await?.unwrap_or_default();
    Ok(Applied::Changed { from, to: plan.to_string(), sso_disabled })
}

/// The organization's customer at the provider, if it has one.
pub async fn customer_of_org(conn: &mut AsyncPgConnection, org_id: Uuid) -> Result<Option<String>> {
    Ok(billing_accounts::table
        .filter(billing_accounts::org_id.eq(org_id))
        .select(billing_accounts::customer_id)
        .first::<Option<String>>(conn)
        .await
        .optional()?
        .flatten())
}

/// Links a customer to an organization (its account made if new); a customer already linked
/// stays as it is. Returns the organization's customer now.
pub async fn link_customer(conn: &mut AsyncPgConnection, org_id: Uuid, customer: &str) -> Result<String> {
    diesel::insert_into(billing_accounts::table)
        .values((billing_accounts::org_id.eq(org_id), billing_accounts::customer_id.eq(customer)))
        .on_conflict(billing_accounts::org_id)
        .do_update()
        .set(billing_accounts::customer_id.eq(
            diesel::dsl::sql::<diesel::sql_types::Nullable<diesel::sql_types::Text>>(
                "COALESCE(billing_accounts.customer_id, excluded.customer_id)",
            ),
        ))
        .execute(conn)
        .await?;
    Ok(customer_of_org(conn, org_id).await?.unwrap_or_else(|| customer.to_string()))
}

/// Puts an organization on `plan`, in the caller's transaction, turning its SSO connections off
/// (never deleting them) when the plan has no SSO: the plan before and how many connections were
/// turned off; `None` when there is no such organization.
pub async fn set_plan(conn: &mut AsyncPgConnection, org_id: Uuid, plan: &str) -> Result<Option<(String, usize)>> {
    let Some(from) = organizations::table
        .filter(organizations::id.eq(org_id))
        .select(organizations::plan)
        .for_update()
        .first::<String>(conn)
        .await
        .optional()?
    else {
        return Ok(None);
    };
    if from != plan {
        diesel::update(organizations::table.filter(organizations::id.eq(org_id)))
            .set((organizations::plan.eq(plan), organizations::updated_at.eq(Utc::now())))
            .execute(conn)
            .await?;
    }
    let sso_disabled = if crate::sso::plan_allows_sso(plan) {
        0
    } else {
        diesel::update(
            sso_connections::table.filter(sso_connections::org_id.eq(org_id)).filter(sso_connections::enabled.eq(true)),
        )
        .set((sso_connections::enabled.eq(false), sso_connections::updated_at.eq(Utc::now())))
        .execute(conn)
        .await?
    };
    Ok(Some((from, sso_disabled)))
}

/// Organizations whose subscription has been past due since before `cutoff` and that are still
/// on a paid plan: their grace is over. At most `limit`.
pub async fn grace_over(
    conn: &mut AsyncPgConnection,
    cutoff: DateTime<Utc>,
    limit: i64,
) -> Result<Vec<(Uuid, String)>> {
    Ok(billing_accounts::table
        .inner_join(organizations::table.on(organizations::id.eq(billing_accounts::org_id)))
        .filter(billing_accounts::subscription_status.eq("past_due"))
        .filter(billing_accounts::past_due_since.le(cutoff))
        .filter(organizations::plan.ne(crate::billing::FREE))
        .select((billing_accounts::org_id, billing_accounts::subscription_status.assume_not_null()))
        .limit(limit)
        .load(conn)
        .await?)
}

/// An organization's account with the provider, as `GET /organizations/current` shows it.
#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = billing_accounts)]
pub struct Account {
    pub subscription_status: Option<String>,
    pub current_period_end: Option<DateTime<Utc>>,
    pub cancel_at_period_end: bool,
    pub past_due_since: Option<DateTime<Utc>>,
}

pub async fn account(conn: &mut AsyncPgConnection, org_id: Uuid) -> Result<Option<Account>> {
    Ok(billing_accounts::table
        .filter(billing_accounts::org_id.eq(org_id))
        .select(Account::as_select())
        .first(conn)
        .await
        .optional()?)
}
