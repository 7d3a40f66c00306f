//! The election loop against the in-memory lease store on tokio's paused clock: takeover by
//! a standby, loss at the renew deadline (also when calls hang), release, and no two
//! leaders under random schedules of faults, holds and releases.

use super::*;
use crate::fake::{FakeLeaseApi, FakeLeaseStore, Fault};
use proptest::prelude::*;
use std::sync::Mutex;

const S: fn(u64) -> Duration = Duration::from_secs;

/// client-go's defaults: lease 15 s, renew deadline 10 s, retry 2 s.
fn election(store: &FakeLeaseStore, name: &str) -> (LeaderElection<FakeLeaseApi>, FakeLeaseApi) {
    let client = store.client();
    let config = LeaseConfig::new(name).unwrap();
    (LeaderElection::new(client.clone(), config), client)
}

fn holder(store: &FakeLeaseStore) -> Option<String> {
    store.lease().and_then(|(record, _)| record.holder)
}

#[tokio::test(start_paused = true)]
async fn the_first_candidate_creates_the_lease_and_leads_at_once() {
    let store = FakeLeaseStore::default();
    let (a, _) = election(&store, "a");
    let t0 = Instant::now();
    let leadership = a.acquire().await;
    assert_eq!(Instant::now(), t0);
    assert!(leadership.is_leading());
    assert_eq!(leadership.identity(), "a");
    assert_eq!(leadership.transitions(), 0);
    assert_eq!(holder(&store).as_deref(), Some("a"));
    // It keeps renewing: one write per retry period.
    tokio::time::sleep(S(19)).await;
    assert!(leadership.is_leading());
    assert_eq!(store.writes(), 10);
}

#[tokio::test(start_paused = true)]
async fn a_partitioned_leader_loses_at_its_renew_deadline_and_the_standby_takes_over_after() {
    let store = FakeLeaseStore::default();
    let (a, a_client) = election(&store, "a");
    let (b, _) = election(&store, "b");
    let t0 = Instant::now();
    let leading_a = a.acquire().await;
    let standby = tokio::spawn(async move {
        let leadership = b.acquire().await;
        (Instant::now(), leadership)
    });
    // Renewals at 2 and 4 s succeed; from 5 s on the API server is out of reach.
    tokio::time::sleep(S(5)).await;
    a_client.set_fault(Fault::Unreachable);
    leading_a.lost().await;
    let lost_at = Instant::now() - t0;
    assert_eq!(lost_at, S(4 + 10), "the renew deadline of the last renewal");
    assert!(!leading_a.is_leading());
    let (b_at, leading_b) = standby.await.unwrap();
    let b_at = b_at - t0;
    // b saw the last change at 4 s at the latest, and waits the lease duration from then,
    // plus at most a retry period to its next read.
    assert!(
        b_at >= S(4 + 15) && b_at <= S(4 + 15 + 2),
        "b took over at {b_at:?}"
    );
    assert!(b_at > lost_at);
    assert!(leading_b.is_leading());
    assert_eq!(leading_b.transitions(), leading_a.transitions() + 1);
    let (record, _) = store.lease().unwrap();
    assert_eq!(record.holder.as_deref(), Some("b"));
    assert_eq!(record.transitions, 1);
}

#[tokio::test(start_paused = true)]
async fn hanging_calls_do_not_stretch_the_term() {
    let store = FakeLeaseStore::default();
    let (a, a_client) = election(&store, "a");
    let t0 = Instant::now();
    let leadership = a.acquire().await;
    tokio::time::sleep(S(5)).await;
    a_client.set_fault(Fault::Hang);
    leadership.lost().await;
    assert_eq!(Instant::now() - t0, S(14));
    // A later answer does not bring it back.
    a_client.set_fault(Fault::None);
    tokio::time::sleep(S(10)).await;
    assert!(!leadership.is_leading());
    leadership.lost().await;
}

#[tokio::test(start_paused = true)]
async fn a_dropped_leadership_stops_renewing_and_a_standby_waits_out_the_lease() {
    let store = FakeLeaseStore::default();
    let (a, _) = election(&store, "a");
    let (b, _) = election(&store, "b");
    let t0 = Instant::now();
    let leading_a = a.acquire().await;
    let standby = tokio::spawn(async move {
        let leadership = b.acquire().await;
        (Instant::now(), leadership)
    });
    tokio::time::sleep(S(5)).await;
    drop(leading_a);
    let writes = store.writes();
    let (b_at, _leading_b) = standby.await.unwrap();
    let b_at = b_at - t0;
    assert!(b_at >= S(19) && b_at <= S(21), "b took over at {b_at:?}");
    // Nothing was written between the drop and b's takeover.
    assert_eq!(store.writes(), writes + 1);
}

