//! What an organization and its teams choose for the cache, and what one request asks of it.
//! Every tier is off until the organization turns it on: a cache changes what clients get
//! (an answer sampled once, served many times), so it is the operator's choice to make.

use std::collections::HashMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

/// Longest an entry may live: 30 days.
pub const MAX_TTL_SECS: u32 = 30 * 24 * 3600;
pub const DEFAULT_TTL_SECS: u32 = 3600;
/// The L3 similarity threshold unless the organization sets its own: just below the lowest
/// similarity of a paraphrase pair in `tests/data/semantic_pairs.jsonl` that the same-question
/// check accepts (0.8775), so it costs no recall there; the check keeps every unrelated pair out
/// (docs/cache.md has the measurement).
pub const DEFAULT_THRESHOLD: f32 = 0.85;
pub const MIN_THRESHOLD: f32 = 0.5;

/// An organization's cache settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CacheSettings {
    /// In-process tier (per proxy replica).
    #[serde(default)]
    pub l1: bool,
    /// Redis tier (shared by every replica).
    #[serde(default)]
    pub l2: bool,
    /// Semantic tier: the nearest earlier prompt above the threshold.
    #[serde(default)]
    pub l3: bool,
    /// How long a new entry lives, in seconds (1 to 2592000).
    #[serde(default = "default_ttl")]
    pub ttl_seconds: u32,
    /// Cosine similarity an L3 neighbour needs to answer (0.5 to 1).
    #[serde(default = "default_threshold")]
    pub similarity_threshold: f32,
}

fn default_ttl() -> u32 {
    DEFAULT_TTL_SECS
}

fn default_threshold() -> f32 {
    DEFAULT_THRESHOLD
}

impl Default for CacheSettings {
    fn default() -> Self {
        Self { l1: false, l2: false, l3: false, ttl_seconds: DEFAULT_TTL_SECS, similarity_threshold: DEFAULT_THRESHOLD }
    }
}

/// A team's departures from its organization's settings; an absent field inherits.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TeamCacheSettings {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub l1: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub l2: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub l3: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub similarity_threshold: Option<f32>,
}

/// A field that is out of range, with its name.
#[derive(Debug, Clone, PartialEq)]
pub struct Invalid {
    pub field: &'static str,
    pub message: String,
}

fn check_ttl(ttl: u32) -> Result<(), Invalid> {
    if ttl == 0 || ttl > MAX_TTL_SECS {
        return Err(Invalid { field: "ttl_seconds", message: format!("must be between 1 and {MAX_TTL_SECS}") });
    }
    Ok(())
}

fn check_threshold(t: f32) -> Result<(), Invalid> {
    if !(MIN_THRESHOLD..=1.0).contains(&t) {
        return Err(Invalid {
            field: "similarity_threshold",
            message: format!("must be between {MIN_THRESHOLD} and 1"),
        });
    }
    Ok(())
}

impl CacheSettings {
    pub fn validate(&self) -> Result<(), Invalid> {
        check_ttl(self.ttl_seconds)?;
        check_threshold(self.similarity_threshold)
    }
}

impl TeamCacheSettings {
    pub fn validate(&self) -> Result<(), Invalid> {
        if let Some(t) = self.ttl_seconds {
            check_ttl(t)?;
        }
        if let Some(t) = self.similarity_threshold {
            check_threshold(t)?;
        }
        Ok(())
    }
}

/// An organization's settings and its teams', as the proxy caches them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OrgCacheSettings {
    pub org: CacheSettings,
    #[serde(default)]
    pub teams: HashMap<Uuid, TeamCacheSettings>,
    /// Purge generations (`cache_generations`), part of every L2 key.
    #[serde(default)]
    pub generations: Generations,
}

/// How many times the organization's cache was purged, whole and per model (by the hex of the
/// model's tag).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Generations {
    pub all: i64,
    #[serde(default)]
    pub models: HashMap<String, i64>,
}

impl Generations {
    /// The generations an entry for `model` is kept under: the organization's, the model's.
    pub fn of(&self, model: &crate::cache::key::ModelTag) -> (i64, i64) {
        // Most organizations never purge one model: no name to encode on their requests.
        if self.models.is_empty() {
            return (self.all, 0);
        }
        (self.all, self.models.get(&hex::encode(model)).copied().unwrap_or(0))
    }
}

/// The settings a request runs under.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Effective {
    pub l1: bool,
    pub l2: bool,
    pub l3: bool,
    pub ttl: Duration,
    pub threshold: f32,
}

impl Effective {
    pub fn any(&self) -> bool {
        self.l1 || self.l2 || self.l3
    }
}

