//! The one outbound guard on SSO: an identity provider's discovery is never fetched from a
//! private, loopback, link-local or metadata address, nor from a name resolving to one, unless
//! the operator allows that network (`admin.outbound_allow`; the Python SSO tests run with
//! loopback allowed, against a real provider on this machine).

use gw_tests::{db, expect_api_error, json_of, Stack};
use serde_json::json;

#[tokio::test]
async fn discovery_of_private_and_metadata_addresses_is_refused() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    db::set_plan(s.org_id, "growth").await;
    let cases = [
        ("http://127.0.0.1:9/idp", "127.0.0.1 is not a public address"),
        ("https://169.254.169.254/latest/meta-data", "169.254.169.254 is not a public address"),
        ("https://10.0.0.8/idp", "10.0.0.8 is not a public address"),
        ("http://[::1]:9/idp", "::1 is not a public address"),
    ];
    for (issuer, why) in cases {
        let domain = format!("guard-{}.example", uuid::Uuid::new_v4().simple());
        let body = json!({"name": "idp", "issuer": issuer, "client_id": "c", "client_secret": "s3cret-client-secret",
            "email_domains": [domain]});
        let c = json_of(stack.admin_post("/sso/connections", &s.access_token, &body).await, 201).await;
        // By connection: its domain is not proven (that is not what this test is about).
        let r = stack.public_post("/auth/sso/initiate", &json!({"connection_id": c["id"]})).await;
        let b = expect_api_error(r, 502).await;
        let message = b["error"]["message"].as_str().unwrap();
        assert!(message.contains(why), "{issuer}: {message}");
    }
    // Plain http to a metadata address is refused already when the connection is saved.
    let body = json!({"name": "idp", "issuer": "http://169.254.169.254/latest", "client_id": "c",
        "client_secret": "s3cret-client-secret", "email_domains": ["metadata-guard.example"]});
    expect_api_error(stack.admin_post("/sso/connections", &s.access_token, &body).await, 400).await;
    // A name that resolves to loopback: refused after resolution.
    let domain = format!("guard-{}.example", uuid::Uuid::new_v4().simple());
    let body = json!({"name": "idp", "issuer": "http://localhost:9/idp", "client_id": "c",
        "client_secret": "s3cret-client-secret", "email_domains": [domain]});
    let c = json_of(stack.admin_post("/sso/connections", &s.access_token, &body).await, 201).await;
    let r = stack.public_post("/auth/sso/initiate", &json!({"connection_id": c["id"]})).await;
    let b = expect_api_error(r, 502).await;
    insta::assert_json_snapshot!(b, {".error.message" => "[message]"}, @r#"
    {
      "error": {
        "code": "bad_gateway",
        "fields": [],
        "message": "[message]"
      }
    }
    "#);
    let message = b["error"]["message"].as_str().unwrap();
    assert!(message.starts_with("the identity provider's address is not allowed: localhost resolves to "), "{message}");
    assert!(
        message.ends_with("which is not a public address (an operator may allow its network: admin.outbound_allow)")
    );
}
