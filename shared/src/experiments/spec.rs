//! What an experiment is: its metric, the traffic it applies to and its variants, checked once
//! when it is created; and which running experiment a request falls into (`docs/experiments.md`).

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::assign::BUCKETS;

/// Variants an experiment has at least and at most.
pub const MIN_VARIANTS: usize = 2;
pub const MAX_VARIANTS: usize = 8;

/// What an experiment measures per request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// Total latency in milliseconds (answered requests only): lower is better.
    Latency,
    /// Cost in USD of answered requests: lower is better.
    Cost,
    /// 1 when the request failed on gw's or the upstream's side (status 5xx, 429 from an
    /// upstream, a broken stream), else 0: lower is better.
    ErrorRate,
    /// The feedback score sent for the request (requests without one are not counted): higher is
    /// better.
    Feedback,
}

impl Metric {
    pub fn label(self) -> &'static str {
        match self {
            Metric::Latency => "latency",
            Metric::Cost => "cost",
            Metric::ErrorRate => "error_rate",
            Metric::Feedback => "feedback",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "latency" => Some(Metric::Latency),
            "cost" => Some(Metric::Cost),
            "error_rate" => Some(Metric::ErrorRate),
            "feedback" => Some(Metric::Feedback),
            _ => None,
        }
    }

    /// Whether a larger value is better.
    pub fn higher_is_better(self) -> bool {
        matches!(self, Metric::Feedback)
    }
}

/// One variant as stored: what it changes about a request, and its share of the traffic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Variant {
    pub name: String,
    /// The model the request is sent to instead of the one it names; `None`: as requested.
    #[serde(default)]
    pub model: Option<String>,
    /// The template version rendered instead of the one the request names; `None`: as
    /// requested.
    #[serde(default)]
    pub template_version: Option<i32>,
    /// The weight as given (relative).
    pub weight: u32,
    /// The share of the traffic in basis points (the weights normalized to 10,000).
    pub basis_points: u32,
}

/// The traffic an experiment applies to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Traffic {
    /// Requests naming this model (or alias), as sent.
    pub model: Option<String>,
    /// Requests rendering this prompt template.
    pub template_id: Option<Uuid>,
    /// Only this team's requests.
    pub team_id: Option<Uuid>,
}

/// A running experiment as the proxy keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveExperiment {
    pub id: Uuid,
    pub traffic: Traffic,
    pub variants: Vec<Variant>,
}

/// An organization's running experiments, oldest started first (the first that matches a
/// request takes it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Running {
    pub experiments: Vec<LiveExperiment>,
}

impl Running {
    /// The experiment a request falls into: the first whose traffic matches the model it names,
    /// the template it renders and its team.
    pub fn matching(&self, model: &str, template: Option<Uuid>, team: Option<Uuid>) -> Option<&LiveExperiment> {
        self.experiments.iter().find(|e| {
            e.traffic.model.as_deref().is_none_or(|m| m == model)
                && e.traffic.template_id.is_none_or(|t| template == Some(t))
                && e.traffic.team_id.is_none_or(|t| team == Some(t))
        })
    }
}

impl LiveExperiment {
    /// The variant a request with this stickiness key gets.
    pub fn assign(&self, key: &str) -> &Variant {
        let weights: Vec<u32> = self.variants.iter().map(|v| v.basis_points).collect();
        &self.variants[super::assign::variant(self.id, key, &weights).min(self.variants.len() - 1)]
    }
}

/// A variant as an operator writes it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct VariantInput {
    /// 1–64 characters: lowercase letters, digits, `-`, `_`, `.`. The first variant is the
    /// control.
    pub name: String,
    /// The model to send the request to instead of the one it names.
    #[serde(default)]
    pub model: Option<String>,
    /// The version of the experiment's template to render instead of the requested one
    /// (needs `traffic.template_id`).
    #[serde(default)]
    pub template_version: Option<i32>,
    /// A relative weight (1–10,000): shares are the weights over their sum. Default 1.
    #[serde(default = "one")]
    pub weight: u32,
}

fn one() -> u32 {
    1
}

/// A problem with an experiment's definition, naming the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct SpecError {
    pub field: String,
    pub message: String,
}

fn problem(field: impl Into<String>, message: impl Into<String>) -> SpecError {
    SpecError { field: field.into(), message: message.into() }
}

fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'_' | b'.'))
}

