//! `gw-admin bootstrap`: makes sure a local operator login and an API key exist, and prints
//! them. Credentials are kept in a file only the operator can read (default
//! `.gw/bootstrap.json`) so that running it again prints the same ones.

use std::path::Path;

use gw_shared::accounts::{create_org_with_owner, issue_api_key, KeySpec, DEFAULT_PERMISSION};
use gw_shared::config::Config;
use gw_shared::db::{api_keys, users};
use gw_shared::keys::hash_secret;
use gw_shared::password::{hash_password_blocking, verify_password};
use rand::distributions::Alphanumeric;
use rand::Rng;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Creds {
    email: String,
    password: String,
    api_key: String,
}

type BoxError = Box<dyn std::error::Error>;

pub async fn run(cfg: &Config, out: &Path, email: &str) -> Result<(), BoxError> {
    let db = gw_shared::db::pool(&cfg.database, 2)?;
    let mut conn = db.get().await?;

    if let Ok(text) = std::fs::read_to_string(out) {
        if let Ok(c) = serde_json::from_str::<Creds>(&text) {
            if c.email == email && still_valid(&mut conn, &c).await? {
                print(&c, out);
                return Ok(());
            }
        }
    }

    let password: String = rand::rngs::OsRng.sample_iter(&Alphanumeric).take(20).map(char::from).collect();
    let address = gw_shared::email::parse(email).map_err(|e| e.to_string())?;
    let (org_id, user_id) = match users::find_by_email(&mut conn, &address.normalized).await? {
        Some(user) => {
            // The saved credentials are gone or stale: reset this local operator's password.
            users::set_password(&mut conn, user.id, &hash_password_blocking(password.clone()).await?).await?;
            let m = users::primary_membership(&mut conn, user.id).await?.ok_or("bootstrap user has no organization")?;
            (m.org_id, user.id)
        }
        None => {
            let hash = hash_password_blocking(password.clone()).await?;
            let (org, user) = create_org_with_owner(&mut conn, &address, "Local operator", &hash, "Default").await?;
            (org.id, user.id)
        }
    };
    let perms = vec![DEFAULT_PERMISSION.to_string()];
    let spec = KeySpec {
        org_id,
        team_id: None,
        name: "bootstrap",
        permissions: &perms,
        allowed_models: None,
        created_by: Some(user_id),
        expires_at: None,
        budget: None,
        rate_limits: None,
    };
    let (_, api_key) = issue_api_key(&mut conn, spec).await?;
    // The local operator manages the gateway's route catalog too.
    gw_shared::db::route_catalog::set_operator(&mut conn, &address.normalized, true).await?;
    let creds = Creds { email: email.to_string(), password, api_key };
    save(out, &creds)?;
    print(&creds, out);
    Ok(())
}

async fn still_valid(conn: &mut diesel_async::AsyncPgConnection, c: &Creds) -> Result<bool, BoxError> {
    let Some(user) = users::find_by_email(conn, &gw_shared::email::normalize(&c.email)).await? else {
        return Ok(false);
    };
    let pw_ok = user.password_hash.as_deref().is_some_and(|h| verify_password(&c.password, h));
    let key = api_keys::find_by_hash(conn, &hash_secret(&c.api_key)).await?;
    Ok(pw_ok && key.is_some_and(|k| k.revoked_at.is_none()))
}

fn save(out: &Path, creds: &Creds) -> Result<(), BoxError> {
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let text = serde_json::to_string_pretty(creds)?;
    #[cfg(unix)]
    {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(out)?;
        f.write_all(text.as_bytes())?;
    }
    #[cfg(not(unix))]
    std::fs::write(out, text)?;
    Ok(())
}

fn print(c: &Creds, out: &Path) {
    println!("login:    {} / {}", c.email, c.password);
    println!("api key:  {}", c.api_key);
    println!("(saved in {})", out.display());
}
