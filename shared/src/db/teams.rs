//! Teams (only what other resources need so far: existence within an org).

use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use super::schema::teams;
use crate::error::Result;

/// Whether `team_id` is a live team of `org_id`.
pub async fn exists_in_org(conn: &mut AsyncPgConnection, org_id: Uuid, team_id: Uuid) -> Result<bool> {
    let n: i64 = teams::table
        .filter(teams::org_id.eq(org_id))
        .filter(teams::id.eq(team_id))
        .filter(teams::deleted_at.is_null())
        .count()
        .get_result(conn)
        .await?;
    Ok(n > 0)
}

/// A live team's model allow-list: `None` when there is no such live team, `Some(None)` when
/// it allows every model.
pub async fn live_allowed_models(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    team_id: Uuid,
) -> Result<Option<Option<Vec<String>>>> {
    Ok(teams::table
        .filter(teams::org_id.eq(org_id))
        .filter(teams::id.eq(team_id))
        .filter(teams::deleted_at.is_null())
        .select(teams::allowed_models)
        .first(conn)
        .await
        .optional()?)
}

/// Sets a team's model allow-list (`None`: every model).
pub async fn set_allowed_models(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    team_id: Uuid,
    models: Option<&[String]>,
) -> Result<bool> {
    let n = diesel::update(teams::table.filter(teams::org_id.eq(org_id)).filter(teams::id.eq(team_id)))
        .set(teams::allowed_models.eq(models))
        .execute(conn)
        .await?;
    Ok(n == 1)
}

pub async fn insert(conn: &mut AsyncPgConnection, org_id: Uuid, team_id: Uuid, name: &str) -> Result<()> {
    diesel::insert_into(teams::table)
        .values((teams::id.eq(team_id), teams::org_id.eq(org_id), teams::name.eq(name)))
        .execute(conn)
        .await?;
    Ok(())
}
