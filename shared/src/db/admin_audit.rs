//! The admin audit trail: who did what to which resource through `/api/v1`. Rows never hold
//! secrets: `detail` carries names, roles and changed field names, not key material.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use super::schema::admin_audit_events;
use crate::error::Result;

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = admin_audit_events)]
pub struct Event {
    pub id: Uuid,
    pub org_id: Uuid,
    pub actor_user_id: Option<Uuid>,
    pub actor_role: Option<String>,
    pub action: String,
    pub resource_type: String,
    pub resource_id: Option<String>,
    pub request_id: Option<String>,
    pub detail: serde_json::Value,
    pub created_at: DateTime<Utc>,
}

impl Event {
    /// An event no session caused (a job, the billing provider, the operator's command line):
    /// no actor, `actor_role` saying what acted when that is a role.
    pub fn system(
        org_id: Uuid,
        actor_role: Option<&str>,
        action: &str,
        resource: (&str, Option<String>),
        detail: serde_json::Value,
    ) -> Self {
        Event {
            id: crate::ids::new_id(),
            org_id,
            actor_user_id: None,
            actor_role: actor_role.map(String::from),
            action: action.to_string(),
            resource_type: resource.0.to_string(),
            resource_id: resource.1,
            request_id: None,
            detail,
            created_at: Utc::now(),
        }
    }
}

pub async fn insert(conn: &mut AsyncPgConnection, event: &Event) -> Result<()> {
    diesel::insert_into(admin_audit_events::table).values(event).execute(conn).await?;
    Ok(())
}

#[derive(Debug, Default, Clone)]
pub struct Filter {
    pub actor_user_id: Option<Uuid>,
    pub action: Option<String>,
    pub resource_type: Option<String>,
    pub resource_id: Option<String>,
    pub since: Option<DateTime<Utc>>,
    pub until: Option<DateTime<Utc>>,
}

/// One page of an organization's events, newest first.
pub async fn list(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    f: &Filter,
    before: Option<Uuid>,
    limit: i64,
) -> Result<Vec<Event>> {
    let mut q = admin_audit_events::table.filter(admin_audit_events::org_id.eq(org_id)).into_boxed();
    if let Some(a) = f.actor_user_id {
        q = q.filter(admin_audit_events::actor_user_id.eq(a));
    }
    if let Some(a) = &f.action {
        q = q.filter(admin_audit_events::action.eq(a.clone()));
    }
    if let Some(t) = &f.resource_type {
        q = q.filter(admin_audit_events::resource_type.eq(t.clone()));
    }
    if let Some(r) = &f.resource_id {
        q = q.filter(admin_audit_events::resource_id.eq(r.clone()));
    }
    if let Some(s) = f.since {
        q = q.filter(admin_audit_events::created_at.ge(s));
    }
    if let Some(u) = f.until {
        q = q.filter(admin_audit_events::created_at.lt(u));
    }
    if let Some(b) = before {
        q = q.filter(admin_audit_events::id.lt(b));
    }
    Ok(q.order(admin_audit_events::id.desc()).limit(limit).select(Event::as_select()).load(conn).await?)
}
