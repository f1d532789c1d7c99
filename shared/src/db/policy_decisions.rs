//! Policy decisions as the audit log holds them (`audit_logs.policy`, one JSON object per
//! decision), counted per policy, guardrail, action and team, or read back row by row for an
//! export. Decisions carry entity types and counts, never the matched values.
//!
//! Both reads go through `audit_logs_org_created_idx` (org, created_at): the organization and the
//! period bound every scan.

use chrono::{DateTime, Utc};
use diesel::sql_types::{BigInt, Bool, Jsonb, Nullable, Text, Timestamptz, Uuid as SqlUuid};
use diesel::QueryableByName;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use serde_json::Value;

pub use crate::audit::detail::Decision;
use uuid::Uuid;

use crate::error::Result;

/// Which decisions: a period (`from` inclusive, `to` exclusive) and optional exact matches.
#[derive(Debug, Clone)]
pub struct Filter {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub team_id: Option<Uuid>,
    pub policy: Option<String>,
    pub action: Option<String>,
    pub guardrail: Option<String>,
}

/// The decisions of one policy, guardrail and action for one team (or none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hits {
    pub policy: String,
    pub guardrail: String,
    pub action: String,
    pub team_id: Option<Uuid>,
    /// Decisions.
    pub hits: i64,
    /// Distinct requests behind them.
    pub requests: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    /// Distinct requests with at least one matching decision.
    pub requests: i64,
    /// Matching decisions.
    pub decisions: i64,
    /// Most hits first, then by policy, guardrail, action and team.
    pub groups: Vec<Hits>,
}

#[derive(QueryableByName)]
struct HitRow {
    #[diesel(sql_type = Nullable<Text>)]
    policy: Option<String>,
    #[diesel(sql_type = Nullable<Text>)]
    guardrail: Option<String>,
    #[diesel(sql_type = Nullable<Text>)]
    action: Option<String>,
    #[diesel(sql_type = Nullable<SqlUuid>)]
    team_id: Option<Uuid>,
    #[diesel(sql_type = BigInt)]
    hits: i64,
    #[diesel(sql_type = BigInt)]
    requests: i64,
    #[diesel(sql_type = Bool)]
    is_total: bool,
}

// One scan for the groups and the totals: the empty grouping set is the total row (the
// distinct request count cannot be summed from the groups, a request may be in several).
// Rows written before `policy` was an array, and elements that are not objects, count as no
// decision rather than failing the query. A key missing from a decision groups as ''.
const SUMMARY_SQL: &str = "\
WITH d AS (
    SELECT a.id, a.team_id,
           coalesce(e.value ->> 'policy', '') AS policy,
           coalesce(e.value ->> 'guardrail', '') AS guardrail,
           coalesce(e.value ->> 'action', '') AS action
    FROM audit_logs a
    CROSS JOIN LATERAL jsonb_array_elements(
        CASE WHEN jsonb_typeof(a.policy) = 'array' THEN a.policy ELSE '[]'::jsonb END
    ) AS e(value)
    WHERE a.org_id = $1
      AND a.created_at >= $2 AND a.created_at < $3
      AND a.policy_action IS NOT NULL
      AND ($4::uuid IS NULL OR a.team_id = $4::uuid)
      AND jsonb_typeof(e.value) = 'object'
      AND ($5::text IS NULL OR e.value ->> 'policy' = $5::text)
      AND ($6::text IS NULL OR e.value ->> 'action' = $6::text)
      AND ($7::text IS NULL OR e.value ->> 'guardrail' = $7::text)
)
SELECT policy, guardrail, action, team_id,
       count(*) AS hits,
       count(DISTINCT id) AS requests,
       GROUPING(policy, guardrail, action, team_id) <> 0 AS is_total
FROM d
GROUP BY GROUPING SETS ((policy, guardrail, action, team_id), ())
ORDER BY is_total DESC, hits DESC, policy, guardrail, action, team_id";

/// Decision counts of an organization's requests in the filter's period.
pub async fn summary(conn: &mut AsyncPgConnection, org_id: Uuid, f: &Filter) -> Result<Summary> {
    let rows: Vec<HitRow> = diesel::sql_query(SUMMARY_SQL)
        .bind::<SqlUuid, _>(org_id)
        .bind::<Timestamptz, _>(f.from)
        .bind::<Timestamptz, _>(f.to)
        .bind::<Nullable<SqlUuid>, _>(f.team_id)
        .bind::<Nullable<Text>, _>(f.policy.clone())
        .bind::<Nullable<Text>, _>(f.action.clone())
        .bind::<Nullable<Text>, _>(f.guardrail.clone())
        .load(conn)
        .await?;
    let mut out = Summary::default();
    for r in rows {
        if r.is_total {
            out.requests = r.requests;
            out.decisions = r.hits;
            continue;
        }
        out.groups.push(Hits {
            policy: r.policy.unwrap_or_default(),
            guardrail: r.guardrail.unwrap_or_default(),
            action: r.action.unwrap_or_default(),
            team_id: r.team_id,
            hits: r.hits,
            requests: r.requests,
        });
    }
    Ok(out)
}

