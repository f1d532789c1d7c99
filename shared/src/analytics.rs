//! Latency percentiles from histograms: the hourly rollups keep a count per latency bucket, and
//! a period's p50/p95 come from the merged counts. Buckets grow by 15%, so a percentile read
//! back is within about 7% of the exact one (linear within its bucket), whatever the row count.

/// Upper bounds (exclusive) of the latency buckets in milliseconds, as PostgreSQL's
/// `width_bucket(latency_ms, bounds)` numbers them: bucket 0 holds values below the first bound,
/// bucket `i` values in `[bounds[i-1], bounds[i])`, the last one everything from the last bound.
pub fn latency_bounds_ms() -> Vec<i32> {
    let mut bounds = vec![1];
    while *bounds.last().unwrap_or(&1) < 120_000 {
        let last = *bounds.last().unwrap_or(&1);
        let next = ((last as f64) * 1.15).ceil() as i32;
        bounds.push(next.max(last + 1));
    }
    bounds
}

/// Buckets a histogram has: one more than the bounds.
pub fn buckets() -> usize {
    latency_bounds_ms().len() + 1
}

/// Adds `other` into `into`, growing it as needed.
pub fn merge(into: &mut Vec<i64>, other: &[i64]) {
    if into.len() < other.len() {
        into.resize(other.len(), 0);
    }
    for (a, b) in into.iter_mut().zip(other) {
        *a += b;
    }
}

/// The `q` quantile (0..=1) of a histogram, in milliseconds; `None` when it is empty.
pub fn quantile(hist: &[i64], bounds: &[i32], q: f64) -> Option<f64> {
    let total: i64 = hist.iter().sum();
    if total <= 0 {
        return None;
    }
    let target = (q.clamp(0.0, 1.0) * total as f64).max(1.0);
    let mut seen = 0f64;
    for (i, &n) in hist.iter().enumerate() {
        if n <= 0 {
            continue;
        }
        if seen + n as f64 >= target {
            let lower = match i.checked_sub(1).and_then(|j| bounds.get(j).or(bounds.last())) {
                Some(b) => f64::from(*b),
                None => 0.0,
            };
            let Some(&upper) = bounds.get(i) else { return Some(lower) };
            let within = (target - seen) / n as f64;
            return Some(lower + (f64::from(upper) - lower) * within);
        }
        seen += n as f64;
    }
    bounds.last().map(|b| f64::from(*b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bucket_of(bounds: &[i32], v: i32) -> usize {
        bounds.iter().take_while(|b| **b <= v).count()
    }

    #[test]
    fn bounds_grow_and_cover_two_minutes() {
        let b = latency_bounds_ms();
        assert!(b.windows(2).all(|w| w[0] < w[1]));
        assert!(*b.last().unwrap() >= 120_000);
        assert!(b.len() < 120);
    }

    #[test]
    fn percentiles_are_within_the_bucket_resolution() {
        let bounds = latency_bounds_ms();
        let mut hist = vec![0i64; buckets()];
        let mut values: Vec<i32> = (0..10_000).map(|i| 5 + (i * 37) % 2000).collect();
        for v in &values {
            hist[bucket_of(&bounds, *v)] += 1;
        }
        values.sort_unstable();
        for q in [0.5, 0.95] {
            let exact = f64::from(values[(q * values.len() as f64) as usize - 1]);
            let got = quantile(&hist, &bounds, q).unwrap();
            assert!((got - exact).abs() / exact < 0.08, "q{q}: {got} vs {exact}");
        }
    }

    #[test]
    fn empty_and_merged() {
        let bounds = latency_bounds_ms();
        assert_eq!(quantile(&[], &bounds, 0.5), None);
        let mut a = vec![1, 2];
        merge(&mut a, &[1, 1, 5]);
        assert_eq!(a, vec![2, 3, 5]);
    }
}
