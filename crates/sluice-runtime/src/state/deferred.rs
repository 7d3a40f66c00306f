//! State whose content waits in checkpoint storage: what cluster mode sends instead of the state
//! itself (Flink's state handles).
//!
//! In cluster mode a task manager writes the state files of its subtasks to checkpoint storage
//! itself and acknowledges a checkpoint with a *stub* per operator subtask: the state without
//! its entries (only the keyed stores' handles and the finished flag, which the job master needs
//! for the checkpoint's metadata) and a [`Deferred`] naming the file. The job master keeps stubs
//! as its restore point and deals them out at restore like full states:
//!
//! - at the same parallelism, subtask `i` gets old subtask `i`'s stub;
//! - at another parallelism, new subtask `i` gets a stub whose [`Deferred`] lists every old
//!   subtask's part and says "share `i` of `n`": whoever resolves it reads the parts and deals
//!   them out exactly as [`redistribute`](super::redistribute) does with full states.
//!
//! The task manager that runs the subtask resolves the stub before it builds the task
//! (`checkpoint/persistence.rs`, `resolve_deferred`), so no state content crosses the job master
//! in either direction and a message's size no longer grows with the state.
//!
//! ```text
//! TM: ack(chk 7) = stub{stores, finished} + Deferred{[File chk-7/node-2.subtask-1.state]}
//! JM: restore point = stubs;  rescale 2 -> 3: Deferred{[File s0, File s1], share (1, 3)}
//! TM: read s0, s1 -> redistribute([s0, s1], 3)[1] -> the task's state
//! ```

use super::OperatorState;
use crate::storage::StateFileHandle;
use serde::{Deserialize, Serialize};
use sluice_core::CheckpointId;

/// Where the content of a restored state is, when it is not in the [`OperatorState`] at hand
/// (see `state/deferred.rs`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deferred {
    /// The states to read, in old subtask order.
    pub(crate) parts: Vec<Part>,
    /// `None`: the state is the single part as it is. `Some((i, n))`: share `i` of `n` of the
    /// parts taken together, dealt out as a restore at parallelism `n` deals them.
    pub(crate) share: Option<(usize, usize)>,
}

/// One old subtask's state in a [`Deferred`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Part {
    /// A state file of checkpoint `checkpoint`.
    File {
        /// The checkpoint.
        checkpoint: CheckpointId,
        /// The file.
        handle: StateFileHandle,
    },
    /// A state carried whole (the job master wrote its file, or it has none).
    Inline(OperatorState),
    /// A state that is itself deferred.
    Deferred(Box<Deferred>),
}

impl Deferred {
    /// The state stored whole in `handle` of checkpoint `checkpoint`.
    pub(crate) fn file(checkpoint: CheckpointId, handle: StateFileHandle) -> Self {
        Deferred {
            parts: vec![Part::File { checkpoint, handle }],
            share: None,
        }
    }

    /// Every state file resolving it reads, with its checkpoint.
    pub(crate) fn file_handles(&self) -> Vec<(CheckpointId, StateFileHandle)> {
        let mut out = Vec::new();
        for p in &self.parts {
            match p {
                Part::File { checkpoint, handle } => out.push((*checkpoint, handle.clone())),
                Part::Inline(_) => {}
                Part::Deferred(d) => out.extend(d.file_handles()),
            }
        }
        out
    }

    /// The whole state this stands for, reading each file with `read` (which returns the state
    /// the file holds) and dealing the parts out as a restore at `max_parallelism` key groups
    /// does.
    pub(crate) fn resolve(
        self,
        max_parallelism: usize,
        read: &mut dyn FnMut(CheckpointId, &StateFileHandle) -> Result<OperatorState, String>,
    ) -> Result<OperatorState, String> {
        let mut states = Vec::with_capacity(self.parts.len());
        for p in self.parts {
            states.push(match p {
                Part::File { checkpoint, handle } => read(checkpoint, &handle)?,
                Part::Inline(s) => s,
                Part::Deferred(d) => d.resolve(max_parallelism, read)?,
            });
        }
        match self.share {
            None if states.len() == 1 => Ok(states.pop().unwrap_or_default()),
            None => Err(format!(
                "a deferred state names {} states but no share of them",
                states.len()
            )),
            Some((i, n)) => super::redistribute(states, n, max_parallelism)
                .into_iter()
                .nth(i)
                .ok_or_else(|| format!("a deferred state asks for share {i} of {n}")),
        }
    }
}

