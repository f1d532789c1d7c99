//! The semantic tier's lookup finds a scope's entries among many scopes' near-identical ones.
//!
//! One HNSW index holds every organization's and scope's embeddings. Where the planner takes it
//! (a scope it judges common enough), the index alone yields only its `ef_search` nearest entries
//! of all scopes before the scope filter runs; when the same prompt is cached for many models or
//! parameter sets, those are mostly other scopes' and the scope's own entries are missed. The
//! lookup scans the index iteratively (shared/src/db/cache.rs).

use diesel::sql_types::{BigInt, Bytea, Float4, Integer, Uuid as SqlUuid};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use gw_shared::db::cache::{nearest, nearest_sql};
use pgvector::Vector;
use uuid::Uuid;

const SCOPES: usize = 15;
const ROWS: usize = 10_000;

fn scope(i: usize) -> [u8; 32] {
    let mut s = [0u8; 32];
    s[..8].copy_from_slice(&(i as u64).to_be_bytes());
    s[31] = 0x5c;
    s
}

/// The lookup's query (or `EXPLAIN` of it, with `prefix`) for scope `i`, bound as the lookup binds it.
fn nearest_query(
    prefix: &str,
    org: Uuid,
    i: usize,
    query: &[f32],
) -> diesel::query_builder::BoxedSqlQuery<'static, diesel::pg::Pg, diesel::query_builder::SqlQuery> {
    diesel::sql_query(format!("{prefix}{}", nearest_sql(384)))
        .into_boxed()
        .bind::<SqlUuid, _>(org)
        .bind::<Bytea, _>(scope(i).to_vec())
        .bind::<Integer, _>(384)
        .bind::<pgvector::sql_types::Vector, _>(Vector::from(query.to_vec()))
        .bind::<BigInt, _>(5i64)
        .bind::<Float4, _>(0.9f32)
}

#[derive(diesel::QueryableByName)]
struct Line {
    #[diesel(sql_type = diesel::sql_types::Text, column_name = "QUERY PLAN")]
    line: String,
}

#[tokio::test]
async fn a_scope_among_many_near_identical_ones_finds_its_own_entries() {
    let url = gw_tests::db::fresh_database().await;
    let mut conn = AsyncPgConnection::establish(&url).await.expect("connect");
    let org = Uuid::new_v4();
    diesel::sql_query("INSERT INTO organizations (id, name) VALUES ($1, 'scopes')")
        .bind::<SqlUuid, _>(org)
        .execute(&mut conn)
        .await
        .unwrap();
    // The same prompt cached under 15 scopes (models, parameter sets): embeddings all within a
    // hair of each other, about 667 per scope.
    diesel::sql_query(format!(
        "INSERT INTO semantic_cache (id, org_id, model, scope, dims, embedding, prompt, answer, expires_at) \
         SELECT gen_random_uuid(), $1, 'm', overlay(decode(repeat('00', 31) || '5c', 'hex') \
           PLACING int8send((i % {SCOPES})::bigint) FROM 1 FOR 8), 384, \
           (SELECT array_agg(1.0 + random() * 0.05)::vector FROM generate_series(1, 384) WHERE i > 0), \
           'the same question', '\\x00'::bytea, now() + interval '1 day' \
         FROM generate_series(1, {ROWS}) i"
    ))
    .bind::<SqlUuid, _>(org)
    .execute(&mut conn)
    .await
    .unwrap();
    diesel::sql_query("ANALYZE semantic_cache").execute(&mut conn).await.unwrap();

    let query = vec![1.0f32; 384];
    // The planner takes the HNSW index for these scopes: this is the case the iterative scan is for.
    let plan: Vec<Line> = nearest_query("EXPLAIN ", org, 7, &query).load(&mut conn).await.unwrap();
    let plan: Vec<String> = plan.into_iter().map(|l| l.line).collect();
    assert!(plan.iter().any(|l| l.contains("semantic_cache_hnsw_384_idx")), "{plan:#?}");

    let mut short_without = 0;
    for i in 0..SCOPES {
        let found = nearest(&mut conn, org, &scope(i), &query, 0.9, 5).await.unwrap();
        assert_eq!(found.len(), 5, "scope {i}: {} of its ~667 entries found", found.len());
        // Nearest first (to float4 rounding: the index compares in single precision).
        assert!(found.windows(2).all(|w| w[0].similarity >= w[1].similarity - 1e-5), "nearest first");
        // The same query with the index post-filtered (what the lookup did before).
        #[derive(diesel::QueryableByName)]
        struct Similarity {
            #[diesel(sql_type = Float4)]
            #[allow(dead_code)]
            similarity: f32,
        }
        let plain: Vec<Similarity> = nearest_query("", org, i, &query).load(&mut conn).await.unwrap();
        if plain.len() < 5 {
            short_without += 1;
        }
    }
    // Without the iterative scan, scopes come back short (often empty): the miss this prevents.
    assert!(short_without > 0, "every scope found its entries without the iterative scan too");
}
