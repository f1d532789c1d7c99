//! Ordering a model's deployments for one request, by the model's strategy. Pure: the caller
//! passes what the deployments' state says, the round-robin counter and a random source.

use rust_decimal::Decimal;

use crate::config::Strategy;

/// What a strategy may look at for one deployment.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub weight: u32,
    pub inflight: u32,
    /// 0 when no latency sample yet.
    pub latency_us: u64,
    pub unit_cost: Decimal,
}

/// Indices into `candidates`, best first: the first is the primary, the rest are tried in turn.
pub fn order(strategy: Strategy, candidates: &[Candidate], rr: u64, mut random: impl FnMut() -> f64) -> Vec<usize> {
    let n = candidates.len();
    let mut idx: Vec<usize> = (0..n).collect();
    match strategy {
        Strategy::Ordered => {}
        Strategy::RoundRobin => {
            if n > 0 {
                let k = usize::try_from(rr % n as u64).unwrap_or(0);
                idx.rotate_left(k);
            }
        }
        Strategy::LeastInflight => idx.sort_by_key(|&i| candidates[i].inflight),
        // Deployments without a sample go first so each gets measured.
        Strategy::LowestLatency => idx.sort_by_key(|&i| candidates[i].latency_us),
        Strategy::LowestCost => idx.sort_by(|&a, &b| candidates[a].unit_cost.cmp(&candidates[b].unit_cost)),
        Strategy::Weighted => {
            // Weighted sampling without replacement: each pick in proportion to the weights left.
            let mut left = idx;
            idx = Vec::with_capacity(n);
            while !left.is_empty() {
                let total: u64 = left.iter().map(|&i| u64::from(candidates[i].weight.max(1))).sum();
                let mut target = random() * total as f64;
                let mut pick = left.len() - 1;
                for (pos, &i) in left.iter().enumerate() {
                    let w = f64::from(candidates[i].weight.max(1));
                    if target < w {
                        pick = pos;
                        break;
                    }
                    target -= w;
                }
                idx.push(left.remove(pick));
            }
        }
    }
    idx
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(weight: u32, inflight: u32, latency_us: u64, cost: i64) -> Candidate {
        Candidate { weight, inflight, latency_us, unit_cost: Decimal::from(cost) }
    }

    #[test]
    fn deterministic_strategies() {
        let cs = [c(1, 5, 300, 3), c(1, 1, 100, 2), c(1, 3, 0, 1)];
        let never = || panic!("no randomness");
        assert_eq!(order(Strategy::Ordered, &cs, 0, never), [0, 1, 2]);
        assert_eq!(order(Strategy::RoundRobin, &cs, 0, never), [0, 1, 2]);
        assert_eq!(order(Strategy::RoundRobin, &cs, 4, never), [1, 2, 0]);
        assert_eq!(order(Strategy::LeastInflight, &cs, 0, never), [1, 2, 0]);
        assert_eq!(order(Strategy::LowestLatency, &cs, 0, never), [2, 1, 0]);
        assert_eq!(order(Strategy::LowestCost, &cs, 0, never), [2, 1, 0]);
        assert!(order(Strategy::RoundRobin, &[], 3, never).is_empty());
    }

    #[test]
    fn round_robin_spreads_primaries_evenly() {
        let cs = [c(1, 0, 0, 0), c(1, 0, 0, 0), c(1, 0, 0, 0)];
        let mut firsts = [0; 3];
        for rr in 0..300 {
            firsts[order(Strategy::RoundRobin, &cs, rr, || 0.0)[0]] += 1;
        }
        assert_eq!(firsts, [100, 100, 100]);
    }

    #[test]
    fn weighted_follows_weights_and_keeps_everyone() {
        let cs = [c(3, 0, 0, 0), c(1, 0, 0, 0)];
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut rnd = move || {
            // xorshift: a fixed sequence keeps the test deterministic.
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed >> 11) as f64 / (1u64 << 53) as f64
        };
        let mut first = [0u32; 2];
        for _ in 0..4000 {
            let o = order(Strategy::Weighted, &cs, 0, &mut rnd);
            assert_eq!(o.len(), 2);
            assert_ne!(o[0], o[1]);
            first[o[0]] += 1;
        }
        let share = f64::from(first[0]) / 4000.0;
        assert!((0.70..0.80).contains(&share), "{share}");
    }
}
