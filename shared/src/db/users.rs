//! Users and their organization memberships.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use super::schema::{org_memberships, users};
use crate::error::Result;

#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = users)]
pub struct User {
    pub id: Uuid,
    pub email: String,
    pub name: String,
    pub password_hash: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub email_normalized: String,
    /// `person`, or `service` (a service account: no password, one token).
    pub kind: String,
    /// The TOTP secret, sealed (`crate::crypto::Keyring`, bound to the user): set at enrollment,
    /// in force once `totp_enabled_at` is.
    pub totp_secret_sealed: Option<Vec<u8>>,
    pub totp_key_version: Option<i16>,
    pub totp_enabled_at: Option<DateTime<Utc>>,
    /// The last TOTP time step accepted: a code works once.
    pub totp_last_step: Option<i64>,
}

impl User {
    pub fn has_totp(&self) -> bool {
        self.totp_enabled_at.is_some() && self.totp_secret_sealed.is_some()
    }

    pub fn is_service(&self) -> bool {
        self.kind == "service"
    }
}

/// Associated data binding a sealed TOTP secret to its user.
pub fn totp_aad(user_id: Uuid) -> Vec<u8> {
    format!("gw:totp:{user_id}").into_bytes()
}

#[derive(Debug, Insertable)]
#[diesel(table_name = users)]
pub struct NewUser<'a> {
    pub id: Uuid,
    pub email: &'a str,
    /// `gw_shared::email::normalize(email)`: what identifies the account.
    pub email_normalized: &'a str,
    pub name: &'a str,
    pub password_hash: Option<&'a str>,
}

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = org_memberships)]
pub struct Membership {
    pub org_id: Uuid,
    pub user_id: Uuid,
    pub role: String,
    pub created_at: DateTime<Utc>,
}

pub async fn insert(conn: &mut AsyncPgConnection, new: &NewUser<'_>) -> Result<User> {
    Ok(diesel::insert_into(users::table).values(new).returning(User::as_returning()).get_result(conn).await?)
}

/// The account of an address, in its normalized form (`gw_shared::email::normalize`).
pub async fn find_by_email(conn: &mut AsyncPgConnection, normalized: &str) -> Result<Option<User>> {
    Ok(users::table
        .filter(users::email_normalized.eq(normalized))
        .select(User::as_select())
        .first(conn)
        .await
        .optional()?)
}

pub async fn find(conn: &mut AsyncPgConnection, user_id: Uuid) -> Result<Option<User>> {
    Ok(users::table.filter(users::id.eq(user_id)).select(User::as_select()).first(conn).await.optional()?)
}

pub async fn set_password(conn: &mut AsyncPgConnection, user_id: Uuid, hash: &str) -> Result<()> {
    diesel::update(users::table.filter(users::id.eq(user_id)))
        .set((users::password_hash.eq(hash), users::updated_at.eq(Utc::now())))
        .execute(conn)
        .await?;
    Ok(())
}

/// Stores a TOTP secret waiting for its first code (enrollment); a second factor in force stays
/// in force until [`disable_totp`].
pub async fn set_pending_totp(
    conn: &mut AsyncPgConnection,
    user_id: Uuid,
    version: i16,
    sealed: &[u8],
) -> Result<bool> {
    let n = diesel::update(users::table.filter(users::id.eq(user_id)).filter(users::totp_enabled_at.is_null()))
        .set((
            users::totp_secret_sealed.eq(sealed),
            users::totp_key_version.eq(version),
            users::totp_last_step.eq(None::<i64>),
            users::updated_at.eq(Utc::now()),
        ))
        .execute(conn)
        .await?;
    Ok(n == 1)
}

/// Accepts a TOTP time step for a user, once: `false` when this step (or a later one) was
/// accepted already (a replayed code).
pub async fn accept_totp_step(conn: &mut AsyncPgConnection, user_id: Uuid, step: i64) -> Result<bool> {
    let n = diesel::update(
        users::table
            .filter(users::id.eq(user_id))
            .filter(users::totp_last_step.is_null().or(users::totp_last_step.lt(step))),
    )
    .set(users::totp_last_step.eq(step))
    .execute(conn)
    .await?;
    Ok(n == 1)
}

/// Puts the enrolled secret in force.
pub async fn enable_totp(conn: &mut AsyncPgConnection, user_id: Uuid) -> Result<()> {
    diesel::update(users::table.filter(users::id.eq(user_id)))
        .set((users::totp_enabled_at.eq(Utc::now()), users::updated_at.eq(Utc::now())))
        .execute(conn)
        .await?;
    Ok(())
}

/// Removes the second factor and its recovery codes.
pub async fn disable_totp(conn: &mut AsyncPgConnection, user_id: Uuid) -> Result<()> {
    use super::schema::recovery_codes;
    diesel::update(users::table.filter(users::id.eq(user_id)))
        .set((
            users::totp_secret_sealed.eq(None::<Vec<u8>>),
            users::totp_key_version.eq(None::<i16>),
            users::totp_enabled_at.eq(None::<DateTime<Utc>>),
            users::totp_last_step.eq(None::<i64>),
            users::updated_at.eq(Utc::now()),
        ))
        .execute(conn)
        .await?;
    diesel::delete(recovery_codes::table.filter(recovery_codes::user_id.eq(user_id))).execute(conn).await?;
    Ok(())
}