impl Part {
    /// The part that stands for `state`: its deferred content, or the state itself.
    pub(crate) fn of(state: OperatorState) -> Part {
        match state.deferred {
            Some(d) if d.share.is_none() && d.parts.len() == 1 => d
                .parts
                .into_iter()
                .next()
                .unwrap_or(Part::Inline(OperatorState::default())),
            Some(d) => Part::Deferred(d),
            None => Part::Inline(state),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::NodeId;

    fn handle(subtask: usize) -> StateFileHandle {
        StateFileHandle {
            node: NodeId(2),
            subtask,
            file_name: format!("node-2.subtask-{subtask}.state"),
            length: 10,
            crc32: 1,
        }
    }

    #[test]
    fn a_stub_stands_for_its_file_and_an_inline_state_for_itself() {
        let mut stub = OperatorState::default();
        stub.defer(Deferred::file(CheckpointId(7), handle(1)));
        assert_eq!(
            Part::of(stub),
            Part::File {
                checkpoint: CheckpointId(7),
                handle: handle(1)
            }
        );
        let whole = OperatorState::from_entries(vec![vec![1]]);
        assert_eq!(Part::of(whole.clone()), Part::Inline(whole));
    }

    use crate::key_groups::subtask_for_key_group;
    use crate::state::{KeyGroupEntry, redistribute};
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    /// `full` written to files of checkpoint 1 and replaced by their stubs.
    fn stubs(full: &[OperatorState]) -> (Vec<OperatorState>, BTreeMap<String, OperatorState>) {
        let mut files = BTreeMap::new();
        let mut out = Vec::new();
        for (i, s) in full.iter().enumerate() {
            let mut with_file = s.clone();
            with_file.stored_at(CheckpointId(1), handle(i));
            files.insert(handle(i).file_name, s.clone());
            out.push(with_file.stub().unwrap());
        }
        (out, files)
    }

    fn resolve_all(
        stubs: Vec<OperatorState>,
        files: &BTreeMap<String, OperatorState>,
    ) -> Vec<OperatorState> {
        stubs
            .into_iter()
            .map(|mut s| match s.take_deferred() {
                Some(d) => d
                    .resolve(128, &mut |_, h| {
                        files
                            .get(&h.file_name)
                            .cloned()
                            .ok_or("no file".to_string())
                    })
                    .unwrap(),
                None => s,
            })
            .collect()
    }

    proptest! {
        /// Stubs dealt out at any parallelism, and dealt out again, resolve to what the full
        /// states dealt out the same way are.
        #[test]
        fn resolved_stubs_are_the_redistributed_states(
            sizes in proptest::collection::vec(0usize..12, 1..5),
            groups in proptest::collection::vec(0u32..128, 0..30),
            broadcast in any::<bool>(),
            p1 in 1usize..6,
            p2 in 1usize..6,
        ) {
            let mut next = 0u8;
            let mut full: Vec<OperatorState> = sizes.iter().map(|&n| {
                OperatorState::from_entries((0..n).map(|_| { next = next.wrapping_add(1); vec![next] }).collect())
            }).collect();
            for (i, g) in groups.iter().enumerate() {
                let owner = subtask_for_key_group(*g as usize, 128, full.len());
                full[owner].push_keyed(KeyGroupEntry { state: "k".into(), key_group: *g, data: vec![i as u8] });
            }
            if broadcast {
                for s in full.iter_mut() {
                    s.push_broadcast(crate::state::BroadcastEntry { state: "b".into(), data: vec![9] });
                }
            }
            let (stubbed, files) = stubs(&full);
            prop_assert!(stubbed.iter().all(|s| s.entries().is_empty() && s.keyed_entries().is_empty()));
            let once = redistribute(stubbed.clone(), p1, 128);
            prop_assert_eq!(resolve_all(once.clone(), &files), redistribute(full.clone(), p1, 128));
            let twice = redistribute(once, p2, 128);
            prop_assert_eq!(
                resolve_all(twice, &files),
                redistribute(redistribute(full, p1, 128), p2, 128)
            );
        }
    }

    #[test]
    fn a_deferred_share_counts_the_files_of_its_parts() {
        let d = Deferred {
            parts: vec![
                Part::File {
                    checkpoint: CheckpointId(1),
                    handle: handle(0),
                },
                Part::Inline(OperatorState::default()),
                Part::Deferred(Box::new(Deferred::file(CheckpointId(1), handle(1)))),
            ],
            share: Some((0, 3)),
        };
        assert_eq!(d.file_handles().len(), 2);
    }
}
