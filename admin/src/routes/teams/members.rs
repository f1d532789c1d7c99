//! A team's members: list, add (or change their team role) and remove.

use super::*;

#[derive(Serialize, ToSchema)]
pub struct TeamMemberOut {
    user_id: Uuid,
    email: String,
    name: String,
    /// The role in the team: `lead` or `member`.
    role: String,
    /// The role in the organization: `owner`, `admin`, `member` or `viewer`.
    org_role: String,
    added_at: DateTime<Utc>,
}

impl From<TeamMember> for TeamMemberOut {
    fn from(m: TeamMember) -> Self {
        TeamMemberOut {
            user_id: m.user_id,
            email: m.email,
            name: m.name,
            role: m.team_role,
            org_role: m.org_role,
            added_at: m.added_at,
        }
    }
}

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AddMemberBody {
    /// `lead` or `member` (default).
    #[serde(default)]
    role: Option<String>,
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct MembersQuery {
    /// 1 to 200; default 50.
    limit: Option<i64>,
    /// The `next_cursor` of the previous page.
    cursor: Option<Uuid>,
}

/// The team's members, newest accounts first.
#[utoipa::path(tag = "teams", params(("team_id" = Uuid, Path, description = "The team's id"), MembersQuery),
    responses((status = 200, body = Page<TeamMemberOut>), Errors))]
#[get("/teams/{team_id}/members")]
pub async fn list_team_members(
    state: web::Data<AppState>,
    session: Session,
    path: web::Path<Uuid>,
    q: crate::body::Query<MembersQuery>,
) -> ApiResult<HttpResponse> {
    let team_id = path.into_inner();
    let q = q.into_inner();
    let limit = pagination::limit(q.limit)?;
    let mut conn = state.conn().await?;
    if !teams::exists_in_org(&mut conn, session.org_id, team_id).await? {
        return Err(ApiError::NotFound("team"));
    }
    let rows = teams::list_members(&mut conn, session.org_id, team_id, q.cursor, limit + 1).await?;
    Ok(HttpResponse::Ok().json(Page::from_rows(rows, limit, |m| m.user_id, TeamMemberOut::from)))
}

/// The optional body of an add: absent or empty means the default role.
pub(super) fn add_member_body(raw: &[u8]) -> ApiResult<AddMemberBody> {
    crate::body::optional_json(raw)
}

/// Add a member of the organization to the team, or change their role in it. The body is
/// optional (default role `member`).
#[utoipa::path(tag = "teams",
    params(("team_id" = Uuid, Path, description = "The team's id"), ("user_id" = Uuid, Path, description = "The user's id")),
    request_body = Option<AddMemberBody>, responses((status = 201, body = TeamMemberOut), Errors))]
#[post("/teams/{team_id}/members/{user_id}")]
pub async fn add_team_member(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    path: web::Path<(Uuid, Uuid)>,
    body: web::Bytes,
) -> ApiResult<HttpResponse> {
    let (team_id, user_id) = path.into_inner();
    // Read by hand: `Option<Json<_>>` would turn an invalid body into "no body" silently.
    let b = add_member_body(body.as_ref())?;
    let role = b.role.unwrap_or_else(|| "member".to_string());
    if !TEAM_ROLES.contains(&role.as_str()) {
        return Err(ApiError::field("role", "must be lead or member"));
    }
    let trail = Trail::of(&session, &req);
    let org_id = session.org_id;
    let mut conn = state.conn().await?;
    let member =
        conn.transaction(async |conn| add_member_tx(conn, &trail, org_id, team_id, user_id, &role).await).await?;
    Ok(HttpResponse::Created().json(TeamMemberOut::from(member)))
}

async fn add_member_tx(
    conn: &mut AsyncPgConnection,
    trail: &Trail,
    org_id: Uuid,
    team_id: Uuid,
    user_id: Uuid,
    role: &str,
) -> ApiResult<TeamMember> {
    teams::find_live_for_update(conn, org_id, team_id).await?.ok_or(ApiError::NotFound("team"))?;
    // Another org's user looks exactly like a missing one.
    users::find_member(conn, org_id, user_id).await?.ok_or(ApiError::NotFound("user"))?;
    teams::add_member(conn, org_id, team_id, user_id, role).await?;
    let member = teams::find_member(conn, org_id, team_id, user_id)
        .await?
        .ok_or_else(|| ApiError::Internal(format!("team member {user_id} of {team_id} missing after insert")))?;
    let entry = Entry {
        action: "team.member_add",
        resource_type: "team",
        resource_id: Some(team_id.to_string()),
        detail: json!({"user_id": user_id, "role": role}),
    };
    trail.record(conn, entry).await?;
    Ok(member)
}

/// Remove a user from the team (they stay in the organization).
#[utoipa::path(tag = "teams",
    params(("team_id" = Uuid, Path, description = "The team's id"), ("user_id" = Uuid, Path, description = "The user's id")),
    responses((status = 204, description = "Removed"), Errors))]
#[delete("/teams/{team_id}/members/{user_id}")]
pub async fn remove_team_member(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    path: web::Path<(Uuid, Uuid)>,
) -> ApiResult<HttpResponse> {
    let (team_id, user_id) = path.into_inner();
    let trail = Trail::of(&session, &req);
    let org_id = session.org_id;
    let mut conn = state.conn().await?;
    conn.transaction(async |conn| remove_member_tx(conn, &trail, org_id, team_id, user_id).await).await?;
    Ok(HttpResponse::NoContent().finish())
}

async fn remove_member_tx(
    conn: &mut AsyncPgConnection,
    trail: &Trail,
    org_id: Uuid,
    team_id: Uuid,
    user_id: Uuid,
) -> ApiResult<()> {
    teams::find_live_for_update(conn, org_id, team_id).await?.ok_or(ApiError::NotFound("team"))?;
    if !teams::remove_member(conn, org_id, team_id, user_id).await? {
        return Err(ApiError::NotFound("team member"));
    }
    let entry = Entry {
        action: "team.member_remove",
        resource_type: "team",
        resource_id: Some(team_id.to_string()),
        detail: json!({"user_id": user_id}),
    };
    trail.record(conn, entry).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_member_bodies() {
        assert!(add_member_body(b"").unwrap().role.is_none());
        assert!(add_member_body(b" \n").unwrap().role.is_none());
        assert_eq!(add_member_body(br#"{"role":"lead"}"#).unwrap().role.as_deref(), Some("lead"));
        assert!(add_member_body(br#"{"rol":"lead"}"#).is_err());
        assert!(add_member_body(b"{").is_err());
    }
}
