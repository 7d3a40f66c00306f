//! Two-input operators driven by the test harness: keyed co-process state and timers shared by
//! both inputs across a restore and a rescale, broadcast state restored at 1 → 3 and 3 → 1, and
//! the keyed broadcast operator's keyed and broadcast state together.

use super::co::{KeyedCo, either_key};
use super::*;
use crate::operator::Operator;
use crate::state::OperatorState;
use crate::testing::{OperatorTestHarness, rescale_states};
use sluice_core::{Either, UserError, Watermark};

/// Per key: how many records each input sent; emits the pair after each record, and
/// `(key, -1, -1)` when the key's event-time timer (registered by the second input) fires.
#[derive(Clone)]
struct CountBoth;

impl KeyedCoProcessFunction<u32, u32, u32> for CountBoth {
    type Out = (u32, i64, i64);
    type State = (i64, i64);

    fn process_element1(
        &mut self,
        key: u32,
        ctx: &mut Context<'_, u32, (i64, i64), Self::Out>,
    ) -> Result<(), UserError> {
        ctx.state().0 += 1;
        let (a, b) = *ctx.state();
        ctx.collect((key, a, b));
        Ok(())
    }

    fn process_element2(
        &mut self,
        key: u32,
        ctx: &mut Context<'_, u32, (i64, i64), Self::Out>,
    ) -> Result<(), UserError> {
        ctx.state().1 += 1;
        let (a, b) = *ctx.state();
        ctx.collect((key, a, b));
        ctx.timer_service().register_event_time_timer(100);
        Ok(())
    }

    fn on_timer(
        &mut self,
        _timestamp: i64,
        ctx: &mut Context<'_, u32, (i64, i64), Self::Out>,
    ) -> Result<(), UserError> {
        let key = *ctx.current_key();
        ctx.collect((key, -1, -1));
        Ok(())
    }
}

fn keyed_co() -> impl Operator<Either<u32, u32>, Out = Tagged<(u32, i64, i64)>> + Clone {
    KeyedProcessOperator::new(
        KeyedCo::new(CountBoth),
        either_key(|a: &u32| *a, |b: &u32| *b),
    )
}

fn mains<T: sluice_core::Data>(records: Vec<Tagged<T>>) -> Vec<T> {
    records.into_iter().filter_map(Tagged::into_main).collect()
}

#[test]
fn keyed_co_process_state_and_timers_survive_a_rescale_two_to_three_to_one() {
    let keys: Vec<u32> = (0..30).collect();
    // Two subtasks, each fed the keys it owns from both inputs.
    let mut snapshots = Vec::new();
    for s in 0..2 {
        let mut h = OperatorTestHarness::for_subtask(keyed_co(), s, 2);
        let mine: Vec<u32> = keys.iter().copied().filter(|k| h.owns_key(k)).collect();
        for k in mine {
            h.process_element1_at(k, 1).unwrap();
            h.process_element2_at(k, 2).unwrap();
            h.process_element1_at(k, 3).unwrap();
        }
        snapshots.push(h.snapshot(1).unwrap());
    }
    // Three subtasks: each key continues from (2, 1).
    let mut three = Vec::new();
    for s in 0..3 {
        let mut h = OperatorTestHarness::for_subtask(keyed_co(), s, 3)
            .restore(snapshots.clone())
            .unwrap();
        let mine: Vec<u32> = keys.iter().copied().filter(|k| h.owns_key(k)).collect();
        for &k in &mine {
            h.process_element2_at(k, 4).unwrap();
        }
        let got = mains(h.records());
        assert_eq!(got, mine.iter().map(|&k| (k, 2, 2)).collect::<Vec<_>>());
        three.push(h.snapshot(2).unwrap());
    }
    // One subtask: every key's state and its timer at 100 arrive; the watermark fires them.
    let mut h = OperatorTestHarness::new(keyed_co()).restore(three).unwrap();
    for &k in &keys {
        h.process_element1_at(k, 5).unwrap();
    }
    h.process_watermark1(Watermark::new(100)).unwrap();
    assert!(h.watermarks().is_empty(), "the second input holds it back");
    h.process_watermark2(Watermark::new(200)).unwrap();
    let got = mains(h.records());
    let mut updates: Vec<_> = got.iter().filter(|r| r.1 >= 0).copied().collect();
    updates.sort();
    assert_eq!(updates, keys.iter().map(|&k| (k, 3, 2)).collect::<Vec<_>>());
    let mut fired: Vec<u32> = got.iter().filter(|r| r.1 < 0).map(|r| r.0).collect();
    fired.sort();
    assert_eq!(
        fired, keys,
        "one timer per key, registered before the rescales"
    );
}

