//! The elector against a fake lease API (one record, optimistic versions, injected failures)
//! on a simulated clock.

use super::*;
use proptest::prelude::*;

/// The API server's lease: create fails if it exists, replace fails if the version moved.
#[derive(Default)]
struct FakeApi {
    lease: Option<Versioned>,
    next_version: u64,
}

impl FakeApi {
    fn read(&self) -> Observation {
        match &self.lease {
            None => Observation::Missing,
            Some(v) => Observation::Found(v.clone()),
        }
    }

    fn write(&mut self, action: Action) -> Option<Result<Versioned, WriteFailed>> {
        let (expected, record) = match action {
            Action::Wait => return None,
            Action::Create(record) => (None, record),
            Action::Replace { version, record } => (Some(version), record),
        };
        let current = self.lease.as_ref().map(|(_, v)| v.clone());
        if current != expected {
            return Some(Err(WriteFailed("conflict".into())));
        }
        self.next_version += 1;
        let written = (record, self.next_version.to_string());
        self.lease = Some(written.clone());
        Some(Ok(written))
    }
}

fn config(name: &str) -> LeaseConfig {
    LeaseConfig {
        identity: name.into(),
        lease_duration: Duration::from_millis(15_000),
        renew_deadline: Duration::from_millis(10_000),
        retry_period: Duration::from_millis(2_000),
    }
    .validated()
    .unwrap()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fail {
    None,
    Read,
    Answer,
}

/// One round of elector `e` at `now`: read, decide, write, report.
fn round(e: &mut Elector, api: &mut FakeApi, now: Instant, wall: i64, fail: Fail) {
    let observation = if fail == Fail::Read {
        Observation::Failed("unreachable".into())
    } else {
        api.read()
    };
    let action = e.decide(now, wall, observation);
    if let Some(outcome) = api.write(action) {
        let outcome = match fail {
            // The write was applied but its answer was lost.
            Fail::Answer => Err(WriteFailed("timeout".into())),
            _ => outcome,
        };
        e.written(now, outcome);
    }
}

#[test]
fn a_candidate_takes_an_abandoned_lease_only_after_the_lease_duration() {
    let t0 = Instant::now();
    let ms = Duration::from_millis;
    let mut api = FakeApi::default();
    let (mut a, mut b) = (Elector::new(config("a")), Elector::new(config("b")));
    round(&mut a, &mut api, t0, 0, Fail::None);
    assert!(a.is_leader(t0));
    round(&mut b, &mut api, t0 + ms(1), 1, Fail::None);
    assert!(!b.is_leader(t0 + ms(1)));
    assert_eq!(b.leader(), Some("a"));
    // a stops renewing. b keeps reading: the lease is not b's before 15 s after b saw it.
    let mut t = t0 + ms(1);
    while t < t0 + ms(15_001) {
        round(&mut b, &mut api, t, 0, Fail::None);
        assert!(!b.is_leader(t), "b leads at {:?}", t - t0);
        t += ms(2_000);
    }
    // a counted itself leader only until its renew deadline.
    assert!(a.is_leader(t0 + ms(9_999)));
    assert!(!a.is_leader(t0 + ms(10_000)));
    round(&mut b, &mut api, t0 + ms(15_001), 0, Fail::None);
    assert!(b.is_leader(t0 + ms(15_001)));
    let Some((record, _)) = &api.lease else {
        panic!("no lease")
    };
    assert_eq!(
        (record.holder.as_deref(), record.transitions),
        (Some("b"), 1)
    );
    // a comes back: it sees b holding the lease and follows.
    round(&mut a, &mut api, t0 + ms(16_000), 0, Fail::None);
    assert!(!a.is_leader(t0 + ms(16_000)));
    assert_eq!(a.leader(), Some("b"));
}

#[test]
fn incoherent_durations_are_refused() {
    let mut c = config("a");
    c.renew_deadline = c.lease_duration;
    assert!(matches!(c.validated(), Err(LeaseConfigError::Order { .. })));
    assert_eq!(LeaseConfig::new(""), Err(LeaseConfigError::NoIdentity));
}

proptest! {
    /// Three candidates on one clock, each acting at random moments (so some stall for long
    /// stretches), reads failing and answers lost at random: never two leaders at once; and
    /// once only one candidate keeps acting, it leads within the lease duration and two rounds.
    #[test]
    fn never_two_leaders(
        steps in proptest::collection::vec((0usize..3, 0u64..4_000, 0u8..10), 1..300),
    ) {
        let t0 = Instant::now();
        let mut api = FakeApi::default();
        let mut electors: Vec<Elector> =
            ["a", "b", "c"].iter().map(|n| Elector::new(config(n))).collect();
        let mut now = t0;
        for (who, advance, dice) in steps {
            now += Duration::from_millis(advance);
            let fail = match dice {
                0 => Fail::Read,
                1 => Fail::Answer,
                _ => Fail::None,
            };
            let wall = (now - t0).as_millis() as i64;
            round(&mut electors[who], &mut api, now, wall, fail);
            let leaders = electors.iter().filter(|e| e.is_leader(now)).count();
            prop_assert!(leaders <= 1, "{} leaders at {:?}", leaders, now - t0);
        }
        // From now on only "a" acts, every retry period, without failures.
        let deadline = now + Duration::from_millis(15_000 + 2 * 2_000);
        while now <= deadline && !electors[0].is_leader(now) {
            now += Duration::from_millis(2_000);
            let wall = (now - t0).as_millis() as i64;
            round(&mut electors[0], &mut api, now, wall, Fail::None);
            let leaders = electors.iter().filter(|e| e.is_leader(now)).count();
            prop_assert!(leaders <= 1);
        }
        prop_assert!(electors[0].is_leader(now), "a does not lead by {:?}", now - t0);
    }
}