impl OrgCacheSettings {
    pub fn effective(&self, team: Option<Uuid>) -> Effective {
        let o = &self.org;
        let t = team.and_then(|id| self.teams.get(&id)).cloned().unwrap_or_default();
        Effective {
            l1: t.l1.unwrap_or(o.l1),
            l2: t.l2.unwrap_or(o.l2),
            l3: t.l3.unwrap_or(o.l3),
            ttl: Duration::from_secs(u64::from(t.ttl_seconds.unwrap_or(o.ttl_seconds))),
            threshold: t.similarity_threshold.unwrap_or(o.similarity_threshold),
        }
    }
}

/// What the request itself asks: `Cache-Control: no-cache` (answer fresh, still store),
/// `no-store` (neither look up nor store), and `x-gw-cache-ttl` (seconds to keep the answer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Directives {
    pub lookup: bool,
    pub store: bool,
    pub ttl: Option<Duration>,
}

impl Default for Directives {
    fn default() -> Self {
        Self { lookup: true, store: true, ttl: None }
    }
}

impl Directives {
    /// How long an answer is kept: the client's `x-gw-cache-ttl`, capped by the configured TTL
    /// (a client may keep an answer shorter than the organization allows, never longer).
    pub fn ttl_within(&self, configured: Duration) -> Duration {
        self.ttl.map_or(configured, |asked| asked.min(configured))
    }
}

/// Reads the request's directives; an unreadable TTL is the client's error.
pub fn directives(cache_control: Option<&str>, ttl: Option<&str>) -> Result<Directives, String> {
    let mut d = Directives::default();
    for directive in cache_control.unwrap_or_default().split(',') {
        let name = directive.split('=').next().unwrap_or_default().trim();
        if name.eq_ignore_ascii_case("no-store") {
            d.lookup = false;
            d.store = false;
        } else if name.eq_ignore_ascii_case("no-cache") {
            d.lookup = false;
        }
    }
    if let Some(raw) = ttl {
        let secs: u32 = raw
            .trim()
            .parse()
            .ok()
            .filter(|s| (1..=MAX_TTL_SECS).contains(s))
            .ok_or_else(|| format!("x-gw-cache-ttl must be a whole number of seconds from 1 to {MAX_TTL_SECS}."))?;
        d.ttl = Some(Duration::from_secs(u64::from(secs)));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn teams_inherit_what_they_do_not_set() {
        let team = Uuid::from_u128(1);
        let mut s = OrgCacheSettings {
            org: CacheSettings { l1: true, l2: true, ..CacheSettings::default() },
            ..Default::default()
        };
        s.teams.insert(team, TeamCacheSettings { l2: Some(false), ttl_seconds: Some(60), ..Default::default() });
        let e = s.effective(Some(team));
        assert!(e.l1 && !e.l2 && !e.l3);
        assert_eq!(e.ttl, Duration::from_secs(60));
        let org = s.effective(Some(Uuid::from_u128(2)));
        assert!(org.l2);
        assert_eq!(org.ttl, Duration::from_secs(u64::from(DEFAULT_TTL_SECS)));
        assert!(!OrgCacheSettings::default().effective(None).any(), "every tier starts off");
    }

    #[test]
    fn ranges_are_checked() {
        let bad_ttl = CacheSettings { ttl_seconds: 0, ..Default::default() };
        assert_eq!(bad_ttl.validate().unwrap_err().field, "ttl_seconds");
        let bad = CacheSettings { similarity_threshold: 1.5, ..Default::default() };
        assert_eq!(bad.validate().unwrap_err().field, "similarity_threshold");
        let team = TeamCacheSettings { ttl_seconds: Some(MAX_TTL_SECS + 1), ..Default::default() };
        assert_eq!(team.validate().unwrap_err().field, "ttl_seconds");
        assert!(CacheSettings::default().validate().is_ok());
        assert!(serde_json::from_str::<CacheSettings>(r#"{"l4": true}"#).is_err());
    }

    #[test]
    fn request_directives() {
        assert_eq!(directives(None, None).unwrap(), Directives::default());
        let d = directives(Some("No-Cache"), None).unwrap();
        assert!(!d.lookup && d.store);
        let d = directives(Some("max-age=0, no-store"), None).unwrap();
        assert!(!d.lookup && !d.store);
        assert_eq!(directives(None, Some(" 120 ")).unwrap().ttl, Some(Duration::from_secs(120)));
        for bad in ["0", "-1", "1.5", "soon", "2592001"] {
            assert!(directives(None, Some(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_clients_ttl_never_outlives_the_organizations() {
        let hour = Duration::from_secs(3600);
        assert_eq!(directives(None, Some("60")).unwrap().ttl_within(hour), Duration::from_secs(60));
        assert_eq!(directives(None, Some("86400")).unwrap().ttl_within(hour), hour);
        assert_eq!(directives(None, None).unwrap().ttl_within(hour), hour);
    }
}
