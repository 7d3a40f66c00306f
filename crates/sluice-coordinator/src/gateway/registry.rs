//! [`SubtaskGateways`]: the ready gateways of a coordinator, per subtask and per attempt.

use crate::error::{GatewayError, SendError};
use crate::gateway::SubtaskGateway;
use sluice_core::{AttemptNumber, SubtaskIndex};
use std::collections::BTreeMap;

/// The gateways a coordinator may send through: one per ready attempt of each subtask.
///
/// An attempt is added when the job master reports it ready and removed when it reports it
/// failed; a subtask reset removes all attempts of the subtask. The same record decides whether
/// an event *from* a subtask attempt is still accepted: events from attempts that are not ready
/// (failed or replaced) are dropped.
///
/// ```
/// use sluice_coordinator::gateway::memory::InMemoryTransport;
/// use sluice_coordinator::SubtaskGateways;
///
/// let transport = InMemoryTransport::new(4);
/// let mut gateways = SubtaskGateways::new(2);
/// gateways.register(transport.gateway(1, 0)).unwrap();
/// assert!(gateways.is_ready(1));
/// assert!(gateways.register(transport.gateway(1, 0)).is_err()); // same attempt twice
/// assert!(gateways.accepts_event_from(1, 0));
///
/// gateways.unregister(1, 0);
/// assert!(!gateways.is_ready(1));
/// assert!(!gateways.accepts_event_from(1, 0)); // a failed attempt's events are dropped
/// ```
#[derive(Debug, Clone)]
pub struct SubtaskGateways {
    slots: Vec<BTreeMap<AttemptNumber, SubtaskGateway>>,
}

impl SubtaskGateways {
    /// No gateways, for an operator with `parallelism` subtasks.
    pub fn new(parallelism: usize) -> Self {
        SubtaskGateways {
            slots: vec![BTreeMap::new(); parallelism],
        }
    }

    /// The operator's parallelism.
    pub fn parallelism(&self) -> usize {
        self.slots.len()
    }

    /// Adds the gateway of a ready attempt.
    pub fn register(&mut self, gateway: SubtaskGateway) -> Result<(), GatewayError> {
        let parallelism = self.slots.len();
        let (subtask, attempt) = (gateway.subtask(), gateway.attempt());
        let slot = self
            .slots
            .get_mut(subtask)
            .ok_or(GatewayError::NoSuchSubtask {
                subtask,
                parallelism,
            })?;
        if slot.contains_key(&attempt) {
            return Err(GatewayError::AlreadyRegistered { subtask, attempt });
        }
        slot.insert(attempt, gateway);
        Ok(())
    }

    /// Removes the gateway of `attempt` of `subtask`, returning it if it was there.
    pub fn unregister(
        &mut self,
        subtask: SubtaskIndex,
        attempt: AttemptNumber,
    ) -> Option<SubtaskGateway> {
        self.slots.get_mut(subtask)?.remove(&attempt)
    }

    /// Removes every gateway of `subtask`.
    pub fn reset(&mut self, subtask: SubtaskIndex) {
        if let Some(slot) = self.slots.get_mut(subtask) {
            slot.clear();
        }
    }

    /// Removes every gateway.
    pub fn clear(&mut self) {
        self.slots.iter_mut().for_each(BTreeMap::clear);
    }

    /// Whether `subtask` has at least one ready attempt.
    pub fn is_ready(&self, subtask: SubtaskIndex) -> bool {
        self.slots.get(subtask).is_some_and(|s| !s.is_empty())
    }

    /// The ready attempts of `subtask`, lowest first.
    pub fn attempts(&self, subtask: SubtaskIndex) -> Vec<AttemptNumber> {
        self.slots
            .get(subtask)
            .map(|s| s.keys().copied().collect())
            .unwrap_or_default()
    }

    /// The gateway of `attempt` of `subtask`, if it is ready.
    pub fn gateway(
        &self,
        subtask: SubtaskIndex,
        attempt: AttemptNumber,
    ) -> Option<&SubtaskGateway> {
        self.slots.get(subtask)?.get(&attempt)
    }

    /// The only ready gateway of `subtask`: an error names the subtask when it has none, or
    /// when it has several concurrent attempts.
    pub fn only_gateway(&self, subtask: SubtaskIndex) -> Result<&SubtaskGateway, SendError> {
        let slot = self.slots.get(subtask).ok_or(SendError::NoSuchSubtask {
            subtask,
            parallelism: self.slots.len(),
        })?;
        let mut gateways = slot.values();
        match (gateways.next(), slot.len()) {
            (Some(g), 1) => Ok(g),
            (None, _) => Err(SendError::NotReady { subtask }),
            (Some(_), attempts) => Err(SendError::ConcurrentAttempts { subtask, attempts }),
        }
    }

    /// Whether an event from `attempt` of `subtask` should reach the coordinator: only ready
    /// attempts are heard, so events from failed or replaced attempts are dropped.
    pub fn accepts_event_from(&self, subtask: SubtaskIndex, attempt: AttemptNumber) -> bool {
        self.gateway(subtask, attempt).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::memory::InMemoryTransport;

    #[test]
    fn only_gateway_names_the_subtask_when_not_ready_and_refuses_concurrent_attempts() {
        let t = InMemoryTransport::new(1);
        let mut g = SubtaskGateways::new(3);
        assert_eq!(
            g.only_gateway(2).unwrap_err(),
            SendError::NotReady { subtask: 2 }
        );
        assert_eq!(
            g.only_gateway(3).unwrap_err(),
            SendError::NoSuchSubtask {
                subtask: 3,
                parallelism: 3
            }
        );
        g.register(t.gateway(2, 0)).unwrap();
        assert_eq!(g.only_gateway(2).unwrap().attempt(), 0);
        g.register(t.gateway(2, 1)).unwrap();
        assert_eq!(
            g.only_gateway(2).unwrap_err(),
            SendError::ConcurrentAttempts {
                subtask: 2,
                attempts: 2
            }
        );
        assert_eq!(g.attempts(2), vec![0, 1]);
        g.reset(2);
        assert!(!g.is_ready(2));
    }

    #[test]
    fn registering_out_of_range_fails() {
        let t = InMemoryTransport::new(1);
        let mut g = SubtaskGateways::new(1);
        assert_eq!(
            g.register(t.gateway(5, 0)),
            Err(GatewayError::NoSuchSubtask {
                subtask: 5,
                parallelism: 1
            })
        );
    }
}
