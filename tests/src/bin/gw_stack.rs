//! gw-stack: starts a test stack (mock upstream, gw-admin, gw-proxy) exactly as the Rust
//! integration tests do, prints its addresses as one JSON line, and stops it when standard input
//! closes. The Python SDK and wire-format tests drive gw through it. With
//! `GW_STACK_ROUTES=database` the stack runs on a database of its own with the route catalog
//! managed there (its URL and the config file's path are printed too). `GW_STACK_DNS`
//! (`ip:port`) is the resolver e-mail domain proofs are looked up through, and
//! `GW_STACK_SMTP_URL` the SMTP server mail is delivered to; `GW_STACK_ADMIN_CONFIG` holds more
//! `[admin]` keys. `GW_STACK_FRESH_DB=1` runs the stack on a database of its own (the routes as
//! usual), and `GW_STACK_CLOCK_FILE` is the file both processes read the time from
//! (`GW_TEST_CLOCK_FILE`: the admin's webhook relay, hourly rollups and usage sync, the proxy's
//! `created_at`), for tests that move time; such a stack needs a database of its own, or its jobs
//! would schedule other tests' work by that clock. `GW_STACK_BILLING` holds more `[billing]` keys
//! (the usage sync's meters and timings), and `GW_STACK_BILLING_API_BASE` replaces the billing
//! provider (the mock's Stripe dialect) with another (`localstripe`). `GW_STACK_EXTRA` holds more
//! config (providers and models of a test module's own), `GW_STACK_PROXY` the `[proxy]` keys
//! (replacing the harness's own).

use std::io::Read;

use gw_tests::{db, Stack, StackOptions};
use serde_json::json;

#[tokio::main]
async fn main() {
    let catalog = std::env::var("GW_STACK_ROUTES").is_ok_and(|v| v == "database");
    // The receivers in the Python tests (SSO identity providers, webhook endpoints) run on this
    // machine, over plain HTTP: the outbound guard allows loopback here (the Rust tests check that
    // it refuses it by default). The webhook relay looks for work every 100 ms.
    let mut admin_config =
        "outbound_allow = [\"127.0.0.0/8\", \"::1/128\"]\nwebhooks_allow_http = true\nwebhooks_poll_ms = 100"
            .to_string();
    if let Ok(dns) = std::env::var("GW_STACK_DNS") {
        admin_config.push_str(&format!("\ndns_resolver = \"{dns}\""));
    }
    if let Ok(extra) = std::env::var("GW_STACK_ADMIN_CONFIG") {
        admin_config.push('\n');
        admin_config.push_str(&extra);
    }
    let mut env: Vec<(String, String)> =
        std::env::var("GW_STACK_SMTP_URL").map(|url| vec![("GW_SMTP_URL".to_string(), url)]).unwrap_or_default();
    // The billing provider's webhook secrets (two: a rotation's overlap) and the prices gw sells.
    // The provider is the mock upstream's Stripe dialect.
    env.push(("STRIPE_WEBHOOK_SECRET".to_string(), "whsec_gw_stack_old,whsec_gw_stack".to_string()));
    env.push(("STRIPE_SECRET_KEY".to_string(), "sk_test_gw_stack".to_string()));
    let billing = std::env::var("GW_STACK_BILLING").unwrap_or_default();
    let api_base = std::env::var("GW_STACK_BILLING_API_BASE").unwrap_or_else(|_| "{mock}".into());
    let mut extra_config = format!(
        "[billing]\napi_base = \"{api_base}\"\ngrace_check_secs = 1\n{billing}\n[billing.prices]\ngrowth = \"price_growth\"\n\
         enterprise = \"price_enterprise\""
    );
    if let Ok(extra) = std::env::var("GW_STACK_EXTRA") {
        extra_config.push('\n');
        extra_config.push_str(&extra);
    }
    if let Ok(file) = std::env::var("GW_STACK_CLOCK_FILE") {
        env.push(("GW_TEST_CLOCK_FILE".to_string(), file));
    }
    let proxy_config = std::env::var("GW_STACK_PROXY").unwrap_or_default();
    let fresh = std::env::var("GW_STACK_FRESH_DB").is_ok_and(|v| v == "1");
    let (stack, database_url) = if catalog {
        let url = db::fresh_database().await;
        let opts = StackOptions {
            database_url: Some(url.clone()),
            routing_config: Some("routes = \"database\"\nhealth_check_interval_ms = 0".into()),
            admin_config,
            env,
            extra_config,
            ..Default::default()
        };
        (Stack::start_with(opts).await, Some(url))
    } else if fresh {
        let url = db::fresh_database().await;
        let opts =
            StackOptions { database_url: Some(url.clone()), admin_config, env, extra_config, ..Default::default() };
        (Stack::start_with(opts).await, Some(url))
    } else {
        let opts = StackOptions { admin_config, env, extra_config, proxy_config, ..Default::default() };
        (Stack::start_with(opts).await, None)
    };
    let config = database_url.as_ref().map(|_| stack.config_path().display().to_string());
    println!(
        "{}",
        json!({"proxy": stack.proxy, "admin": stack.admin, "mock": stack.mock, "proxy_metrics": stack.proxy_metrics,
               "database_url": database_url, "config": config})
    );
    // Block until our parent closes stdin (or dies), then drop the stack, killing its processes.
    let _ = tokio::task::spawn_blocking(|| {
        let mut sink = Vec::new();
        let _ = std::io::stdin().read_to_end(&mut sink);
    })
    .await;
    drop(stack);
}