/// Checks variants against the traffic they apply to and normalizes their weights.
pub fn variants(input: &[VariantInput], traffic: &Traffic) -> Result<Vec<Variant>, SpecError> {
    if !(MIN_VARIANTS..=MAX_VARIANTS).contains(&input.len()) {
        return Err(problem("variants", format!("must have {MIN_VARIANTS} to {MAX_VARIANTS} variants")));
    }
    let mut seen: Vec<(&str, Option<&str>, Option<i32>)> = Vec::new();
    for (i, v) in input.iter().enumerate() {
        let at = |f: &str| format!("variants[{i}].{f}");
        if !valid_name(&v.name) {
            return Err(problem(at("name"), "must be 1 to 64 lowercase letters, digits, '-', '_' or '.'"));
        }
        if seen.iter().any(|(n, _, _)| *n == v.name) {
            return Err(problem(at("name"), format!("\"{}\" is used by an earlier variant", v.name)));
        }
        if let Some(m) = &v.model {
            if m.trim().is_empty() || m.len() > 256 {
                return Err(problem(at("model"), "must be 1 to 256 characters"));
            }
        }
        if let Some(n) = v.template_version {
            if traffic.template_id.is_none() {
                return Err(problem(at("template_version"), "needs traffic.template_id: the template to render"));
            }
            if n < 1 {
                return Err(problem(at("template_version"), "must be 1 or more"));
            }
        }
        if !(1..=10_000).contains(&v.weight) {
            return Err(problem(at("weight"), "must be 1 to 10000"));
        }
        let same = (v.name.as_str(), v.model.as_deref(), v.template_version);
        if seen.iter().any(|(_, m, t)| (*m, *t) == (same.1, same.2)) {
            return Err(problem(at("model"), "changes nothing another variant does not: variants must differ"));
        }
        seen.push(same);
    }
    let total: u64 = input.iter().map(|v| u64::from(v.weight)).sum();
    let mut out: Vec<Variant> = input
        .iter()
        .map(|v| Variant {
            name: v.name.clone(),
            model: v.model.clone(),
            template_version: v.template_version,
            weight: v.weight,
            basis_points: (u64::from(v.weight) * u64::from(BUCKETS) / total) as u32,
        })
        .collect();
    // Rounding down leaves a few basis points over: the last variant takes them.
    let given: u32 = out.iter().map(|v| v.basis_points).sum();
    if let Some(last) = out.last_mut() {
        last.basis_points += BUCKETS - given;
    }
    if let Some((i, _)) = out.iter().enumerate().find(|(_, v)| v.basis_points == 0) {
        return Err(problem(format!("variants[{i}].weight"), "is too small a share: it would get no traffic"));
    }
    Ok(out)
}

/// Checks the traffic an experiment applies to.
pub fn traffic(t: &Traffic) -> Result<(), SpecError> {
    if t.model.is_none() && t.template_id.is_none() {
        return Err(problem("traffic", "names no model and no template_id: an experiment needs one or both"));
    }
    if let Some(m) = &t.model {
        if m.trim().is_empty() || m.len() > 256 {
            return Err(problem("traffic.model", "must be 1 to 256 characters"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(name: &str, model: Option<&str>, weight: u32) -> VariantInput {
        VariantInput { name: name.into(), model: model.map(str::to_string), template_version: None, weight }
    }

    fn by_model() -> Traffic {
        Traffic { model: Some("m".into()), ..Traffic::default() }
    }

    #[test]
    fn weights_become_basis_points_summing_to_the_whole() {
        let out = variants(&[v("a", None, 1), v("b", Some("x"), 1), v("c", Some("y"), 1)], &by_model()).unwrap();
        assert_eq!(out.iter().map(|v| v.basis_points).collect::<Vec<_>>(), vec![3333, 3333, 3334]);
        let out = variants(&[v("a", None, 70), v("b", Some("x"), 30)], &by_model()).unwrap();
        assert_eq!((out[0].basis_points, out[1].basis_points), (7000, 3000));
    }

    #[test]
    fn bad_variants_are_refused_by_field() {
        let field = |vs: &[VariantInput], t: &Traffic| variants(vs, t).unwrap_err().field;
        assert_eq!(field(&[v("a", None, 1)], &by_model()), "variants");
        assert_eq!(field(&[v("a", None, 1), v("A", Some("x"), 1)], &by_model()), "variants[1].name");
        assert_eq!(field(&[v("a", None, 1), v("a", Some("x"), 1)], &by_model()), "variants[1].name");
        assert_eq!(field(&[v("a", Some("x"), 1), v("b", Some("x"), 1)], &by_model()), "variants[1].model");
        assert_eq!(field(&[v("a", None, 0), v("b", Some("x"), 1)], &by_model()), "variants[0].weight");
        let mut t = v("b", None, 1);
        t.template_version = Some(2);
        assert_eq!(field(&[v("a", None, 1), t], &by_model()), "variants[1].template_version");
        assert_eq!(field(&[v("a", None, 1), v("b", Some("x"), 10_000)], &by_model()), "variants[0].weight");
        assert_eq!(traffic(&Traffic::default()).unwrap_err().field, "traffic");
    }

    #[test]
    fn the_first_matching_running_experiment_takes_a_request() {
        let team = Uuid::now_v7();
        let tpl = Uuid::now_v7();
        let exp = |id: Uuid, traffic: Traffic| LiveExperiment {
            id,
            traffic,
            variants: variants(&[v("a", None, 1), v("b", Some("x"), 1)], &by_model()).unwrap(),
        };
        let (e1, e2) = (Uuid::now_v7(), Uuid::now_v7());
        let running = Running {
            experiments: vec![
                exp(e1, Traffic { model: Some("m".into()), template_id: None, team_id: Some(team) }),
                exp(e2, Traffic { model: None, template_id: Some(tpl), team_id: None }),
            ],
        };
        assert_eq!(running.matching("m", None, Some(team)).map(|e| e.id), Some(e1));
        assert_eq!(running.matching("m", None, None).map(|e| e.id), None, "another team's traffic");
        assert_eq!(running.matching("other", Some(tpl), None).map(|e| e.id), Some(e2));
        assert_eq!(running.matching("other", None, Some(team)).map(|e| e.id), None);
    }

    #[test]
    fn assignment_is_sticky_and_follows_the_split() {
        let e = LiveExperiment {
            id: Uuid::now_v7(),
            traffic: by_model(),
            variants: variants(&[v("a", None, 1), v("b", Some("x"), 3)], &by_model()).unwrap(),
        };
        let first = e.assign("user-1").name.clone();
        assert!((0..50).all(|_| e.assign("user-1").name == first));
        let b = (0..10_000).filter(|i| e.assign(&format!("k{i}")).name == "b").count();
        assert!((7_200..7_800).contains(&b), "{b} of 10,000 in a 75 % arm");
    }
}
