//! Settlements grouped by Redis Cluster hash slot: a script may only touch one slot's keys on a
//! cluster, and a settlement's keys all carry its organization's tag, so a batch of many
//! organizations' settlements becomes one script call per slot.

use super::plan::{Plan, Settlement};

impl Settlement {
    /// The Redis Cluster hash slot of its keys (all under its organization's `{org_id}` tag).
    pub fn slot(&self) -> u16 {
        crate::redis::key_slot(Plan::prefix(self.org_id).as_bytes())
    }
}

/// Splits a batch of settlements into batches whose keys share one hash slot, so that each can
/// be one script call on a Redis Cluster. Order within a slot is kept.
pub fn group_by_slot(batch: Vec<Settlement>) -> Vec<Vec<Settlement>> {
    let mut groups: Vec<(u16, Vec<Settlement>)> = Vec::new();
    for s in batch {
        let slot = s.slot();
        match groups.iter_mut().find(|(g, _)| *g == slot) {
            Some((_, group)) => group.push(s),
            None => groups.push((slot, vec![s])),
        }
    }
    groups.into_iter().map(|(_, g)| g).collect()
}

#[cfg(test)]
mod tests {
    use uuid::Uuid;

    use super::*;

    #[test]
    fn settlements_grouped_by_slot_keep_one_slot_per_call() {
        let orgs: Vec<Uuid> = (0..40).map(|_| Uuid::new_v4()).collect();
        let batch: Vec<Settlement> = orgs
            .iter()
            .cycle()
            .take(120)
            .enumerate()
            .map(|(i, org)| Settlement { org_id: *org, request_id: i.to_string(), ops: Vec::new() })
            .collect();
        let groups = group_by_slot(batch.clone());
        assert_eq!(groups.iter().map(Vec::len).sum::<usize>(), 120);
        let mut seen = std::collections::HashSet::new();
        for g in &groups {
            let slot = g[0].slot();
            assert!(g.iter().all(|s| s.slot() == slot));
            assert!(seen.insert(slot), "one group per slot");
            // Within a slot, the batch's order.
            let ids: Vec<usize> = g.iter().map(|s| s.request_id.parse().unwrap()).collect();
            assert!(ids.windows(2).all(|w| w[0] < w[1]));
        }
    }
}
