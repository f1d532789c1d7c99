//! gw-stack: starts a test stack (mock upstream, gw-admin, gw-proxy) exactly as the Rust
//! integration tests do, prints its addresses as one JSON line, and stops it when standard input
//! closes. The Python SDK and wire-format tests drive gw through it.

use std::io::Read;

use gw_tests::Stack;
use serde_json::json;

#[tokio::main]
async fn main() {
    let stack = Stack::start().await;
    println!(
        "{}",
        json!({"proxy": stack.proxy, "admin": stack.admin, "mock": stack.mock, "proxy_metrics": stack.proxy_metrics})
    );
    // Block until our parent closes stdin (or dies), then drop the stack, killing its processes.
    let _ = tokio::task::spawn_blocking(|| {
        let mut sink = Vec::new();
        let _ = std::io::stdin().read_to_end(&mut sink);
    })
    .await;
    drop(stack);
}
