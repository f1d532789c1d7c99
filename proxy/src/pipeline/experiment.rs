//! The experiment step, after `parse` and before `resolve` (a variant may name another model,
//! which must then pass the same access checks): a chat request that falls into one of the
//! organization's running experiments is assigned a variant, sticky by its key (the OpenAI
//! `user` field, else the `x-gw-experiment-key` header, else its request id), and takes the
//! variant's model and template version. A playground comparison names its models itself and
//! takes part in no experiment. `docs/experiments.md`.

use std::sync::Arc;

use gw_shared::db::api_keys::KIND_PLAYGROUND;
use gw_shared::headers;
use gw_shared::prompt_template::VersionRef;
use pingora::proxy::Session;
use serde_json::Value;

use crate::ctx::RequestCtx;
use crate::error::ProxyError;
use crate::state::Gateway;

/// Longest stickiness key read (a longer one is cut).
const MAX_KEY: usize = 256;

/// `k` cut to at most [`MAX_KEY`] bytes, on a character boundary.
fn bounded(k: &str) -> &str {
    let mut end = k.len().min(MAX_KEY);
    while !k.is_char_boundary(end) {
        end -= 1;
    }
    &k[..end]
}

pub async fn run(gw: &Gateway, session: &Session, ctx: &mut RequestCtx) -> Result<(), ProxyError> {
    let Some(key) = ctx.key.clone() else { return Err(ProxyError::MissingAuth) };
    if key.kind == KIND_PLAYGROUND {
        return Ok(());
    }
    let Some(req) = ctx.request.as_ref() else { return Ok(()) };
    // Experiments are optional: with the store unreachable and nothing cached, the request goes
    // as sent rather than failing.
    let Ok(Some(running)) = gw.lookups.experiments.get(&key.org_id, &|| true).await else { return Ok(()) };
    let template = req.prompt.as_ref().map(|p| p.id);
    let Some(exp) = running.matching(&req.model, template, ctx.team_id) else { return Ok(()) };
    let user = req.body().get("user").and_then(Value::as_str).filter(|s| !s.is_empty());
    let header = session.req_header().headers.get(headers::EXPERIMENT_KEY).and_then(|v| v.to_str().ok());
    let id_text;
    let sticky = match user.or(header.filter(|h| !h.is_empty())) {
        Some(k) => bounded(k),
        None => {
            id_text = ctx.request_id.to_string();
            &id_text
        }
    };
    let variant = exp.assign(sticky);
    let (id, name, model, version) = (exp.id, variant.name.clone(), variant.model.clone(), variant.template_version);
    if let Some(req) = ctx.request.as_mut() {
        if let Some(m) = &model {
            req.set_model(m);
        }
        if let (Some(v), Some(p)) = (version, req.prompt.as_mut()) {
            p.version = VersionRef::Number(v);
        }
    }
    if let Some(m) = model {
        ctx.model = Some(m);
    }
    ctx.experiment = Some((id, Arc::from(name)));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_key_is_cut_on_a_character_boundary() {
        assert_eq!(bounded("abc"), "abc");
        let long = "é".repeat(200);
        let cut = bounded(&long);
        assert!(cut.len() <= MAX_KEY && cut.chars().all(|c| c == 'é') && cut.len() == 256);
        let odd = format!("x{}", "é".repeat(200));
        assert_eq!(bounded(&odd).len(), 255);
    }
}