#[tokio::test(start_paused = true)]
async fn a_released_lease_is_taken_at_the_standbys_next_read() {
    let store = FakeLeaseStore::default();
    let (a, _) = election(&store, "a");
    let (b, _) = election(&store, "b");
    let t0 = Instant::now();
    let leading_a = a.acquire().await;
    let standby = tokio::spawn(async move {
        let leadership = b.acquire().await;
        (Instant::now(), leadership)
    });
    tokio::time::sleep(S(5)).await;
    leading_a.release().await.unwrap();
    assert_eq!(holder(&store), None);
    let (b_at, _leading_b) = standby.await.unwrap();
    assert_eq!(b_at - t0, S(6), "b's next read after the release");
}

#[tokio::test(start_paused = true)]
async fn a_leader_whose_lease_is_taken_loses_at_its_next_read() {
    let store = FakeLeaseStore::default();
    let (a, _) = election(&store, "a");
    let t0 = Instant::now();
    let leadership = a.acquire().await;
    // Someone (an operator, kubectl) rewrites the lease to another holder.
    tokio::time::sleep(S(3)).await;
    let (record, version) = store.lease().unwrap();
    let intruder = LeaseRecord {
        holder: Some("x".into()),
        ..record
    };
    store.client().replace(&version, &intruder).await.unwrap();
    leadership.lost().await;
    assert_eq!(Instant::now() - t0, S(4));
}

#[tokio::test(start_paused = true)]
async fn lost_answers_to_applied_writes_do_not_make_two_leaders() {
    let store = FakeLeaseStore::default();
    let (a, a_client) = election(&store, "a");
    let (b, _) = election(&store, "b");
    // a's first write (the create) lands but a never hears of it.
    a_client.set_fault(Fault::LoseAnswers);
    let candidate_a = tokio::spawn(async move { (a.acquire().await, Instant::now()) });
    tokio::time::sleep(S(1)).await;
    assert_eq!(holder(&store).as_deref(), Some("a"));
    a_client.set_fault(Fault::None);
    let candidate_b = tokio::spawn(async move { (b.acquire().await, Instant::now()) });
    // a reads its own record next round and renews it: it leads, b waits.
    let (leading_a, _) = candidate_a.await.unwrap();
    tokio::time::sleep(S(30)).await;
    assert!(leading_a.is_leading());
    assert!(!candidate_b.is_finished());
    drop(leading_a);
    let (leading_b, _) = candidate_b.await.unwrap();
    assert!(leading_b.is_leading());
}

