//! Placement: which task manager runs which subtask. Pure.
//!
//! Like Flink's default slot sharing, one slot holds one subtask of every operator chain: slot
//! `s` runs subtask `s` of each chain, so a job needs as many slots as its largest
//! parallelism, and the subtasks that exchange most (the same index of consecutive chains)
//! share a process. Slots are numbered over the task managers in the order given, each
//! contributing its slot count.
//!
//! ```
//! use sluice_cluster::placement::slot_owners;
//!
//! let tms = [("tm-a".to_string(), 2), ("tm-b".to_string(), 1)];
//! assert_eq!(slot_owners(3, &tms).unwrap(), ["tm-a", "tm-a", "tm-b"]);
//! assert!(slot_owners(4, &tms).is_err());
//! ```

/// Not enough slots for the job.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "the job needs {needed} task slots (its largest parallelism) but the {task_managers} \
     registered task managers offer {offered}"
)]
pub struct NotEnoughSlots {
    /// Slots the job needs.
    pub needed: usize,
    /// Slots offered.
    pub offered: usize,
    /// Task managers registered.
    pub task_managers: usize,
}

/// The task manager owning each of the first `needed` slots, from task managers and their
/// slot counts.
pub fn slot_owners(
    needed: usize,
    task_managers: &[(String, u32)],
) -> Result<Vec<String>, NotEnoughSlots> {
    let owners: Vec<String> = task_managers
        .iter()
        .flat_map(|(tm, slots)| std::iter::repeat_n(tm.clone(), *slots as usize))
        .take(needed)
        .collect();
    if owners.len() < needed {
        return Err(NotEnoughSlots {
            needed,
            offered: task_managers.iter().map(|(_, s)| *s as usize).sum(),
            task_managers: task_managers.len(),
        });
    }
    Ok(owners)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Every slot below `needed` has an owner, each task manager owns at most its slot
        /// count, and owners come in the order given.
        #[test]
        fn owners_respect_slot_counts(slots in proptest::collection::vec(0u32..4, 0..5), needed in 0usize..12) {
            let tms: Vec<(String, u32)> = slots.iter().enumerate().map(|(i, s)| (format!("tm-{i}"), *s)).collect();
            let total: usize = slots.iter().map(|s| *s as usize).sum();
            match slot_owners(needed, &tms) {
                Ok(owners) => {
                    prop_assert_eq!(owners.len(), needed);
                    for (tm, s) in &tms {
                        prop_assert!(owners.iter().filter(|o| *o == tm).count() <= *s as usize);
                    }
                    let mut sorted = owners.clone();
                    sorted.sort_by_key(|o| tms.iter().position(|(t, _)| t == o));
                    prop_assert_eq!(sorted, owners);
                }
                Err(e) => prop_assert!(total < needed && e.offered == total),
            }
        }
    }
}