/// An audit row with at least one matching decision; [`Filter::decisions`] picks them out.
#[derive(Debug, Clone, QueryableByName)]
pub struct ExportRow {
    #[diesel(sql_type = SqlUuid)]
    pub id: Uuid,
    #[diesel(sql_type = Timestamptz)]
    pub created_at: DateTime<Utc>,
    #[diesel(sql_type = Nullable<SqlUuid>)]
    pub team_id: Option<Uuid>,
    #[diesel(sql_type = Nullable<SqlUuid>)]
    pub api_key_id: Option<Uuid>,
    #[diesel(sql_type = Nullable<Text>)]
    pub model: Option<String>,
    #[diesel(sql_type = Jsonb)]
    pub policy: Value,
}

// Keyset pagination on (created_at, id): each batch starts where the last ended, so a batch
// costs the same however deep into the period it is. `created_at >= $4` repeats the row
// comparison's lower bound in a form the index scan can start from. The containment test keeps
// only rows with an object matching every given filter (`{}` when none is: any object), so the
// last row of a batch always has a decision and is a valid cursor.
const EXPORT_SQL: &str = "\
SELECT a.id, a.created_at, a.team_id, a.api_key_id, a.model, a.policy
FROM audit_logs a
WHERE a.org_id = $1
  AND a.created_at >= $2 AND a.created_at < $3
  AND a.created_at >= $4 AND (a.created_at, a.id) > ($4, $5)
  AND a.policy_action IS NOT NULL
  AND ($6::uuid IS NULL OR a.team_id = $6::uuid)
  AND a.policy @> jsonb_build_array(jsonb_strip_nulls(jsonb_build_object(
        'policy', $7::text, 'action', $8::text, 'guardrail', $9::text)))
ORDER BY a.created_at, a.id
LIMIT $10";

/// Up to `limit` of an organization's audit rows with a matching decision, oldest first,
/// strictly after `after` (`created_at`, `id`); start with `(filter.from, Uuid::nil())`.
pub async fn export_batch(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    f: &Filter,
    after: (DateTime<Utc>, Uuid),
    limit: i64,
) -> Result<Vec<ExportRow>> {
    Ok(diesel::sql_query(EXPORT_SQL)
        .bind::<SqlUuid, _>(org_id)
        .bind::<Timestamptz, _>(f.from)
        .bind::<Timestamptz, _>(f.to)
        .bind::<Timestamptz, _>(after.0)
        .bind::<SqlUuid, _>(after.1)
        .bind::<Nullable<SqlUuid>, _>(f.team_id)
        .bind::<Nullable<Text>, _>(f.policy.clone())
        .bind::<Nullable<Text>, _>(f.action.clone())
        .bind::<Nullable<Text>, _>(f.guardrail.clone())
        .bind::<BigInt, _>(limit)
        .load(conn)
        .await?)
}

impl Filter {
    /// The decisions of an audit row's `policy` that match, in the order they were made; the
    /// same rules as [`summary`] (exact matches, missing names as '').
    pub fn decisions<'a>(&'a self, policy: &Value) -> impl Iterator<Item = Decision> + 'a {
        let wanted = |want: &Option<String>, got: &str| want.as_deref().is_none_or(|w| got == w);
        Decision::list(policy).into_iter().filter(move |d| {
            wanted(&self.policy, &d.policy) && wanted(&self.guardrail, &d.guardrail) && wanted(&self.action, &d.action)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn filter() -> Filter {
        Filter {
            from: DateTime::<Utc>::MIN_UTC,
            to: DateTime::<Utc>::MAX_UTC,
            team_id: None,
            policy: None,
            action: None,
            guardrail: None,
        }
    }

    #[test]
    fn decisions_are_objects_matching_every_filter() {
        let policy = json!([
            {"policy": "pii_redact", "guardrail": "pii_redact", "action": "redacted", "stage": "input",
             "reason": "EMAIL×2", "entities": {"EMAIL": 2}},
            "not a decision",
            {"policy": "topic_guard", "guardrail": "topic", "action": "blocked", "reason": "weapons"},
        ]);
        let any = filter();
        let all: Vec<Decision> = any.decisions(&policy).collect();
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].stage.as_deref(), Some("input"));
        assert_eq!(all[0].entities.get("EMAIL"), Some(&2));
        assert_eq!((all[1].stage.as_deref(), all[1].entities.len()), (None, 0));

        let f = Filter { action: Some("blocked".into()), ..filter() };
        let blocked: Vec<String> = f.decisions(&policy).map(|d| d.policy).collect();
        assert_eq!(blocked, ["topic_guard"]);
        let f = Filter { policy: Some("pii_redact".into()), action: Some("blocked".into()), ..filter() };
        assert_eq!(f.decisions(&policy).count(), 0);
        assert_eq!(filter().decisions(&json!({"policy": "x"})).count(), 0);
    }
}
