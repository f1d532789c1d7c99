//! The web console as gw-admin serves it (`docs/console.md`): every file from the binary with a
//! strict Content-Security-Policy, revalidated by `ETag`, compressed; the mailed links and the
//! SSO callback's browser forward land on it. What the console does in a browser is tested in
//! tests/browser (chromium + playwright-core + axe-core). On the test binary's shared stack.

use gw_tests::Stack;
use reqwest::header::{ACCEPT, ACCEPT_ENCODING, CONTENT_ENCODING, CONTENT_TYPE, ETAG, IF_NONE_MATCH, LOCATION};

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
    connect-src 'self'; font-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'self'; \
    frame-ancestors 'none'";

fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap()
}

fn header<'a>(r: &'a reqwest::Response, name: &str) -> &'a str {
    r.headers().get(name).and_then(|v| v.to_str().ok()).unwrap_or("")
}

#[tokio::test]
async fn the_console_page_is_served_with_its_security_headers() {
    let stack = Stack::shared().await;
    for path in ["/console", "/console/"] {
        let r = stack.http.get(format!("{}{path}", stack.admin)).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
        assert_eq!(header(&r, "content-security-policy"), CSP);
        assert_eq!(header(&r, "x-content-type-options"), "nosniff");
        assert_eq!(header(&r, "x-frame-options"), "DENY");
        assert_eq!(header(&r, "referrer-policy"), "no-referrer");
        assert_eq!(header(&r, CONTENT_TYPE.as_str()), "text/html; charset=utf-8");
        let body = r.text().await.unwrap();
        assert!(body.contains(r#"<script type="module" src="/console/js/main.js"></script>"#), "{body}");
        // Nothing inline: the policy would refuse it anyway.
        assert!(!body.contains("<script>") && !body.contains("style="), "{body}");
    }
}

#[tokio::test]
async fn the_root_leads_to_the_console() {
    let stack = Stack::shared().await;
    let r = no_redirects().get(format!("{}/", stack.admin)).send().await.unwrap();
    assert_eq!(r.status(), 302);
    assert_eq!(header(&r, LOCATION.as_str()), "/console");
}

#[tokio::test]
async fn scripts_and_styles_come_from_the_binary_with_their_types() {
    let stack = Stack::shared().await;
    for (path, media) in [
        ("js/main.js", "text/javascript; charset=utf-8"),
        ("js/pages/reference.js", "text/javascript; charset=utf-8"),
        ("console.css", "text/css; charset=utf-8"),
        ("favicon.svg", "image/svg+xml"),
    ] {
        let r = stack.http.get(format!("{}/console/{path}", stack.admin)).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
        assert_eq!(header(&r, CONTENT_TYPE.as_str()), media, "{path}");
        assert_eq!(header(&r, "content-security-policy"), CSP, "{path}");
        assert_eq!(header(&r, "cache-control"), "no-cache", "{path}");
    }
}

#[tokio::test]
async fn a_file_not_in_the_console_is_404_with_the_policy() {
    let stack = Stack::shared().await;
    for path in ["/console/nope.js", "/console/js", "/console/index.html"] {
        let r = stack.http.get(format!("{}{path}", stack.admin)).send().await.unwrap();
        assert_eq!(r.status(), 404, "{path}");
        assert_eq!(header(&r, "content-security-policy"), CSP, "{path}");
    }
    // Only the files compiled in are ever served: no path reaches the disk.
    let r = stack.http.get(format!("{}/console/%2e%2e/src/main.rs", stack.admin)).send().await.unwrap();
    assert_eq!(r.status(), 404);
    assert!(!r.text().await.unwrap().contains("fn main"));
}

#[tokio::test]
async fn an_unchanged_file_is_not_sent_twice() {
    let stack = Stack::shared().await;
    let url = format!("{}/console/js/widgets.js", stack.admin);
    let r = stack.http.get(&url).send().await.unwrap();
    let tag = header(&r, ETAG.as_str()).to_string();
    assert!(tag.starts_with('"') && tag.len() > 10, "{tag}");
    let again = stack.http.get(&url).header(IF_NONE_MATCH, &tag).send().await.unwrap();
    assert_eq!(again.status(), 304);
    let other = stack.http.get(&url).header(IF_NONE_MATCH, "\"stale\"").send().await.unwrap();
    assert_eq!(other.status(), 200);
}

#[tokio::test]
async fn files_are_compressed_for_browsers_that_ask() {
    let stack = Stack::shared().await;
    let client = reqwest::Client::builder().no_gzip().build().unwrap();
    let r = client
        .get(format!("{}/console/js/widgets.js", stack.admin))
        .header(ACCEPT_ENCODING, "gzip")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, CONTENT_ENCODING.as_str()), "gzip");
}

#[tokio::test]
async fn mailed_links_open_the_console() {
    let stack = Stack::shared().await;
    for path in ["/reset-password", "/accept-invite", "/verify-email"] {
        let r = stack.http.get(format!("{}{path}", stack.admin)).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
        assert_eq!(header(&r, "content-security-policy"), CSP, "{path}");
        assert!(r.text().await.unwrap().contains("/console/js/main.js"), "{path}");
    }
}

#[tokio::test]
async fn a_browser_back_from_the_identity_provider_is_forwarded_to_the_console() {
    let stack = Stack::shared().await;
    let url = format!("{}/api/v1/auth/sso/callback?code=abc&state=def", stack.admin);
    let r = no_redirects()
        .get(&url)
        .header(ACCEPT, "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    assert_eq!(header(&r, LOCATION.as_str()), "/console#/sso-callback?code=abc&state=def");
    // An API client (the console's own fetch among them) gets the callback's answer.
    let r = no_redirects().get(&url).header(ACCEPT, "application/json").send().await.unwrap();
    assert_eq!(r.status(), 401, "an unknown state");
}