/// Replaces a user's recovery codes (SHA-256 of each).
pub async fn replace_recovery_codes(conn: &mut AsyncPgConnection, user_id: Uuid, hashes: &[[u8; 32]]) -> Result<()> {
    use super::schema::recovery_codes;
    diesel::delete(recovery_codes::table.filter(recovery_codes::user_id.eq(user_id))).execute(conn).await?;
    for h in hashes {
        diesel::insert_into(recovery_codes::table)
            .values((
                recovery_codes::id.eq(crate::ids::new_id()),
                recovery_codes::user_id.eq(user_id),
                recovery_codes::code_hash.eq(h.as_slice()),
            ))
            .execute(conn)
            .await?;
    }
    Ok(())
}

/// Spends one unused recovery code; `false` when there is no such unused code.
pub async fn use_recovery_code(conn: &mut AsyncPgConnection, user_id: Uuid, hash: &[u8]) -> Result<bool> {
    use super::schema::recovery_codes;
    let n = diesel::update(
        recovery_codes::table
            .filter(recovery_codes::user_id.eq(user_id))
            .filter(recovery_codes::code_hash.eq(hash))
            .filter(recovery_codes::used_at.is_null()),
    )
    .set(recovery_codes::used_at.eq(Utc::now()))
    .execute(conn)
    .await?;
    Ok(n == 1)
}

/// How many unused recovery codes a user has.
pub async fn recovery_codes_left(conn: &mut AsyncPgConnection, user_id: Uuid) -> Result<i64> {
    use super::schema::recovery_codes;
    Ok(recovery_codes::table
        .filter(recovery_codes::user_id.eq(user_id))
        .filter(recovery_codes::used_at.is_null())
        .count()
        .get_result(conn)
        .await?)
}

/// A password reset link's row.
#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = super::schema::password_resets)]
pub struct PasswordReset {
    pub id: Uuid,
    pub user_id: Uuid,
    pub token_hash: Vec<u8>,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub used_at: Option<DateTime<Utc>>,
}

pub async fn insert_password_reset(
    conn: &mut AsyncPgConnection,
    user_id: Uuid,
    token_hash: &[u8],
    expires_at: DateTime<Utc>,
) -> Result<()> {
    use super::schema::password_resets;
    diesel::insert_into(password_resets::table)
        .values((
            password_resets::id.eq(crate::ids::new_id()),
            password_resets::user_id.eq(user_id),
            password_resets::token_hash.eq(token_hash),
            password_resets::expires_at.eq(expires_at),
        ))
        .execute(conn)
        .await?;
    Ok(())
}

/// Spends a live reset link (unused, unexpired); `None` when there is none. Every other live
/// link of the user is spent with it.
pub async fn take_password_reset(conn: &mut AsyncPgConnection, token_hash: &[u8]) -> Result<Option<PasswordReset>> {
    use super::schema::password_resets;
    let now = Utc::now();
    let row: Option<PasswordReset> = diesel::update(
        password_resets::table
            .filter(password_resets::token_hash.eq(token_hash))
            .filter(password_resets::used_at.is_null())
            .filter(password_resets::expires_at.gt(now)),
    )
    .set(password_resets::used_at.eq(now))
    .returning(PasswordReset::as_returning())
    .get_result(conn)
    .await
    .optional()?;
    if let Some(r) = &row {
        diesel::update(
            password_resets::table
                .filter(password_resets::user_id.eq(r.user_id))
                .filter(password_resets::used_at.is_null()),
        )
        .set(password_resets::used_at.eq(now))
        .execute(conn)
        .await?;
    }
    Ok(row)
}

/// Reset links asked for an account since `since` (bounds the mail one address can be sent).
pub async fn password_resets_since(conn: &mut AsyncPgConnection, user_id: Uuid, since: DateTime<Utc>) -> Result<i64> {
    use super::schema::password_resets;
    Ok(password_resets::table
        .filter(password_resets::user_id.eq(user_id))
        .filter(password_resets::created_at.gt(since))
        .count()
        .get_result(conn)
        .await?)
}

pub async fn add_membership(conn: &mut AsyncPgConnection, org_id: Uuid, user_id: Uuid, role: &str) -> Result<()> {
    diesel::insert_into(org_memberships::table)
        .values((
            org_memberships::org_id.eq(org_id),
            org_memberships::user_id.eq(user_id),
            org_memberships::role.eq(role),
        ))
        .execute(conn)
        .await?;
    Ok(())
}

