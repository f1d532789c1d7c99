//! The template step, right after `resolve` and before limits and policies: a chat request that
//! references a prompt template (`"prompt": {"id", "version", "variables"}`) gets the version's
//! messages, rendered with its variables, before its own. The template's head (latest version,
//! labels) and the version's content come through the cached lookups (versions never change;
//! heads are invalidated when a label moves, a version is added or the template is deleted).
//! `docs/prompt-templates.md`.

use gw_shared::prompt_template::VersionRef;
use serde_json::{json, Value};

use crate::ctx::RequestCtx;
use crate::error::ProxyError;
use crate::state::Gateway;

pub async fn run(gw: &Gateway, ctx: &mut RequestCtx) -> Result<(), ProxyError> {
    let Some(prompt) = ctx.request.as_mut().and_then(|r| r.prompt.take()) else { return Ok(()) };
    let Some(key) = ctx.key.clone() else { return Err(ProxyError::MissingAuth) };
    let head = gw
        .lookups
        .templates
        .get(&(key.org_id, prompt.id), &|| true)
        .await
        .map_err(|_| ProxyError::StoreUnavailable)?
        .ok_or_else(|| ProxyError::PromptNotFound(format!("No prompt template '{}' exists.", prompt.id)))?;
    let number = head.number(&prompt.version).ok_or_else(|| {
        ProxyError::PromptNotFound(match &prompt.version {
            VersionRef::Label(l) => {
                format!("Prompt template '{}' has no label '{}'.", prompt.id, gw_shared::openai::validate::echo(l))
            }
            VersionRef::Number(n) => format!("Prompt template '{}' has no version {n}.", prompt.id),
            VersionRef::Latest => format!("No prompt template '{}' exists.", prompt.id),
        })
    })?;
    let content = gw
        .lookups
        .template_versions
        .get(&(key.org_id, prompt.id, number), &|| true)
        .await
        .map_err(|_| ProxyError::StoreUnavailable)?
        .ok_or_else(|| {
            ProxyError::PromptNotFound(format!("Prompt template '{}' has no version {number}.", prompt.id))
        })?;
    let rendered = content.render(&prompt.variables).map_err(|e| ProxyError::BadRequest {
        message: format!(
            "Invalid 'prompt.{}': {} (prompt template '{}', version {number}).",
            e.field, e.message, prompt.id
        ),
        param: Some(format!("prompt.{}", e.field)),
    })?;
    let messages: Vec<Value> = rendered.into_iter().map(|m| json!({"role": m.role, "content": m.content})).collect();
    if let Some(req) = ctx.request.as_mut() {
        req.prepend_messages(messages);
    }
    ctx.template = Some((prompt.id, number));
    Ok(())
}
