//! `GET /auth/me`: who the session is. The user, the organization the session is in, the role
//! the member holds there now and the teams they belong to: what a console needs to draw itself
//! and what a script checks before acting. `GET`/`PUT /auth/me/alerts`: which governance events
//! an owner or admin receives by e-mail.

use actix_web::{get, put, web, HttpRequest, HttpResponse};
use gw_shared::db::{orgs, teams, users};
use gw_shared::webhooks::ALERT_CATEGORIES;
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::ToSchema;
use utoipa_actix_web::service_config::ServiceConfig;
use uuid::Uuid;

use crate::error::{ApiError, ApiResult, Errors};
use crate::session::Session;
use crate::state::AppState;
use crate::trail::{self, Entry};

pub fn routes(cfg: &mut ServiceConfig) {
    cfg.service(me).service(get_alerts).service(set_alerts);
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

/// Which alerts the member receives by e-mail.
#[derive(Serialize, ToSchema)]
pub struct Alerts {
    /// `budget.threshold_crossed`, `budget.exceeded`, `reconcile.discrepancy` and
    /// `billing.subscription_updated`.
    budget: bool,
    /// API keys created, revoked or expired; provider keys rotated or revoked; members added or
    /// removed; an audit chain found broken.
    security: bool,
    /// Where they go: the account's address.
    email: String,
    /// Whether the operator configured a mail relay; without one, alerts wait undelivered.
    mail_relay_configured: bool,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetAlerts {
    #[serde(default)]
    budget: Option<bool>,
    #[serde(default)]
    security: Option<bool>,
}

async fn alerts_of(state: &AppState, session: &Session) -> ApiResult<Alerts> {
    let mut conn = state.conn().await?;
    let user = users::find(&mut conn, session.user_id).await?.ok_or(ApiError::NotFound("user"))?;
    let chosen = users::alert_emails(&mut conn, session.org_id, session.user_id).await?.unwrap_or_default();
    let has = |c: &str| chosen.iter().any(|x| x == c);
    Ok(Alerts {
        budget: has("budget"),
        security: has("security"),
        email: user.email,
        mail_relay_configured: state.cfg.mail.smtp_url.is_some(),
    })
}

/// The alerts this member receives by e-mail.
#[utoipa::path(operation_id = "get_my_alerts", tag = "auth", responses((status = 200, body = Alerts), Errors))]
#[get("/auth/me/alerts")]
pub async fn get_alerts(state: web::Data<AppState>, session: Session) -> ApiResult<HttpResponse> {
    Ok(HttpResponse::Ok().json(alerts_of(&state, &session).await?))
}

/// Choose the alerts to receive by e-mail (owners and admins): budget events, security events.
#[utoipa::path(operation_id = "set_my_alerts", tag = "auth", request_body = SetAlerts,
    responses((status = 200, body = Alerts), Errors))]
#[put("/auth/me/alerts")]
pub async fn set_alerts(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    body: crate::body::Json<SetAlerts>,
) -> ApiResult<HttpResponse> {
    let b = body.into_inner();
    if b.budget.is_none() && b.security.is_none() {
        return Err(ApiError::Validation("nothing to update: send budget or security".into()));
    }
    let mut conn = state.conn().await?;
    let mut chosen = users::alert_emails(&mut conn, session.org_id, session.user_id).await?.unwrap_or_default();
    for (category, wanted) in [("budget", b.budget), ("security", b.security)] {
        match wanted {
            Some(true) if !chosen.iter().any(|c| c == category) => chosen.push(category.to_string()),
            Some(false) => chosen.retain(|c| c != category),
            _ => {}
        }
    }
    chosen.retain(|c| ALERT_CATEGORIES.iter().any(|(k, _)| k == c));
    if !users::set_alert_emails(&mut conn, session.org_id, session.user_id, &chosen).await? {
        return Err(ApiError::NotFound("user"));
    }
    let entry = Entry {
        action: "user.alerts",
        resource_type: "user",
        resource_id: Some(session.user_id.to_string()),
        detail: json!({"alert_emails": chosen}),
    };
    trail::by(&mut conn, &session, &req, entry).await?;
    drop(conn);
    Ok(HttpResponse::Ok().json(alerts_of(&state, &session).await?))
}
