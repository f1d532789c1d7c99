//! Which variant a request gets: a hash of the experiment and the request's key (the OpenAI `user`
//! field, else the documented header, else the request id) picks a bucket in 0..10,000, and the
//! variants' weights (basis points, summing to 10,000) split the buckets in order. The same key
//! always lands in the same variant of an experiment (sticky), different experiments split
//! independently, and no state is kept.

use sha2::{Digest, Sha256};
use uuid::Uuid;

/// Buckets a split is made of: weights are in basis points.
pub const BUCKETS: u32 = 10_000;

/// The bucket of `key` in `experiment`.
pub fn bucket(experiment: Uuid, key: &str) -> u32 {
    let mut h = Sha256::new();
    h.update(experiment.as_bytes());
    h.update(key.as_bytes());
    let d = h.finalize();
    let x = u64::from_be_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]]);
    (x % u64::from(BUCKETS)) as u32
}

/// The index of the variant `key` is assigned to, given each variant's weight in basis points
/// (they sum to [`BUCKETS`]; a shortfall goes to the last variant).
pub fn variant(experiment: Uuid, key: &str, weights: &[u32]) -> usize {
    let b = bucket(experiment, key);
    let mut upto = 0;
    for (i, w) in weights.iter().enumerate() {
        upto += w;
        if b < upto {
            return i;
        }
    }
    weights.len().saturating_sub(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_keeps_its_variant_and_the_split_follows_the_weights() {
        let e = Uuid::from_u128(35);
        let weights = [2_000, 8_000];
        for k in ["alice", "bob", "user-1"] {
            assert_eq!(variant(e, k, &weights), variant(e, k, &weights), "sticky");
        }
        let n = 100_000;
        let firsts = (0..n).filter(|i| variant(e, &format!("u{i}"), &weights) == 0).count();
        let share = firsts as f64 / n as f64;
        assert!((share - 0.2).abs() < 0.01, "{share}");
    }

    #[test]
    fn experiments_split_independently() {
        let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let n = 20_000;
        let both = (0..n)
            .filter(|i| {
                let k = format!("u{i}");
                variant(a, &k, &[5_000, 5_000]) == 0 && variant(b, &k, &[5_000, 5_000]) == 0
            })
            .count();
        let share = both as f64 / n as f64;
        assert!((share - 0.25).abs() < 0.02, "{share}");
    }
}
