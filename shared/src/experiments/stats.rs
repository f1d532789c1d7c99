//! The sequential test experiments are judged by: a two-sample mixture sequential probability
//! ratio test (mSPRT, Johari et al., "Always Valid Inference", 2017) on the difference of means,
//! with a normal mixing distribution over the effect and the variance plugged in from the data.
//! Its confidence sequence holds at every sample size at once, so results may be looked at after
//! every request without inflating the false-positive rate beyond `alpha`; a winner is declared
//! only when the interval excludes zero. `docs/experiments.md` states the assumptions and the
//! sample sizes.

/// Running count, mean and variance of one variant's metric (Welford's update: stable, O(1)).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Moments {
    pub n: u64,
    pub mean: f64,
    /// The sum of squared deviations from the mean.
    pub m2: f64,
}

impl Moments {
    pub fn add(&mut self, x: f64) {
        self.n += 1;
        let d = x - self.mean;
        self.mean += d / self.n as f64;
        self.m2 += d * (x - self.mean);
    }

    /// The unbiased sample variance (0 below two samples).
    pub fn variance(&self) -> f64 {
        if self.n < 2 {
            0.0
        } else {
            self.m2 / (self.n - 1) as f64
        }
    }

    /// A normal-approximation interval for the mean at level `1 - alpha` (a fixed-sample one:
    /// for display; the comparison uses the sequential one).
    pub fn interval(&self, alpha: f64) -> (f64, f64) {
        let half = z(1.0 - alpha / 2.0) * (self.variance() / self.n.max(1) as f64).sqrt();
        (self.mean - half, self.mean + half)
    }
}

/// The test's settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settings {
    /// The false-positive rate the test holds at any number of looks.
    pub alpha: f64,
    /// The mixing distribution's standard deviation, in units of the metric's standard deviation
    /// (an effect size): the test is most sensitive to differences near it.
    pub tau: f64,
    /// Samples each arm needs before a winner can be declared (the normal approximation's floor).
    pub min_samples: u64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings { alpha: 0.05, tau: 0.2, min_samples: 30 }
    }
}

/// A variant against control.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Comparison {
    /// Variant mean minus control mean.
    pub difference: f64,
    /// The always-valid confidence interval of the difference at `1 - alpha`.
    pub interval: (f64, f64),
    /// This look's always-valid p-value (`min(1, 1/Λ)`); the smallest over all looks so far is
    /// the experiment's.
    pub p_value: f64,
    /// The interval excludes zero and both arms have enough samples.
    pub significant: bool,
}

/// The half-width of the confidence sequence for a difference estimated with variance `v`,
/// mixing variance `tau2`: where the mixture likelihood ratio reaches `1/alpha`.
fn half_width(v: f64, tau2: f64, alpha: f64) -> f64 {
    (2.0 * v * (v + tau2) / tau2 * ((1.0 / alpha).ln() + 0.5 * ((v + tau2) / v).ln())).sqrt()
}

/// The mSPRT comparison of `variant` against `control`; `None` until both have two samples and
/// some variance.
pub fn compare(control: &Moments, variant: &Moments, s: &Settings) -> Option<Comparison> {
    if control.n < 2 || variant.n < 2 {
        return None;
    }
    let v = control.variance() / control.n as f64 + variant.variance() / variant.n as f64;
    let pooled = (control.variance() + variant.variance()) / 2.0;
    if !(v > 0.0 && pooled > 0.0) {
        return None;
    }
    let tau2 = s.tau * s.tau * pooled;
    let d = variant.mean - control.mean;
    let h = half_width(v, tau2, s.alpha);
    let log_lambda = 0.5 * (v / (v + tau2)).ln() + tau2 * d * d / (2.0 * v * (v + tau2));
    let p_value = (-log_lambda).exp().min(1.0);
    let enough = control.n >= s.min_samples && variant.n >= s.min_samples;
    Some(Comparison { difference: d, interval: (d - h, d + h), p_value, significant: enough && d.abs() > h })
}

/// The samples per arm after which a true difference of `effect` standard deviations is
/// detected with probability at least `power`: the smallest `n` where the estimate's
/// `power`-quantile clears the boundary, `effect - z(power)·√(2/n) ≥ h(n)`. Looks before `n` only
/// add chances to stop early, so this bounds the sample size from above.
pub fn samples_needed(effect: f64, power: f64, s: &Settings) -> u64 {
    let effect = effect.abs();
    if effect <= 0.0 {
        return u64::MAX;
    }
    let zp = z(power);
    let tau2 = s.tau * s.tau;
    let clears = |n: u64| {
        let v = 2.0 / n as f64;
        effect - zp * v.sqrt() >= half_width(v, tau2, s.alpha)
    };
    let (mut lo, mut hi) = (s.min_samples.max(2), s.min_samples.max(2));
    while !clears(hi) {
        lo = hi;
        hi = hi.saturating_mul(2);
        if hi > 1 << 40 {
            return u64::MAX;
        }
    }
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if clears(mid) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    hi
}

