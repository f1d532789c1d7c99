//! The response cache's settings routes: `GET` answers a body that can be sent back, `PUT`
//! replaces, `PATCH` changes only what it names (for the organization and for a team), the
//! read-only parts refuse changes, and every field at fault is named.

use gw_tests::{expect_api_error, expect_field_error, json_of, Stack};
use serde_json::{json, Value};
use uuid::Uuid;

const ORG: &str = "/organizations/current/cache";

#[tokio::test]
async fn a_ttl_only_patch_leaves_the_tiers_as_they_were() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let put = json!({"l1": true, "l2": true, "ttl_seconds": 300});
    json_of(stack.admin_put(ORG, &s.access_token, &put).await, 200).await;
    let got = json_of(stack.admin_patch(ORG, &s.access_token, &json!({"ttl_seconds": 600})).await, 200).await;
    assert_eq!((got["l1"].as_bool(), got["l2"].as_bool(), got["l3"].as_bool()), (Some(true), Some(true), Some(false)));
    assert_eq!(got["ttl_seconds"], 600);
    // `null` puts a field back to its default.
    let got = json_of(stack.admin_patch(ORG, &s.access_token, &json!({"l2": null})).await, 200).await;
    assert_eq!(
        (got["l1"].as_bool(), got["l2"].as_bool(), got["ttl_seconds"].as_u64()),
        (Some(true), Some(false), Some(600))
    );
    // A PUT still replaces: what it leaves out takes its default.
    let got = json_of(stack.admin_put(ORG, &s.access_token, &json!({"l3": true})).await, 200).await;
    assert_eq!(
        (got["l1"].as_bool(), got["l3"].as_bool(), got["ttl_seconds"].as_u64()),
        (Some(false), Some(true), Some(3600))
    );
}

#[tokio::test]
async fn the_get_body_goes_back_through_put_and_patch_unchanged() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let team = stack.create_team(&s, "cache team").await;
    json_of(stack.admin_put(ORG, &s.access_token, &json!({"l1": true, "similarity_threshold": 0.95})).await, 200).await;
    let team_path = format!("/teams/{team}/cache");
    json_of(stack.admin_put(&team_path, &s.access_token, &json!({"l1": false, "ttl_seconds": 60})).await, 200).await;
    let got = json_of(stack.admin_get(ORG, &s.access_token).await, 200).await;
    assert_eq!(got["teams"][0]["settings"], json!({"l1": false, "ttl_seconds": 60}));
    let again = json_of(stack.admin_put(ORG, &s.access_token, &got).await, 200).await;
    assert_eq!(again, got);
    let again = json_of(stack.admin_patch(ORG, &s.access_token, &got).await, 200).await;
    assert_eq!(again, got);
}

#[tokio::test]
async fn a_team_patch_changes_only_what_it_names_and_null_inherits_again() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let team = stack.create_team(&s, "patched team").await;
    let path = format!("/teams/{team}/cache");
    json_of(stack.admin_patch(&path, &s.access_token, &json!({"l1": false})).await, 200).await;
    let got = json_of(stack.admin_patch(&path, &s.access_token, &json!({"ttl_seconds": 60})).await, 200).await;
    assert_eq!(got["teams"][0]["settings"], json!({"l1": false, "ttl_seconds": 60}));
    let got = json_of(stack.admin_patch(&path, &s.access_token, &json!({"l1": null})).await, 200).await;
    assert_eq!(got["teams"][0]["settings"], json!({"ttl_seconds": 60}));
    let r = stack.admin_patch(&format!("/teams/{}/cache", Uuid::new_v4()), &s.access_token, &json!({})).await;
    insta::assert_json_snapshot!(expect_api_error(r, 404).await, @r#"
    {
      "error": {
        "code": "not_found",
        "fields": [],
        "message": "team not found"
      }
    }
    "#);
}

#[tokio::test]
async fn the_read_only_parts_refuse_changes() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let mut got = json_of(stack.admin_get(ORG, &s.access_token).await, 200).await;
    got["teams"] = json!([{"team_id": Uuid::nil(), "settings": {"l1": true}}]);
    let b = expect_field_error(stack.admin_patch(ORG, &s.access_token, &got).await, "teams", "teams").await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "validation_error",
        "fields": [
          {
            "field": "teams",
            "message": "is read-only here; change a team's settings with PUT or PATCH /teams/{team_id}/cache"
          }
        ],
        "message": "teams: is read-only here; change a team's settings with PUT or PATCH /teams/{team_id}/cache"
      }
    }
    "#);
    let body = json!({"semantic": {"embedder": "other", "dimensions": 3}});
    expect_field_error(stack.admin_put(ORG, &s.access_token, &body).await, "semantic", "semantic").await;
}

#[tokio::test]
async fn a_schema_error_names_its_field() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let b =
        expect_field_error(stack.admin_patch(ORG, &s.access_token, &json!({"l1": "yes"})).await, "l1", "type").await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "validation_error",
        "fields": [
          {
            "field": "l1",
            "message": "must be a boolean, not string"
          }
        ],
        "message": "l1: must be a boolean, not string"
      }
    }
    "#);
    let b =
        expect_field_error(stack.admin_put(ORG, &s.access_token, &json!({"l4": true})).await, "l4", "unknown").await;
    assert_eq!(b["error"]["fields"][0]["message"], "is not a known field");
    let team = stack.create_team(&s, "typed team").await;
    let path = format!("/teams/{team}/cache");
    expect_field_error(
        stack.admin_patch(&path, &s.access_token, &json!({"ttl_seconds": -1})).await,
        "ttl_seconds",
        "team",
    )
    .await;
    let r = stack.admin_patch(ORG, &s.access_token, &json!([1])).await;
    let _: Value = expect_api_error(r, 400).await;
}

#[tokio::test]
async fn settings_out_of_range_are_refused() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    for (bad, field) in [
        (json!({"ttl_seconds": 0}), "ttl_seconds"),
        (json!({"ttl_seconds": 2_592_001}), "ttl_seconds"),
        (json!({"similarity_threshold": 0.2}), "similarity_threshold"),
    ] {
        let r = stack.admin_put("/organizations/current/cache", &s.access_token, &bad).await;
        let e = expect_api_error(r, 400).await;
        assert_eq!(e["error"]["fields"][0]["field"], field, "{bad}");
    }
    let r = stack.admin_put("/organizations/current/cache", &s.access_token, &json!({"l4": true})).await;
    expect_api_error(r, 400).await;
    let r = stack.admin_put(&format!("/teams/{}/cache", Uuid::new_v4()), &s.access_token, &json!({})).await;
    expect_api_error(r, 404).await;
    let r = stack.admin_post("/organizations/current/cache/purge", &s.access_token, &json!({"model": " "})).await;
    expect_api_error(r, 400).await;
    let got: Value = stack.admin_get("/organizations/current/cache", &s.access_token).await.json().await.unwrap();
    assert_eq!(got["l1"], false);
    assert_eq!(got["semantic"]["dimensions"], 384);
}
