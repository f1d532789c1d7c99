//! An experiment's results from its variants' figures: each variant against the control with
//! the sequential test (`stats`), at `alpha / (variants - 1)` each (Bonferroni, so the chance of
//! any false winner stays within `alpha`), and the winner, if the test has one.

use serde::Serialize;

use super::spec::Metric;
use super::stats::{compare, Moments, Settings};

/// One variant's figures as read: count, mean, sample variance.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Figures {
    pub n: u64,
    pub mean: f64,
    pub variance: f64,
}

impl Figures {
    fn moments(&self) -> Moments {
        Moments { n: self.n, mean: self.mean, m2: self.variance * self.n.saturating_sub(1) as f64 }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Comparison {
    /// The variant's mean minus the control's.
    pub difference: f64,
    /// The always-valid confidence interval of the difference (holds at every look).
    pub interval: [f64; 2],
    /// This look's always-valid p-value.
    pub p_value: f64,
    /// The interval excludes zero and both have the minimum samples.
    pub significant: bool,
    /// `better`, `worse` (than the control, by the metric's direction) or `inconclusive`.
    pub verdict: &'static str,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VariantResult {
    pub n: u64,
    pub mean: f64,
    /// The sample standard deviation.
    pub std_dev: f64,
    /// A fixed-sample 95 % interval of the mean, for display.
    pub interval: [f64; 2],
    /// Against the control; `None` for the control itself and until both have two samples
    /// with some variance.
    pub comparison: Option<Comparison>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Judgement {
    pub variants: Vec<VariantResult>,
    /// The index of the winning variant, when the test has one.
    pub winner: Option<usize>,
    /// Every variant reached the sample cap.
    pub exhausted: bool,
    /// The level each comparison is tested at.
    pub alpha_each: f64,
}

/// Judges variants (the control first) on `metric`.
pub fn judge(figures: &[Figures], metric: Metric, s: &Settings, max_samples: u64) -> Judgement {
    let comparisons = figures.len().saturating_sub(1).max(1);
    let each = Settings { alpha: s.alpha / comparisons as f64, ..*s };
    let control = figures.first().copied().unwrap_or_default().moments();
    let sign = if metric.higher_is_better() { 1.0 } else { -1.0 };
    let mut variants = Vec::with_capacity(figures.len());
    for (i, f) in figures.iter().enumerate() {
        let m = f.moments();
        let (lo, hi) = if f.n > 0 { m.interval(0.05) } else { (0.0, 0.0) };
        let comparison = if i == 0 {
            None
        } else {
            compare(&control, &m, &each).map(|c| Comparison {
                difference: c.difference,
                interval: [c.interval.0, c.interval.1],
                p_value: c.p_value,
                significant: c.significant,
                verdict: match (c.significant, c.difference * sign > 0.0) {
                    (false, _) => "inconclusive",
                    (true, true) => "better",
                    (true, false) => "worse",
                },
            })
        };
        variants.push(VariantResult {
            n: f.n,
            mean: f.mean,
            std_dev: m.variance().sqrt(),
            interval: [lo, hi],
            comparison,
        });
    }
    let better: Vec<usize> = (1..variants.len())
        .filter(|&i| variants[i].comparison.as_ref().is_some_and(|c| c.verdict == "better"))
        .collect();
    let winner = if !better.is_empty() {
        better.into_iter().max_by(|&a, &b| (variants[a].mean * sign).total_cmp(&(variants[b].mean * sign)))
    } else if variants.len() > 1
        && (1..variants.len()).all(|i| variants[i].comparison.as_ref().is_some_and(|c| c.verdict == "worse"))
    {
        Some(0)
    } else {
        None
    };
    let exhausted = !figures.is_empty() && figures.iter().all(|f| f.n >= max_samples);
    Judgement { variants, winner, exhausted, alpha_each: each.alpha }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(n: u64, mean: f64, sd: f64) -> Figures {
        Figures { n, mean, variance: sd * sd }
    }

    #[test]
    fn a_clearly_faster_variant_wins_on_latency() {
        let j = judge(&[f(500, 120.0, 30.0), f(500, 100.0, 30.0)], Metric::Latency, &Settings::default(), 10_000);
        assert_eq!(j.winner, Some(1));
        assert_eq!(j.variants[1].comparison.as_ref().map(|c| c.verdict), Some("better"));
        assert!(!j.exhausted);
    }

    #[test]
    fn the_control_wins_when_every_variant_is_worse_and_feedback_prefers_higher() {
        let j = judge(&[f(500, 4.0, 1.0), f(500, 3.0, 1.0)], Metric::Feedback, &Settings::default(), 10_000);
        assert_eq!(j.winner, Some(0));
        let j = judge(&[f(500, 3.0, 1.0), f(500, 4.0, 1.0)], Metric::Feedback, &Settings::default(), 10_000);
        assert_eq!(j.winner, Some(1));
    }

    #[test]
    fn equal_variants_have_no_winner_and_few_samples_never_win() {
        let j = judge(&[f(5000, 100.0, 30.0), f(5000, 100.2, 30.0)], Metric::Latency, &Settings::default(), 5000);
        assert_eq!(j.winner, None);
        assert!(j.exhausted);
        let j = judge(&[f(10, 200.0, 1.0), f(10, 100.0, 1.0)], Metric::Latency, &Settings::default(), 5000);
        assert_eq!(j.winner, None, "under the 30-sample floor");
    }

    #[test]
    fn each_comparison_is_tested_at_a_share_of_alpha() {
        let j = judge(&[f(0, 0.0, 0.0), f(0, 0.0, 0.0), f(0, 0.0, 0.0)], Metric::Cost, &Settings::default(), 100);
        assert!((j.alpha_each - 0.025).abs() < 1e-12);
        assert_eq!(j.winner, None);
    }
}