/// Keeps every broadcast word as a rule; emits each word of the first input with whether a
/// rule names it.
#[derive(Clone)]
struct Rules(MapStateDescriptor<String, u32>);

impl BroadcastProcessFunction<String, String> for Rules {
    type Out = (String, bool);

    fn process_element(
        &mut self,
        word: String,
        ctx: &mut ReadOnlyBroadcastContext<'_, Self::Out>,
    ) -> Result<(), UserError> {
        let known = ctx.broadcast_state(&self.0)?.contains_key(&word);
        ctx.collect((word, known));
        Ok(())
    }

    fn process_broadcast_element(
        &mut self,
        rule: String,
        ctx: &mut BroadcastContext<'_, Self::Out>,
    ) -> Result<(), UserError> {
        let state = ctx.broadcast_state(&self.0)?;
        let n = state.len() as u32;
        state.put(rule, n);
        Ok(())
    }
}

fn rules_op() -> BroadcastProcessOperator<String, String, Rules> {
    let d = MapStateDescriptor::new("rules");
    BroadcastProcessOperator::new(Rules(d.clone()), BroadcastStates::declaring(&d))
}

fn words<Op>(h: &OperatorTestHarness<Either<String, String>, Op>) -> Vec<(String, bool)>
where
    Op: Operator<Either<String, String>, Out = Tagged<(String, bool)>>,
{
    mains(h.records())
}

#[test]
fn broadcast_state_is_restored_on_every_subtask_from_one_to_three_and_back_to_one() {
    let mut one = OperatorTestHarness::new(rules_op());
    for r in ["a", "b"] {
        one.process_element2(r.to_string()).unwrap();
    }
    let snapshot = one.snapshot(1).unwrap();
    assert_eq!(snapshot.broadcast_entries().len(), 1);

    let mut three = Vec::new();
    for s in 0..3 {
        let mut h = OperatorTestHarness::for_subtask(rules_op(), s, 3)
            .restore(vec![snapshot.clone()])
            .unwrap();
        h.process_element1("a".to_string()).unwrap();
        h.process_element1("c".to_string()).unwrap();
        assert_eq!(
            words(&h),
            vec![("a".to_string(), true), ("c".to_string(), false)],
            "subtask {s} of 3 has the rules"
        );
        // Every subtask sees the same new rule.
        h.process_element2("c".to_string()).unwrap();
        three.push(h.snapshot(2).unwrap());
    }

    let state = rescale_states(three.clone(), 1, 128)
        .pop()
        .unwrap_or_default();
    assert_eq!(state.broadcast_entries().len(), 1, "one copy, not three");
    let mut h = OperatorTestHarness::new(rules_op()).restore(three).unwrap();
    for w in ["a", "b", "c", "d"] {
        h.process_element1(w.to_string()).unwrap();
    }
    let got: Vec<bool> = words(&h).into_iter().map(|(_, k)| k).collect();
    assert_eq!(got, vec![true, true, true, false]);
}

#[test]
fn an_undeclared_broadcast_state_is_an_error_naming_it() {
    let declared = MapStateDescriptor::<String, u32>::new("declared");
    let op = BroadcastProcessOperator::new(
        Rules(MapStateDescriptor::new("other")),
        BroadcastStates::declaring(&declared),
    );
    let mut h = OperatorTestHarness::new(op);
    let err = h.process_element2("x".to_string()).unwrap_err();
    assert!(
        err.to_string().contains("'other' was not declared"),
        "{err}"
    );
}

/// Keyed input: (user, amount) summed per user; broadcast: a bonus added to every user's sum
/// with `apply_to_keyed_state`, and remembered as the last bonus.
#[derive(Clone)]
struct Bonus(MapStateDescriptor<u8, i64>);

impl KeyedBroadcastProcessFunction<u32, (u32, i64), i64> for Bonus {
    type Out = (u32, i64);
    type State = i64;

