//! Which of an organization's policies apply to one request: its mandatory ones, its team's, the
//! defaults, and what `x-gw-policy` adds or opts out of.

use std::sync::Arc;

use super::{CompiledPolicy, PolicySet};
use crate::policy::spec::valid_name;

/// Most policy names one `x-gw-policy` header may carry.
pub const MAX_HEADER_POLICIES: usize = 20;

/// The policies a request's team adds to its organization's: defaults a request may switch off,
/// and mandatory ones it may not.
#[derive(Debug, Default, Clone, Copy)]
pub struct TeamPolicies<'a> {
    pub defaults: &'a [String],
    pub mandatory: &'a [String],
}

impl TeamPolicies<'_> {
    /// No team, or a team without policies of its own.
    pub const NONE: TeamPolicies<'static> = TeamPolicies { defaults: &[], mandatory: &[] };
}

/// Why the policies a request names cannot apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResolveError {
    Unknown { name: String, available: Vec<String> },
    Mandatory(String),
    TeamMandatory(String),
    Malformed(String),
    TooMany,
}

impl std::fmt::Display for ResolveError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ResolveError::Unknown { name, available } => {
                write!(f, "Unknown policy '{name}' in x-gw-policy. Available policies: {}.", available.join(", "))
            }
            ResolveError::Mandatory(name) => write!(
                f,
                "Policy '{name}' is mandatory for your organization and cannot be switched off with x-gw-policy."
            ),
            ResolveError::TeamMandatory(name) => {
                write!(f, "Policy '{name}' is mandatory for your team and cannot be switched off with x-gw-policy.")
            }
            ResolveError::Malformed(what) => write!(
                f,
                "Malformed x-gw-policy header: {what}. Expected comma-separated policy names, each optionally \
                 prefixed with '-' to opt out of a default."
            ),
            ResolveError::TooMany => write!(f, "x-gw-policy names more than {MAX_HEADER_POLICIES} policies."),
        }
    }
}

impl PolicySet {
    /// The policies for one request, in order: the organization's mandatory ones, the team's
    /// mandatory ones, the organization's defaults, the team's defaults, then the header's, each
    /// once. `-name` in the header opts out of a default that neither makes mandatory.
    pub fn resolve(
        &self,
        team: TeamPolicies<'_>,
        header: Option<&str>,
    ) -> Result<Vec<Arc<CompiledPolicy>>, ResolveError> {
        let mut added: Vec<&str> = Vec::new();
        let mut removed: Vec<&str> = Vec::new();
        if let Some(h) = header {
            let names: Vec<&str> = h.split(',').map(str::trim).filter(|n| !n.is_empty()).collect();
            if names.len() > MAX_HEADER_POLICIES {
                return Err(ResolveError::TooMany);
            }
            for n in names {
                let (opt_out, name) = match n.strip_prefix('-') {
                    Some(rest) => (true, rest.trim()),
                    None => (false, n),
                };
                if !valid_name(name) {
                    return Err(ResolveError::Malformed(format!(
                        "'{}' is not a policy name",
                        crate::openai::validate::echo(name)
                    )));
                }
                if self.get(name).is_none() {
                    return Err(ResolveError::Unknown { name: name.to_string(), available: self.available.clone() });
                }
                if opt_out {
                    if self.mandatory.iter().any(|m| m == name) {
                        return Err(ResolveError::Mandatory(name.to_string()));
                    }
                    if team.mandatory.iter().any(|m| m == name) {
                        return Err(ResolveError::TeamMandatory(name.to_string()));
                    }
                    removed.push(name);
                } else {
                    added.push(name);
                }
            }
        }
        let mut out: Vec<Arc<CompiledPolicy>> = Vec::new();
        let push = |name: &str, out: &mut Vec<Arc<CompiledPolicy>>| {
            if out.iter().any(|p| &*p.name == name) {
                return;
            }
            let p = self.get(name).unwrap_or_else(|| {
                // A default naming a policy that is gone (removed since): fail closed rather than
                // silently drop a guardrail somebody relied on.
                Arc::new(CompiledPolicy::broken(name, format!("policy '{name}' is not defined")))
            });
            out.push(p);
        };
        for name in self.mandatory.iter().chain(team.mandatory) {
            push(name, &mut out);
        }
        for name in self.defaults.iter().chain(team.defaults) {
            if !removed.contains(&name.as_str()) {
                push(name, &mut out);
            }
        }
        for name in added {
            push(name, &mut out);
        }
        Ok(out)
    }
}
