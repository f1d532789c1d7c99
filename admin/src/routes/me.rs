//! `GET /auth/me`: who the session is. The user, the organization the session is in, the role
//! the member holds there now and the teams they belong to: what a console needs to draw itself
//! and what a script checks before acting.

use actix_web::{get, web, HttpResponse};
use gw_shared::db::{orgs, teams, users};
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_actix_web::service_config::ServiceConfig;
use uuid::Uuid;

use crate::error::{ApiError, ApiResult, Errors};
use crate::session::Session;
use crate::state::AppState;

pub fn routes(cfg: &mut ServiceConfig) {
    cfg.service(me);
}

#[derive(Serialize, ToSchema)]
pub struct MeUser {
    id: Uuid,
    email: String,
    name: String,
}

#[derive(Serialize, ToSchema)]
pub struct MeOrganization {
    id: Uuid,
    name: String,
    /// `free`, `growth` or `enterprise`.
    plan: String,
}

#[derive(Serialize, ToSchema)]
pub struct Me {
    user: MeUser,
    organization: MeOrganization,
    /// `owner`, `admin`, `member` or `viewer`, as the organization holds it now.
    role: String,
    /// The teams of the organization the user belongs to.
    team_ids: Vec<Uuid>,
    /// The sign-in session the access token belongs to (what `POST /auth/logout` ends).
    session_id: Uuid,
}

/// Who the session is: user, organization, role and teams.
#[utoipa::path(operation_id = "get_me", tag = "auth", responses((status = 200, body = Me), Errors))]
#[get("/auth/me")]
pub async fn me(state: web::Data<AppState>, session: Session) -> ApiResult<HttpResponse> {
    let mut conn = state.conn().await?;
    let user = users::find(&mut conn, session.user_id).await?.ok_or(ApiError::NotFound("user"))?;
    let org = orgs::find(&mut conn, session.org_id).await?.ok_or(ApiError::NotFound("organization"))?;
    let team_ids = teams::ids_of_member(&mut conn, session.org_id, session.user_id).await?;
    Ok(HttpResponse::Ok().json(Me {
        user: MeUser { id: user.id, email: user.email, name: user.name },
        organization: MeOrganization { id: org.id, name: org.name, plan: org.plan },
        role: session.role.as_str().to_string(),
        team_ids,
        session_id: session.session_id,
    }))
}