    fn process_element(
        &mut self,
        r: (u32, i64),
        ctx: &mut KeyedReadOnlyContext<'_, u32, i64, Self::Out>,
    ) -> Result<(), UserError> {
        let last = ctx.broadcast_state(&self.0)?.get(&0).copied().unwrap_or(0);
        *ctx.state() += r.1;
        let sum = *ctx.state();
        ctx.collect((r.0, sum * 1000 + last));
        Ok(())
    }

    fn process_broadcast_element(
        &mut self,
        bonus: i64,
        ctx: &mut KeyedBroadcastContext<'_, u32, i64, Self::Out>,
    ) -> Result<(), UserError> {
        ctx.broadcast_state(&self.0)?.put(0, bonus);
        ctx.apply_to_keyed_state(|_, sum| {
            *sum += bonus;
            Ok(())
        })
    }
}

fn bonus_op() -> impl Operator<Either<(u32, i64), i64>, Out = Tagged<(u32, i64)>> + Clone {
    let d = MapStateDescriptor::new("bonus");
    KeyedBroadcastProcessOperator::new(
        Bonus(d.clone()),
        |r: &(u32, i64)| r.0,
        BroadcastStates::declaring(&d),
    )
}

#[test]
fn keyed_broadcast_state_and_keyed_state_restore_at_another_parallelism() {
    let users: Vec<u32> = (0..20).collect();
    let mut snapshots = Vec::new();
    for s in 0..2 {
        let mut h = OperatorTestHarness::for_subtask(bonus_op(), s, 2);
        let mine: Vec<u32> = users.iter().copied().filter(|u| h.owns_key(u)).collect();
        for u in mine {
            h.process_element1((u, 1)).unwrap();
        }
        h.process_element2(10).unwrap();
        snapshots.push(h.snapshot(1).unwrap());
    }
    let mut got = Vec::new();
    for s in 0..3 {
        let mut h = OperatorTestHarness::for_subtask(bonus_op(), s, 3)
            .restore(snapshots.clone())
            .unwrap();
        let mine: Vec<u32> = users.iter().copied().filter(|u| h.owns_key(u)).collect();
        for u in mine {
            h.process_element1((u, 1)).unwrap();
        }
        got.extend(mains(h.records()));
    }
    got.sort();
    // Each user: 1, plus the bonus 10, plus 1 = 12; the last bonus, 10, is known everywhere.
    assert_eq!(got, users.iter().map(|&u| (u, 12_010)).collect::<Vec<_>>());
}

#[test]
fn a_state_written_before_broadcast_state_existed_still_decodes() {
    #[derive(serde::Serialize)]
    struct Old {
        entries: Vec<Vec<u8>>,
        keyed: Vec<crate::state::KeyGroupEntry>,
        finished: bool,
    }
    let old = sluice_core::codec::encode(&Old {
        entries: vec![vec![7]],
        keyed: Vec::new(),
        finished: true,
    })
    .unwrap();
    let state = OperatorState::decode(&old).unwrap();
    assert_eq!(state.entries(), &[vec![7]]);
    assert!(state.is_finished());
    assert!(state.broadcast_entries().is_empty());
}

#[test]
fn keyed_broadcast_reads_each_run_of_keyed_records_in_one_read() {
    let backend = std::sync::Arc::new(crate::state::CountingBackend::default());
    let ctx = crate::operator::OperatorContext::for_test("bonus", 0, 1)
        .with_state_backend(backend.clone());
    let mut h = OperatorTestHarness::with_context(bonus_op(), ctx);
    let keyed = |users: std::ops::Range<u32>| users.map(|u| Either::Left((u, 1)));
    h.process_batch(keyed(0..64).collect()).unwrap();
    h.snapshot(1).unwrap();
    // Two runs of new users around a bonus, which visits every stored user.
    let batch: Vec<_> = keyed(64..96)
        .chain([Either::Right(5)])
        .chain(keyed(96..128))
        .collect();
    h.process_batch(batch).unwrap();
    assert_eq!(
        backend.reads(),
        (0, 2),
        "(single reads, reads of many keys)"
    );
    let sums = mains(h.records());
    assert!(sums.contains(&(96, 1000 + 5)), "{sums:?}");
}
