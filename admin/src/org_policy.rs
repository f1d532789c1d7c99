//! An organization's policy document as the control plane reads it: the version in force, and the
//! names a team's defaults may use. Shared by the policy and team routes.

use diesel_async::AsyncPgConnection;
use gw_shared::db::policies;
use gw_shared::policy::spec::OrgPolicy;
use uuid::Uuid;

use crate::error::{ApiError, ApiResult};

/// The organization's document in force (an empty one when it never saved one) and its version.
pub async fn current(conn: &mut AsyncPgConnection, org_id: Uuid) -> ApiResult<(i64, OrgPolicy)> {
    match policies::current(conn, org_id).await? {
        None => Ok((0, OrgPolicy::default())),
        Some(s) => {
            let doc = serde_json::from_value(s.document)
                .map_err(|e| ApiError::Internal(format!("stored policy of org {org_id} does not parse: {e}")))?;
            Ok((s.version, doc))
        }
    }
}

/// Names a team's default policies may use.
pub async fn available(conn: &mut AsyncPgConnection, org_id: Uuid) -> ApiResult<Vec<String>> {
    Ok(current(conn, org_id).await?.1.available())
}
