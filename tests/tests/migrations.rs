//! The migrations are reversible: apply, revert all, apply again on a database of their own.

use diesel::sql_types::BigInt;
use diesel::QueryableByName;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use gw_tests::{database_url, db};

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

async fn count(conn: &mut AsyncPgConnection, sql: &str) -> i64 {
    diesel::sql_query(sql).get_result::<Count>(conn).await.unwrap().n
}

#[tokio::test]
async fn migrations_apply_revert_and_reapply() {
    let name = format!("gw_migtest_{}", uuid::Uuid::new_v4().simple());
    let base = database_url();
    let (prefix, _) = base.rsplit_once('/').unwrap();
    let url = format!("{prefix}/{name}");
    let mut admin = db::connect().await;
    diesel::sql_query(format!("CREATE DATABASE {name}")).execute(&mut admin).await.unwrap();

    let u = url.clone();
    let applied = tokio::task::spawn_blocking(move || {
        let first = gw_shared::db::run_migrations(&gw_shared::config::DatabaseConfig::at(&u)).unwrap();
        gw_shared::db::revert_all_migrations(&u).unwrap();
        let again = gw_shared::db::run_migrations(&gw_shared::config::DatabaseConfig::at(&u)).unwrap();
        (first, again)
    })
    .await
    .unwrap();
    assert!(!applied.0.is_empty());
    assert_eq!(applied.0, applied.1);

    {
        let mut conn = AsyncPgConnection::establish(&url).await.unwrap();
        assert_eq!(count(&mut conn, "SELECT count(*) AS n FROM pg_extension WHERE extname = 'vector'").await, 1);
        let tables = count(
            &mut conn,
            "SELECT count(*) AS n FROM information_schema.tables WHERE table_schema = 'public' AND table_name IN \
             ('organizations','users','org_memberships','teams','team_members','api_keys','refresh_tokens','provider_keys','audit_logs')",
        )
        .await;
        assert_eq!(tables, 9);
    }
    diesel::sql_query(format!("DROP DATABASE {name} WITH (FORCE)")).execute(&mut admin).await.unwrap();
}
