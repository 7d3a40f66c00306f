//! Lifecycle through real jobs: open and close around every call in a chain async -> map ->
//! async, the drain at end of input, and failures (errors and panics) naming the operator,
//! subtask and input.

use sluice_async_io::{AsyncFunction, AsyncWait, async_fn};
use sluice_runtime::prelude::*;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Event {
    Open(&'static str, usize),
    Invoke(&'static str, u64),
    Done(&'static str, u64),
    Close(&'static str),
}

/// Logs its lifecycle; each call takes `x % 7` ms.
#[derive(Clone)]
struct Logged {
    name: &'static str,
    log: Arc<Mutex<Vec<Event>>>,
}

impl AsyncFunction<u64> for Logged {
    type Out = u64;
    type Results = [u64; 1];

    fn open(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        self.log
            .lock()
            .unwrap()
            .push(Event::Open(self.name, ctx.subtask_index()));
        Ok(())
    }

    fn invoke(&self, x: u64) -> impl Future<Output = Result<[u64; 1], UserError>> + Send + use<> {
        let (name, log) = (self.name, self.log.clone());
        log.lock().unwrap().push(Event::Invoke(name, x));
        async move {
            tokio::time::sleep(Duration::from_millis(x % 7)).await;
            log.lock().unwrap().push(Event::Done(name, x));
            Ok([x])
        }
    }

    fn close(&mut self) -> Result<(), UserError> {
        self.log.lock().unwrap().push(Event::Close(self.name));
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn a_chain_async_map_async_opens_before_and_closes_after_every_call() {
    let env = StreamEnvironment::new();
    env.set_parallelism(1);
    let log = Arc::new(Mutex::new(Vec::new()));
    let first = Logged {
        name: "first",
        log: log.clone(),
    };
    let second = Logged {
        name: "second",
        log: log.clone(),
    };
    let a = AsyncWait::new(first)
        .capacity(4)
        .unordered()
        .apply(&env.from_iter(0u64..50))
        .unwrap();
    let b = AsyncWait::new(second)
        .capacity(3)
        .apply(&a.map(|x| x + 100))
        .unwrap();
    let out = b.collect();
    env.execute("chain").await.unwrap();
    let mut got = out.take();
    got.sort();
    assert_eq!(got, (100u64..150).collect::<Vec<_>>());

    let log = log.lock().unwrap().clone();
    let pos = |e: &Event| log.iter().position(|x| x == e).unwrap();
    let last = |pred: &dyn Fn(&Event) -> bool| log.iter().rposition(pred).unwrap();
    let first_call = log
        .iter()
        .position(|e| matches!(e, Event::Invoke(..)))
        .unwrap();
    for name in ["first", "second"] {
        assert_eq!(
            log.iter().filter(|e| **e == Event::Open(name, 0)).count(),
            1,
            "{name} opened once"
        );
        assert_eq!(
            log.iter().filter(|e| **e == Event::Close(name)).count(),
            1,
            "{name} closed once"
        );
        assert!(
            pos(&Event::Open(name, 0)) < first_call,
            "{name} opened after a call: {log:?}"
        );
        let last_done = last(&|e| matches!(e, Event::Done(n, _) if *n == name));
        assert!(
            pos(&Event::Close(name)) > last_done,
            "{name} closed before its last call completed: {log:?}"
        );
    }
    // The downstream function is closed only after the upstream drained completely.
    assert!(pos(&Event::Close("second")) > last(&|e| matches!(e, Event::Done("first", _))));
    let calls = |name| {
        log.iter()
            .filter(|e| matches!(e, Event::Invoke(n, _) if *n == name))
            .count()
    };
    assert_eq!((calls("first"), calls("second")), (50, 50));
}

#[tokio::test(start_paused = true)]
async fn end_of_input_drains_every_request_in_flight() {
    let env = StreamEnvironment::new();
    env.set_parallelism(2);
    let wait = AsyncWait::new(async_fn(|x: u64| async move {
        // Long requests, all still in flight when the input ends.
        tokio::time::sleep(Duration::from_secs(30 + x % 5)).await;
        Ok(vec![x, x])
    }))
    .capacity(200)
    .timeout(Duration::from_secs(60))
    .unordered();
    let metrics = wait.metrics();
    let out = wait.apply(&env.from_iter(0u64..300)).unwrap().collect();
    env.execute("drain").await.unwrap();
    let mut got = out.take();
    got.sort();
    let want: Vec<u64> = (0u64..300).flat_map(|x| [x, x]).collect();
    assert_eq!(got, want);
    let m = metrics.total();
    assert_eq!((m.completed, m.in_flight, m.timeouts), (300, 0, 0));
    assert!(m.latency.quantile(0.5) >= Duration::from_secs(30));
}

#[tokio::test(start_paused = true)]
async fn an_error_fails_the_job_naming_operator_subtask_and_input() {
    let env = StreamEnvironment::new();
    env.set_parallelism(2);
    AsyncWait::new(async_fn(|s: String| async move {
        if s == "bad-17" {
            Err("lookup refused".into())
        } else {
            Ok(Some(s.len()))
        }
    }))
    .name("enrich")
    .apply(&env.from_iter((0..20).map(|i| format!("bad-{i}"))))
    .unwrap()
    .collect();
    let err = env.execute("error").await.unwrap_err();
    let failure = err.task_failure().expect("a task failure");
    assert_eq!(failure.operator_name, "enrich");
    assert_eq!(
        failure.subtask, 1,
        "input 17 is in the second half: subtask 1"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("async function failed on input \"bad-17\" (attempt 1): lookup refused"),
        "{msg}"
    );
    assert!(msg.contains("subtask 1 of 2"), "{msg}");
}

#[tokio::test(start_paused = true)]
async fn a_panic_in_the_future_or_in_invoke_fails_the_job_naming_the_input() {
    for in_invoke in [false, true] {
        let env = StreamEnvironment::new();
        env.set_parallelism(1);
        let func = async_fn(move |x: u64| {
            if in_invoke && x == 3 {
                panic!("invoke blew up on {x}");
            }
            async move {
                tokio::time::sleep(Duration::from_millis(x)).await;
                if x == 3 {
                    panic!("future blew up on {x}");
                }
                Ok(Some(x))
            }
        });
        AsyncWait::new(func)
            .name("lookup")
            .apply(&env.from_iter(0u64..6))
            .unwrap()
            .collect();
        let msg = env.execute("panic").await.unwrap_err().to_string();
        let what = if in_invoke { "invoke" } else { "future" };
        assert!(msg.contains("'lookup'"), "{msg}");
        assert!(msg.contains("subtask 0 of 1"), "{msg}");
        assert!(
            msg.contains(&format!(
                "async function panicked on input 3 (attempt 1): {what} blew up on 3"
            )),
            "{msg}"
        );
    }
}