/// The standard normal quantile.
fn z(p: f64) -> f64 {
    use statrs::distribution::{ContinuousCDF, Normal};
    Normal::new(0.0, 1.0).map(|n| n.inverse_cdf(p)).unwrap_or(f64::NAN)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use statrs::distribution::Normal;

    fn moments(xs: &[f64]) -> Moments {
        let mut m = Moments::default();
        xs.iter().for_each(|x| m.add(*x));
        m
    }

    #[test]
    fn moments_are_the_textbook_ones() {
        let m = moments(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]);
        assert_eq!((m.n, m.mean), (8, 5.0));
        assert!((m.variance() - 32.0 / 7.0).abs() < 1e-12);
        let (lo, hi) = m.interval(0.05);
        assert!(lo < 5.0 && hi > 5.0);
    }

    #[test]
    fn the_boundary_narrows_with_samples_and_needs_both_arms() {
        let s = Settings::default();
        let a = moments(&[1.0, 2.0, 3.0]);
        assert_eq!(compare(&a, &moments(&[1.0]), &s), None);
        let wide = half_width(2.0 / 100.0, s.tau * s.tau, s.alpha);
        let narrow = half_width(2.0 / 10_000.0, s.tau * s.tau, s.alpha);
        assert!(narrow < wide);
        // Ten samples apart by a lot still wait for the minimum.
        let far = moments(&[100.0, 101.0, 99.0, 100.0, 102.0, 98.0, 100.0, 101.0, 99.0, 100.0]);
        let c = compare(&moments(&[1.0, 2.0, 0.0, 1.0, 2.0, 0.0, 1.0, 2.0, 0.0, 1.0]), &far, &s).unwrap();
        assert!(c.interval.0 > 0.0 && !c.significant);
    }

    /// One simulated experiment: two arms drawn alternately from normals, looked at every `every`
    /// samples per arm up to `max` per arm; the per-arm count at the first look that declared a
    /// winner.
    fn run(rng: &mut StdRng, control: Normal, variant: Normal, every: u64, max: u64, s: &Settings) -> Option<u64> {
        let (mut a, mut b) = (Moments::default(), Moments::default());
        for n in 1..=max {
            a.add(rng.sample(control));
            b.add(rng.sample(variant));
            if n % every == 0 && compare(&a, &b, s).is_some_and(|c| c.significant) {
                return Some(n);
            }
        }
        None
    }

    #[test]
    fn an_a_a_test_looked_at_every_100_requests_rarely_declares_a_winner() {
        // 200 runs of up to 10,000 requests (5,000 per arm), a look after every 100 requests.
        let s = Settings::default();
        let mut rng = StdRng::seed_from_u64(35);
        let same = Normal::new(100.0, 20.0).unwrap();
        let false_positives = (0..200).filter(|_| run(&mut rng, same, same, 50, 5_000, &s).is_some()).count();
        eprintln!("A/A: {false_positives} of 200 runs declared a winner");
        assert!(false_positives <= 10, "{false_positives} of 200 A/A runs declared a winner (5 % is 10)");
    }

    #[test]
    fn a_true_20_percent_difference_is_found_within_the_predicted_samples() {
        // Latency 100 ms against 120 ms, both with a 30 ms standard deviation: 0.67 SD apart.
        let s = Settings::default();
        let effect = 20.0 / 30.0;
        let n = samples_needed(effect, 0.8, &s);
        assert!((30..400).contains(&n), "{n} per arm predicted");
        let mut rng = StdRng::seed_from_u64(20);
        let (control, variant) = (Normal::new(100.0, 30.0).unwrap(), Normal::new(120.0, 30.0).unwrap());
        let found = (0..200).filter(|_| run(&mut rng, control, variant, 1, n, &s).is_some()).count();
        eprintln!("20 %: found in {found} of 200 runs within {n} samples per arm");
        assert!(found >= 160, "found in {found} of 200 runs within {n} samples per arm (80 % is 160)");
    }

    #[test]
    fn the_documented_sample_sizes_hold() {
        // docs/experiments.md's table, at 80 %, 95 % and 99.9 % power.
        let s = Settings::default();
        let table: Vec<(f64, [u64; 3])> = [1.0, 0.67, 0.5, 0.2, 0.1]
            .iter()
            .map(|e| (*e, [0.8, 0.95, 0.999].map(|p| samples_needed(*e, p, &s))))
            .collect();
        assert_eq!(
            table,
            vec![
                (1.0, [43, 55, 83]),
                (0.67, [79, 107, 172]),
                (0.5, [130, 181, 301]),
                (0.2, [761, 1122, 1948]),
                (0.1, [3295, 4828, 8277])
            ]
        );
    }

    #[test]
    fn predictions_grow_as_effects_shrink() {
        let s = Settings::default();
        let big = samples_needed(0.5, 0.8, &s);
        let small = samples_needed(0.1, 0.8, &s);
        assert!(small > big * 10, "{small} vs {big}");
        assert_eq!(samples_needed(0.0, 0.8, &s), u64::MAX);
    }
}
