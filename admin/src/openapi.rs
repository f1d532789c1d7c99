//! The OpenAPI 3.1 document of `/api/v1`, collected from the handlers themselves (utoipa): every
//! route registered through `utoipa_actix_web` is in it, with the types its handler reads and
//! writes, so the document cannot drift from the code. Served at `/api/v1/openapi.json`.

use actix_web::{get, web, HttpResponse};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};
use utoipa_actix_web::AppExt;

use crate::error::ErrorBody;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "gw management API",
        version = "1",
        description = "Manage a gw organization: teams, members, invites, API keys, provider keys, SSO, \
                       the admin audit trail and policy analytics. Authenticate with a session access token \
                       (`POST /auth/login`) as `Authorization: Bearer <access_token>`. Errors share one body; \
                       lists share one pagination (`limit`, `cursor`, `next_cursor`). See docs/api.md and \
                       docs/roles.md."
    ),
    modifiers(&BearerAuth),
    components(schemas(ErrorBody)),
    security(("bearer" = []))
)]
pub struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        if let Some(c) = openapi.components.as_mut() {
            c.add_security_scheme(
                "bearer",
                SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).bearer_format("JWT").build()),
            );
        }
    }
}

/// The document, built from the same route table the server serves. Each operation carries
/// `x-gw-role`: the least role the role matrix allows (`public` for none), so clients and the
/// matrix test read the rules from the document.
pub fn document() -> utoipa::openapi::OpenApi {
    let (_, mut doc) = actix_web::App::new()
        .into_utoipa_app()
        .openapi(ApiDoc::openapi())
        .configure(crate::routes::api)
        .split_for_parts();
    for (path, item) in doc.paths.paths.iter_mut() {
        let ops = [
            ("GET", item.get.as_mut()),
            ("POST", item.post.as_mut()),
            ("PUT", item.put.as_mut()),
            ("PATCH", item.patch.as_mut()),
            ("DELETE", item.delete.as_mut()),
        ];
        for (method, op) in ops {
            let Some(op) = op else { continue };
            let role = match crate::authz::lookup(method, path) {
                Some(crate::authz::Access::Public) => "public".to_string(),
                Some(crate::authz::Access::Least(r)) => r.to_string(),
                Some(crate::authz::Access::Operator) => "operator".to_string(),
                Some(crate::authz::Access::Account) => "account".to_string(),
                // The matrix test fails on this; the document says so too.
                None => "unruled".to_string(),
            };
            let ext = utoipa::openapi::extensions::ExtensionsBuilder::new().add("x-gw-role", role).build();
            match op.extensions.as_mut() {
                Some(e) => e.merge(ext),
                None => op.extensions = Some(ext),
            }
        }
    }
    doc
}

/// The document as served, rendered once at start-up.
pub struct Rendered(pub String);

/// The OpenAPI 3.1 document of this API.
#[utoipa::path(operation_id = "get_openapi_document", tag = "meta", security(()), responses((status = 200, description = "The OpenAPI document", content_type = "application/json")))]
#[get("/openapi.json")]
pub async fn serve(doc: web::Data<Rendered>) -> HttpResponse {
    HttpResponse::Ok().content_type("application/json").body(doc.0.clone())
}
