//! Snapshots and restores: every held input (with its event time) and queued watermark, in input
//! order, with attempts and the timeout budget used.

use super::*;

impl<In, F, I> AsyncWaitOperator<In, F, I>
where
    In: Data,
    F: AsyncFunction<In>,
    I: Invoker<In, F>,
{
    pub(super) fn snapshot(&mut self) -> Result<OperatorState, UserError>
    where
        In: Serialize,
    {
        let now = Instant::now();
        let mut held: Vec<(u64, Option<usize>, i64)> = Vec::new();
        for (slot, e) in self.entries.iter().enumerate() {
            if let Some(e) = e {
                held.push((e.seq, Some(slot), 0));
            }
        }
        let mut wms = Vec::new();
        self.queue.watermarks(&mut wms);
        held.extend(wms.into_iter().map(|(seq, w)| (seq, None, w.timestamp())));
        held.sort_unstable_by_key(|h| h.0);

        let mut state = OperatorState::default();
        for (_, slot, ts) in held {
            let bytes = match slot.and_then(|s| self.entries[s].as_ref()) {
                Some(e) => {
                    let attempts_done = match e.phase {
                        Phase::Backoff => e.attempt,
                        Phase::Running | Phase::Done(_) => e.attempt - 1,
                    };
                    let elapsed = now.saturating_duration_since(e.started);
                    state::encode_record(&e.input, e.timestamp, attempts_done, elapsed)
                        .map_err(|err| snapshot_error(&e.input, err))?
                }
                None => state::encode_watermark(ts).map_err(|err| snapshot_error(&ts, err))?,
            };
            state.push(bytes);
        }
        for b in &self.backlog {
            match b {
                Backlog::Batch(records) => {
                    for (r, timestamp) in records.iter() {
                        let bytes = state::encode_record(r, timestamp, 0, Duration::ZERO)
                            .map_err(|err| snapshot_error(r, err))?;
                        state.push(bytes);
                    }
                }
                Backlog::Restored {
                    input,
                    timestamp,
                    attempts_done,
                    elapsed,
                } => state.push(
                    state::encode_record(input, *timestamp, *attempts_done, *elapsed)
                        .map_err(|err| snapshot_error(input, err))?,
                ),
                Backlog::Watermark(w) => state.push(
                    state::encode_watermark(w.timestamp()).map_err(|err| snapshot_error(w, err))?,
                ),
            }
        }
        Ok(state)
    }

    pub(super) fn restore(&mut self, state: OperatorState) -> Result<(), UserError>
    where
        In: DeserializeOwned,
    {
        for (index, bytes) in state.entries().iter().enumerate() {
            let element = state::decode::<In>(bytes)
                .map_err(|reason| Box::new(AsyncCallError::Restore { index, reason }))?;
            self.backlog.push_back(match element {
                RestoredElement::Record {
                    input,
                    timestamp,
                    attempts_done,
                    elapsed,
                } => Backlog::Restored {
                    input,
                    timestamp,
                    attempts_done,
                    elapsed,
                },
                RestoredElement::Watermark(t) => Backlog::Watermark(Watermark::new(t)),
            });
        }
        Ok(())
    }
}

fn snapshot_error(input: &impl std::fmt::Debug, err: sluice_core::codec::CodecError) -> UserError {
    Box::new(AsyncCallError::Snapshot {
        input: describe(input),
        reason: err.to_string(),
    })
}