/// The user's membership in one organization.
pub async fn membership(conn: &mut AsyncPgConnection, org_id: Uuid, user_id: Uuid) -> Result<Option<Membership>> {
    Ok(org_memberships::table
        .filter(org_memberships::org_id.eq(org_id))
        .filter(org_memberships::user_id.eq(user_id))
        .select(Membership::as_select())
        .first(conn)
        .await
        .optional()?)
}

/// The organization a user signs in to: their oldest membership.
pub async fn primary_membership(conn: &mut AsyncPgConnection, user_id: Uuid) -> Result<Option<Membership>> {
    Ok(org_memberships::table
        .filter(org_memberships::user_id.eq(user_id))
        .order(org_memberships::created_at.asc())
        .select(Membership::as_select())
        .first(conn)
        .await
        .optional()?)
}

/// A member of an organization as the users endpoints show it.
#[derive(Debug, Clone, Queryable)]
pub struct Member {
    pub id: Uuid,
    pub email: String,
    pub name: String,
    pub role: String,
    pub joined_at: DateTime<Utc>,
}

type MemberColumns = (users::id, users::email, users::name, org_memberships::role, org_memberships::created_at);
const MEMBER_COLUMNS: MemberColumns =
    (users::id, users::email, users::name, org_memberships::role, org_memberships::created_at);

/// One page of an organization's members (people; service accounts are listed on their own), by user id descending (ids are UUIDv7: newest
/// first); `role` filters when given.
pub async fn list_members(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    role: Option<&str>,
    before: Option<Uuid>,
    limit: i64,
) -> Result<Vec<Member>> {
    let mut q = org_memberships::table
        .inner_join(users::table)
        .filter(org_memberships::org_id.eq(org_id))
        .filter(users::kind.eq("person"))
        .into_boxed();
    if let Some(role) = role {
        q = q.filter(org_memberships::role.eq(role.to_string()));
    }
    if let Some(before) = before {
        q = q.filter(users::id.lt(before));
    }
    Ok(q.order(users::id.desc()).limit(limit).select(MEMBER_COLUMNS).load(conn).await?)
}

pub async fn find_member(conn: &mut AsyncPgConnection, org_id: Uuid, user_id: Uuid) -> Result<Option<Member>> {
    Ok(org_memberships::table
        .inner_join(users::table)
        .filter(org_memberships::org_id.eq(org_id))
        .filter(org_memberships::user_id.eq(user_id))
        .filter(users::kind.eq("person"))
        .select(MEMBER_COLUMNS)
        .first(conn)
        .await
        .optional()?)
}

/// Sets a member's role; `false` when the user is not a member of the organization.
pub async fn set_role(conn: &mut AsyncPgConnection, org_id: Uuid, user_id: Uuid, role: &str) -> Result<bool> {
    let n = diesel::update(
        org_memberships::table.filter(org_memberships::org_id.eq(org_id)).filter(org_memberships::user_id.eq(user_id)),
    )
    .set(org_memberships::role.eq(role))
    .execute(conn)
    .await?;
    Ok(n == 1)
}

/// Removes a user from an organization and its teams; `false` when not a member.
pub async fn remove_membership(conn: &mut AsyncPgConnection, org_id: Uuid, user_id: Uuid) -> Result<bool> {
    use super::schema::team_members;
    diesel::delete(
        team_members::table.filter(team_members::org_id.eq(org_id)).filter(team_members::user_id.eq(user_id)),
    )
    .execute(conn)
    .await?;
    let n = diesel::delete(
        org_memberships::table.filter(org_memberships::org_id.eq(org_id)).filter(org_memberships::user_id.eq(user_id)),
    )
    .execute(conn)
    .await?;
    Ok(n == 1)
}

/// Locks the organization's owner memberships and counts them (so two concurrent demotions
/// cannot both leave it without an owner).
pub async fn lock_owners(conn: &mut AsyncPgConnection, org_id: Uuid) -> Result<usize> {
    let owners: Vec<Uuid> = org_memberships::table
        .filter(org_memberships::org_id.eq(org_id))
        .filter(org_memberships::role.eq("owner"))
        .select(org_memberships::user_id)
        .for_update()
        .load(conn)
        .await?;
    Ok(owners.len())
}

/// The alert categories a member chose to receive by e-mail; `None` when not a member.
pub async fn alert_emails(conn: &mut AsyncPgConnection, org_id: Uuid, user_id: Uuid) -> Result<Option<Vec<String>>> {
    Ok(org_memberships::table
        .filter(org_memberships::org_id.eq(org_id))
        .filter(org_memberships::user_id.eq(user_id))
        .select(org_memberships::alert_emails)
        .first(conn)
        .await
        .optional()?)
}

/// Sets them; false when not a member.
pub async fn set_alert_emails(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    user_id: Uuid,
    categories: &[String],
) -> Result<bool> {
    Ok(diesel::update(
        org_memberships::table.filter(org_memberships::org_id.eq(org_id)).filter(org_memberships::user_id.eq(user_id)),
    )
    .set(org_memberships::alert_emails.eq(categories))
    .execute(conn)
    .await?
        == 1)
}
