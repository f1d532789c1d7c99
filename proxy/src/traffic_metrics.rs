//! Per-request series by model, provider and team, with bounded label sets: models and
//! providers come from configuration (anything else is `other`), and at most
//! [`MAX_TEAMS`] distinct teams get a label of their own per process (later ones are `other`),
//! so a tenant creating teams or sending made-up model names cannot grow the series without
//! bound.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;

use prometheus::{CounterVec, Histogram, HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry};
use uuid::Uuid;

pub const MAX_TEAMS: usize = 500;

pub struct TrafficMetrics {
    /// Requests by model, provider and status class (`2xx`, `4xx`, `5xx`).
    pub by_model: IntCounterVec,
    /// Requests by team and status class.
    pub by_team: IntCounterVec,
    /// Tokens by model and kind (`prompt`, `completion`, `cached`, `reasoning`).
    pub tokens: IntCounterVec,
    /// Cost in USD by model, and by team.
    pub cost: CounterVec,
    pub team_cost: CounterVec,
    /// The gateway's own share of the time to the response header.
    pub overhead: Histogram,
    /// Time to the first streamed token.
    pub ttft: HistogramVec,
    /// Failed upstream attempts by provider and kind (`timeout`, `connect`, `status_5xx`, ...).
    pub upstream_errors: IntCounterVec,
    /// Names with a label of their own: the gateway catalog's, replaced with each version (names
    /// it drops keep their series until the process ends; names only a later version adds
    /// count as `other` until it is applied).
    names: ArcSwap<Names>,
    /// Each labelled team's label, formatted once.
    teams: Mutex<HashMap<Uuid, Arc<str>>>,
    other: Arc<str>,
    none: Arc<str>,
}

#[derive(Default)]
struct Names {
    models: HashSet<String>,
    providers: HashSet<String>,
}

pub fn status_class(status: u16) -> &'static str {
    match status {
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=498 => "4xx",
        499 => "499",
        _ => "5xx",
    }
}

impl TrafficMetrics {
    pub fn new(
        registry: &Registry,
        models: impl IntoIterator<Item = String>,
        providers: impl IntoIterator<Item = String>,
    ) -> prometheus::Result<Self> {
        let by_model = IntCounterVec::new(
            Opts::new("gw_proxy_model_requests_total", "Requests by model, provider and status class"),
            &["model", "provider", "status"],
        )?;
        let by_team = IntCounterVec::new(
            Opts::new("gw_proxy_team_requests_total", "Requests by team and status class"),
            &["team", "status"],
        )?;
        let tokens =
            IntCounterVec::new(Opts::new("gw_proxy_tokens_total", "Tokens by model and kind"), &["model", "kind"])?;
        let cost = CounterVec::new(Opts::new("gw_proxy_cost_usd_total", "Spend in USD by model"), &["model"])?;
        let team_cost = CounterVec::new(Opts::new("gw_proxy_team_cost_usd_total", "Spend in USD by team"), &["team"])?;
        let overhead = Histogram::with_opts(
            HistogramOpts::new(
                "gw_proxy_overhead_seconds",
                "Gateway time to the response header, upstream time excluded",
            )
            .buckets(vec![0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0]),
        )?;
        let ttft = HistogramVec::new(
            HistogramOpts::new("gw_proxy_ttft_seconds", "Time to the first streamed token")
                .buckets(vec![0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0]),
            &["endpoint"],
        )?;
        let upstream_errors = IntCounterVec::new(
            Opts::new("gw_proxy_upstream_errors_total", "Failed upstream attempts by provider and kind"),
            &["provider", "kind"],
        )?;
        registry.register(Box::new(by_model.clone()))?;
        registry.register(Box::new(by_team.clone()))?;
        registry.register(Box::new(tokens.clone()))?;
        registry.register(Box::new(cost.clone()))?;
        registry.register(Box::new(team_cost.clone()))?;
        registry.register(Box::new(overhead.clone()))?;
        registry.register(Box::new(ttft.clone()))?;
        registry.register(Box::new(upstream_errors.clone()))?;
        Ok(Self {
            by_model,
            by_team,
            tokens,
            cost,
            team_cost,
            overhead,
            ttft,
            upstream_errors,
            names: ArcSwap::from_pointee(Names {
                models: models.into_iter().collect(),
                providers: providers.into_iter().collect(),
            }),
            teams: Mutex::new(HashMap::new()),
            other: Arc::from("other"),
            none: Arc::from("none"),
        })
    }

    /// Labels models and providers by these names from now on.
    pub fn set_names(&self, models: impl IntoIterator<Item = String>, providers: impl IntoIterator<Item = String>) {
        let names = Names { models: models.into_iter().collect(), providers: providers.into_iter().collect() };
        self.names.store(Arc::new(names));
    }

    pub fn model<'a>(&self, model: Option<&'a str>) -> &'a str {
        match model {
            Some(m) if self.names.load().models.contains(m) => m,
            Some(_) => "other",
            None => "none",
        }
    }

    pub fn provider<'a>(&self, provider: Option<&'a str>) -> &'a str {
        match provider {
            Some(p) if self.names.load().providers.contains(p) => p,
            Some(_) => "other",
            None => "none",
        }
    }

    /// The team's label: its id while fewer than [`MAX_TEAMS`] have one, else `other`.
    pub fn team(&self, team: Option<Uuid>) -> Arc<str> {
        let Some(team) = team else { return self.none.clone() };
        let Ok(mut teams) = self.teams.lock() else { return self.other.clone() };
        if let Some(label) = teams.get(&team) {
            return label.clone();
        }
        if teams.len() < MAX_TEAMS {
            let label: Arc<str> = Arc::from(team.to_string());
            teams.insert(team, label.clone());
            label
        } else {
            self.other.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_stay_bounded() {
        let m = TrafficMetrics::new(&Registry::new(), ["gpt-4o".to_string()], ["openai".to_string()]).unwrap();
        assert_eq!(m.model(Some("gpt-4o")), "gpt-4o");
        assert_eq!(m.model(Some("made-up")), "other");
        assert_eq!(m.provider(Some("openai")), "openai");
        assert_eq!(m.provider(Some("x")), "other");
        m.set_names(["made-up".to_string()], ["x".to_string()]);
        assert_eq!(m.model(Some("made-up")), "made-up");
        assert_eq!(m.model(Some("gpt-4o")), "other");
        assert_eq!(m.provider(Some("x")), "x");
        let labels: HashSet<String> = (0..MAX_TEAMS + 50).map(|_| m.team(Some(Uuid::new_v4())).to_string()).collect();
        assert_eq!(labels.len(), MAX_TEAMS + 1);
        assert!(labels.contains("other"));
        let known = Uuid::new_v4();
        assert_eq!(&*m.team(Some(known)), "other", "past the cap a new team shares the other label");
        assert_eq!(&*m.team(None), "none");
        assert_eq!(status_class(201), "2xx");
        assert_eq!(status_class(503), "5xx");
    }
}
