//! The web console (`docs/console.md`): a static single-page application in `admin/console/`,
//! compiled into the binary so gw-admin serves every byte itself (no CDN, air-gapped as is).
//! It talks to `/api/v1` like any client. Every answer carries a strict Content-Security-Policy
//! (scripts and styles from this origin only, no inline script, no framing), and an `ETag`
//! of its content so a reload costs a 304.

use actix_web::http::header::{self, HeaderValue};
use actix_web::{web, HttpRequest, HttpResponse};
use sha2::{Digest, Sha256};
use std::sync::OnceLock;

/// One file of the console: its path under `/console/`, media type and content.
struct Asset {
    path: &'static str,
    media_type: &'static str,
    body: &'static [u8],
}

macro_rules! assets {
    ($(($path:literal, $media:literal)),* $(,)?) => {
        &[$(Asset { path: $path, media_type: $media, body: include_bytes!(concat!("../console/", $path)) }),*]
    };
}

const ASSETS: &[Asset] = assets![
    ("index.html", "text/html; charset=utf-8"),
    ("console.css", "text/css; charset=utf-8"),
    ("favicon.svg", "image/svg+xml"),
    ("js/main.js", "text/javascript; charset=utf-8"),
    ("js/api.js", "text/javascript; charset=utf-8"),
    ("js/dom.js", "text/javascript; charset=utf-8"),
    ("js/widgets.js", "text/javascript; charset=utf-8"),
    ("js/charts.js", "text/javascript; charset=utf-8"),
    ("js/pages/auth.js", "text/javascript; charset=utf-8"),
    ("js/pages/org.js", "text/javascript; charset=utf-8"),
    ("js/pages/keys.js", "text/javascript; charset=utf-8"),
    ("js/pages/policy.js", "text/javascript; charset=utf-8"),
    ("js/pages/analytics.js", "text/javascript; charset=utf-8"),
    ("js/pages/webhooks.js", "text/javascript; charset=utf-8"),
    ("js/pages/prompts.js", "text/javascript; charset=utf-8"),
    ("js/pages/reference.js", "text/javascript; charset=utf-8"),
    ("js/pages/gateway.js", "text/javascript; charset=utf-8"),
];

/// The Content-Security-Policy of every console answer: nothing inline, nothing from elsewhere.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
    connect-src 'self'; font-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'self'; \
    frame-ancestors 'none'";

fn etags() -> &'static [String] {
    static TAGS: OnceLock<Vec<String>> = OnceLock::new();
    TAGS.get_or_init(|| ASSETS.iter().map(|a| format!("\"{}\"", hex::encode(&Sha256::digest(a.body)[..12]))).collect())
}

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/", web::get().to(|| async { redirect() }))
        // The links gw mails (`{admin.public_url}/reset-password#token=...`): the console reads the
        // token from the fragment, which no server sees.
        .route("/reset-password", web::get().to(index))
        .route("/accept-invite", web::get().to(index))
        .route("/verify-email", web::get().to(index))
        .service(
            web::scope("/console")
                .wrap(actix_web::middleware::Compress::default())
                .route("", web::get().to(index))
                .route("/{path:.*}", web::get().to(asset)),
        );
}

fn redirect() -> HttpResponse {
    HttpResponse::Found().insert_header((header::LOCATION, "/console")).finish()
}

async fn index(req: HttpRequest) -> HttpResponse {
    serve(&req, 0)
}

async fn asset(req: HttpRequest, path: web::Path<String>) -> HttpResponse {
    match ASSETS.iter().position(|a| a.path == path.as_str()) {
        // The application's pages are `#/...` fragments of the index, never paths.
        Some(i) if i > 0 => serve(&req, i),
        _ => with_headers(HttpResponse::NotFound().content_type("text/plain; charset=utf-8")).body("not found\n"),
    }
}

fn serve(req: &HttpRequest, i: usize) -> HttpResponse {
    let a = &ASSETS[i];
    // Console development: `GW_CONSOLE_DIR` serves the files from disk as they are edited (only
    // the paths listed above, read afresh each time), without rebuilding gw-admin.
    if let Some(dir) = std::env::var_os("GW_CONSOLE_DIR") {
        return match std::fs::read(std::path::Path::new(&dir).join(a.path)) {
            Ok(body) => with_headers(&mut HttpResponse::Ok())
                .insert_header((header::CACHE_CONTROL, "no-store"))
                .content_type(a.media_type)
                .body(body),
            Err(_) => with_headers(&mut HttpResponse::NotFound()).finish(),
        };
    }
    let tag = &etags()[i];
    let fresh = req
        .headers()
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == tag));
    let mut res = if fresh { HttpResponse::NotModified() } else { HttpResponse::Ok() };
    let res = with_headers(&mut res)
        .insert_header((header::ETAG, tag.as_str()))
        // Always revalidated: a new gw-admin never serves a stale script to an open console.
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .content_type(a.media_type);
    if fresh {
        res.finish()
    } else {
        res.body(a.body)
    }
}

fn with_headers(res: &mut actix_web::HttpResponseBuilder) -> &mut actix_web::HttpResponseBuilder {
    res.insert_header((header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP)))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .insert_header((header::X_FRAME_OPTIONS, "DENY"))
        .insert_header((header::REFERRER_POLICY, "no-referrer"))
        .insert_header(("cross-origin-opener-policy", "same-origin"))
        .insert_header(("permissions-policy", "camera=(), microphone=(), geolocation=(), payment=()"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every file in `admin/console/` is served, and nothing served is missing from it.
    #[test]
    fn every_console_file_is_served() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("console");
        let mut found = Vec::new();
        let mut dirs = vec![root.clone()];
        while let Some(d) = dirs.pop() {
            for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                let p = e.path();
                if p.is_dir() {
                    dirs.push(p);
                } else if let Ok(rel) = p.strip_prefix(&root) {
                    found.push(rel.to_string_lossy().replace('\\', "/"));
                }
            }
        }
        found.sort();
        let mut served: Vec<String> = ASSETS.iter().map(|a| a.path.to_string()).collect();
        served.sort();
        assert_eq!(found, served);
    }

    #[test]
    fn the_policy_allows_no_inline_script() {
        let script = CSP.split(';').find(|d| d.trim().starts_with("script-src")).unwrap_or_default();
        assert_eq!(script.trim(), "script-src 'self'");
        assert!(!CSP.contains("unsafe"));
    }
}