#[tokio::test(start_paused = true)]
async fn releasing_a_lease_someone_else_took_writes_nothing() {
    let store = FakeLeaseStore::default();
    let (a, a_client) = election(&store, "a");
    let leadership = a.acquire().await;
    // a is cut off; at its deadline it has lost, and b takes the lease afterwards.
    a_client.set_fault(Fault::Unreachable);
    leadership.lost().await;
    let (b, _) = election(&store, "b");
    let _leading_b = b.acquire().await;
    a_client.set_fault(Fault::None);
    let writes = store.writes();
    leadership.release().await.unwrap();
    assert_eq!(store.writes(), writes);
    assert_eq!(holder(&store).as_deref(), Some("b"));
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_acquire_leaves_nothing_running() {
    let store = FakeLeaseStore::default();
    let (a, _) = election(&store, "a");
    let (b, _) = election(&store, "b");
    let leading_a = a.acquire().await;
    let standby = tokio::spawn(async move { b.acquire().await });
    tokio::time::sleep(S(5)).await;
    standby.abort();
    drop(leading_a);
    let writes = store.writes();
    tokio::time::sleep(S(120)).await;
    assert_eq!(store.writes(), writes, "nobody competes any more");
    assert_eq!(holder(&store).as_deref(), Some("a"));
}

use sluice_cluster::lease::LeaseRecord;

/// One candidate's behaviour in a random schedule: how long it holds each term (unless it
/// loses it first), whether it then releases or just drops it, and how long it pauses
/// before competing again.
#[derive(Clone, Debug)]
struct Turn {
    hold_ms: u64,
    release: bool,
    pause_ms: u64,
}

fn turn() -> impl Strategy<Value = Turn> {
    (1_000u64..40_000, any::<bool>(), 0u64..5_000).prop_map(|(hold_ms, release, pause_ms)| Turn {
        hold_ms,
        release,
        pause_ms,
    })
}

fn fault() -> impl Strategy<Value = Fault> {
    prop_oneof![
        3 => Just(Fault::None),
        2 => Just(Fault::Unreachable),
        1 => Just(Fault::Hang),
        1 => Just(Fault::LoseAnswers),
        1 => (1u64..5_000).prop_map(|ms| Fault::Slow(Duration::from_millis(ms))),
        1 => (1u64..5_000).prop_map(|ms| Fault::Late(Duration::from_millis(ms))),
    ]
}

const CANDIDATES: usize = 3;
const FAULTS_UNTIL_MS: u64 = 200_000;
const RUN_MS: u64 = 300_000;

/// A term: who, from when it was acquired, until it was lost, released or dropped, and the
/// lease's transitions when it was acquired.
type Term = (usize, Instant, Option<Instant>, u32);

async fn run_schedule(
    turns: Vec<Vec<Turn>>,
    faults: Vec<(u64, usize, Fault)>,
) -> (Instant, Vec<Term>) {
    let store = FakeLeaseStore::default();
    let terms: Arc<Mutex<Vec<Term>>> = Arc::default();
    let start = Instant::now();
    let mut clients = Vec::new();
    let mut drivers = Vec::new();
    for (id, turns) in turns.into_iter().enumerate() {
        let (election, client) = election(&store, &format!("c{id}"));
        clients.push(client);
        let terms = Arc::clone(&terms);
        drivers.push(tokio::spawn(async move {
            for turn in turns.iter().cycle() {
                let leadership = election.acquire().await;
                let index = {
                    let mut terms = terms.lock().unwrap();
                    terms.push((id, Instant::now(), None, leadership.transitions()));
                    terms.len() - 1
                };
                let held = tokio::select! {
                    () = leadership.lost() => None,
                    () = tokio::time::sleep(Duration::from_millis(turn.hold_ms)) => Some(leadership),
                };
                if let Some(leadership) = held {
                    // The term ends when the process stops counting itself leader: before it
                    // writes the release.
                    terms.lock().unwrap()[index].2 = Some(Instant::now());
                    if turn.release {
                        let _ = leadership.release().await;
                    }
                } else {
                    terms.lock().unwrap()[index].2 = Some(Instant::now());
                }
                tokio::time::sleep(Duration::from_millis(turn.pause_ms)).await;
            }
        }));
    }
    let mut faults = faults;
    faults.sort_by_key(|(at, _, _)| *at);
    for (at, who, fault) in faults {
        tokio::time::sleep_until(start + Duration::from_millis(at)).await;
        clients[who].set_fault(fault);
    }
    tokio::time::sleep_until(start + Duration::from_millis(FAULTS_UNTIL_MS)).await;
    for client in &clients {
        client.set_fault(Fault::None);
    }
    tokio::time::sleep_until(start + Duration::from_millis(RUN_MS)).await;
    for driver in &drivers {
        driver.abort();
    }
    let terms = terms.lock().unwrap().clone();
    (start + Duration::from_millis(RUN_MS), terms)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Whatever the faults, holds and releases, no two candidates' terms overlap, and once
    /// the faults stop someone leads again.
    #[test]
    fn two_candidates_never_lead_at_once(
        turns in proptest::collection::vec(proptest::collection::vec(turn(), 1..6), CANDIDATES),
        faults in proptest::collection::vec((0..FAULTS_UNTIL_MS, 0..CANDIDATES, fault()), 0..40),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        let (end, terms) = runtime.block_on(run_schedule(turns, faults));
        for (i, (who_i, from_i, to_i, _)) in terms.iter().enumerate() {
            for (who_j, from_j, to_j, _) in &terms[i + 1..] {
                if who_i == who_j {
                    continue;
                }
                let to_i = to_i.unwrap_or(end);
                let to_j = to_j.unwrap_or(end);
                prop_assert!(
                    !(*from_i < to_j && *from_j < to_i),
                    "c{} and c{} both led: {:?}..{:?} and {:?}..{:?}",
                    who_i, who_j, from_i, to_i, from_j, to_j
                );
            }
        }
        let led_late = terms
            .iter()
            .any(|(_, _, to, _)| to.is_none_or(|to| to > end - Duration::from_secs(30)));
        prop_assert!(led_late, "nobody led in the last 30 s without faults: {terms:?}");
        // A new holder's transitions exceed its predecessor's: usable as a fencing epoch.
        for pair in terms.windows(2) {
            let ((before, _, _, t_before), (after, _, _, t_after)) = (pair[0], pair[1]);
            if before != after {
                prop_assert!(t_after > t_before, "c{after} took over from c{before} at transitions {t_after} <= {t_before}");
            }
        }
    }
}
