//! The `[plans.<plan>]` tables: what each plan is called and how many seats it has. The plans
//! themselves are fixed (`free`, `growth`, `enterprise`: what the billing provider's prices sell
//! and what SSO is gated on); their display names and seat counts are the operator's
//! (`docs/billing.md`).

use std::collections::BTreeMap;

use serde::Deserialize;

/// The plans gw knows.
pub const PLANS: [&str; 3] = ["free", "growth", "enterprise"];

#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct PlanConfig {
    /// Shown to customers (`GET /organizations/current`'s `plan_terms.name`).
    pub name: String,
    /// People who may be members at once (pending invites hold a seat too); 0: no limit.
    /// Service accounts take none.
    #[serde(default)]
    pub seats: u32,
}

#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(transparent)]
pub struct Plans(BTreeMap<String, PlanConfig>);

impl Default for Plans {
    fn default() -> Self {
        Plans(
            [("free", "Free", 10), ("growth", "Growth", 100), ("enterprise", "Enterprise", 0)]
                .into_iter()
                .map(|(id, name, seats)| (id.to_string(), PlanConfig { name: name.into(), seats }))
                .collect(),
        )
    }
}

impl Plans {
    /// The plan's terms: the configured ones, else the defaults (a table may name only some).
    pub fn get(&self, plan: &str) -> PlanConfig {
        self.0
            .get(plan)
            .cloned()
            .or_else(|| Plans::default().0.remove(plan))
            .unwrap_or(PlanConfig { name: plan.to_string(), seats: 0 })
    }

    /// The seat limit, `None` for no limit.
    pub fn seats(&self, plan: &str) -> Option<u32> {
        Some(self.get(plan).seats).filter(|s| *s > 0)
    }

    pub fn validate(&self) -> Result<(), String> {
        for (id, p) in &self.0 {
            if !PLANS.contains(&id.as_str()) {
                return Err(format!("plans.{id}: not a plan ({})", PLANS.join(", ")));
            }
            if p.name.trim().is_empty() || p.name.len() > 100 {
                return Err(format!("plans.{id}.name: 1 to 100 characters"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configured_plans_override_the_defaults_one_by_one() {
        let plans: Plans = toml::from_str("[growth]\nname = \"Team\"\nseats = 3\n").unwrap();
        assert_eq!(plans.get("growth"), PlanConfig { name: "Team".into(), seats: 3 });
        assert_eq!(plans.get("free"), PlanConfig { name: "Free".into(), seats: 10 });
        assert_eq!(plans.seats("enterprise"), None);
        assert_eq!(plans.seats("growth"), Some(3));
        assert!(plans.validate().is_ok());
        let bad: Plans = toml::from_str("[platinum]\nname = \"P\"\n").unwrap();
        assert_eq!(bad.validate().unwrap_err(), "plans.platinum: not a plan (free, growth, enterprise)");
    }
}
