//! The pumps: framing, order and credit.

use super::*;
use crate::exchange::channel;
use std::sync::{Arc, Mutex};

/// Records the frames a send pump writes, and replays them to a receive pump.
#[derive(Clone, Default)]
struct Frames(Arc<Mutex<Vec<Vec<u8>>>>);

impl ByteSender for Frames {
    fn send(&mut self, bytes: Vec<u8>) -> BoxFuture<'_, Result<(), TransportError>> {
        self.0.lock().unwrap().push(bytes);
        Box::pin(async { Ok(()) })
    }
    fn close(self: Box<Self>) -> BoxFuture<'static, Result<(), TransportError>> {
        Box::pin(async { Ok(()) })
    }
}

impl ByteReceiver for Frames {
    fn recv(&mut self) -> BoxFuture<'_, Result<Option<Vec<u8>>, TransportError>> {
        let mut frames = self.0.lock().unwrap();
        let next = (!frames.is_empty()).then(|| frames.remove(0));
        Box::pin(async move { Ok(next) })
    }
}

/// A sender with real credit: `ready` and `send` wait for a permit of `credit`, and
/// `waiting` is told each time `ready` starts to wait.
struct Gated {
    frames: Frames,
    credit: Arc<tokio::sync::Semaphore>,
    waiting: Arc<tokio::sync::Notify>,
    held: bool,
}

impl ByteSender for Gated {
    fn ready(&mut self) -> BoxFuture<'_, Result<(), TransportError>> {
        Box::pin(async move {
            if !self.held {
                self.waiting.notify_one();
                self.credit.acquire().await.unwrap().forget();
                self.held = true;
            }
            Ok(())
        })
    }
    fn send(&mut self, bytes: Vec<u8>) -> BoxFuture<'_, Result<(), TransportError>> {
        Box::pin(async move {
            self.ready().await?;
            self.held = false;
            self.frames.0.lock().unwrap().push(bytes);
            Ok(())
        })
    }
    fn close(self: Box<Self>) -> BoxFuture<'static, Result<(), TransportError>> {
        Box::pin(async { Ok(()) })
    }
}

fn elements() -> Vec<StreamElement<u64>> {
    vec![
        StreamElement::records(vec![1, 2, 3]),
        StreamElement::Watermark(Watermark::new(10)),
        StreamElement::records(vec![4]),
        StreamElement::EndOfInput,
    ]
}

/// A send pump's opening of a [`Gated`] sender into `frames`, its credit, and the
/// notification of its waits.
fn gated(
    frames: &Frames,
) -> (
    OpenSender,
    Arc<tokio::sync::Semaphore>,
    Arc<tokio::sync::Notify>,
) {
    let credit = Arc::new(tokio::sync::Semaphore::new(0));
    let waiting = Arc::new(tokio::sync::Notify::new());
    let sender: Box<dyn ByteSender> = Box::new(Gated {
        frames: frames.clone(),
        credit: credit.clone(),
        waiting: waiting.clone(),
        held: false,
    });
    (Box::pin(async move { Ok(sender) }), credit, waiting)
}

/// What a receive pump makes of `frames`.
async fn replay(frames: &Frames) -> Vec<StreamElement<u64>> {
    // Room for every element: each takes at least one byte of a frame.
    let bytes: usize = frames.0.lock().unwrap().iter().map(Vec::len).sum();
    let (tx, mut rx) = channel::<u64>(bytes + 1);
    let receiver: Box<dyn ByteReceiver> = Box::new(frames.clone());
    let open: OpenReceiver = Box::pin(async move { Ok(receiver) });
    receive_pump(open, tx, "test".into()).await.unwrap();
    let mut got = Vec::new();
    while let Ok(e) = rx.try_recv() {
        got.push(e);
    }
    got
}

#[tokio::test]
async fn waiting_elements_share_a_frame_and_arrive_in_order() {
    let (tx, rx) = channel::<u64>(8);
    for e in elements() {
        tx.send(e).await.unwrap();
    }
    let frames = Frames::default();
    let sender: Box<dyn ByteSender> = Box::new(frames.clone());
    let open: OpenSender = Box::pin(async move { Ok(sender) });
    send_pump(rx, open, "test".into()).await.unwrap();
    // All four were waiting when the pump woke: one frame carries them.
    assert_eq!(frames.0.lock().unwrap().len(), 1);
    assert_eq!(replay(&frames).await, elements());
}

#[tokio::test]
async fn a_frame_waiting_for_credit_gathers_what_arrives_meanwhile() {
    let (tx, rx) = channel::<u64>(8);
    let frames = Frames::default();
    let (open, credit, waiting) = gated(&frames);
    let pump = tokio::spawn(send_pump(rx, open, "test".into()));
    let mut sent = elements().into_iter();
    tx.send(sent.next().unwrap()).await.unwrap();
    // The pump holds the first batch and waits for credit; the rest arrives meanwhile.
    waiting.notified().await;
    for e in sent {
        tx.send(e).await.unwrap();
    }
    // Let the pump take them all (it runs whenever this test yields; a pump that does not
    // gather while it waits never will), then grant credit.
    for _ in 0..1_000 {
        if tx.capacity() == tx.max_capacity() {
            break;
        }
        tokio::task::yield_now().await;
    }
    credit.add_permits(10);
    pump.await.unwrap().unwrap();
    assert_eq!(frames.0.lock().unwrap().len(), 1);
    assert_eq!(replay(&frames).await, elements());
}

/// What a test does next to a running send pump.
#[derive(Clone, Debug)]
enum Step {
    /// The producer sends a batch of this many records (or a watermark for 0).
    Produce(usize),
    /// The receiver grants this many credits.
    Grant(usize),
    /// Let the pump run.
    Yield,
}

fn step() -> impl proptest::strategy::Strategy<Value = Step> {
    use proptest::prelude::*;
    prop_oneof![
        4 => (0usize..3_000).prop_map(Step::Produce),
        2 => (1usize..4).prop_map(Step::Grant),
        2 => Just(Step::Yield),
    ]
}

proptest::proptest! {
    /// However the producer's elements and the receiver's credit interleave, the frames
    /// carry every element once, in order, each frame within its size bound, and never
    /// more frames than credits granted.
    #[test]
    fn frames_keep_every_element_in_order_under_any_credit(
        steps in proptest::collection::vec(step(), 1..60),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(async move {
                    let (tx, rx) = channel::<u64>(4);
            let frames = Frames::default();
            let (open, credit, _) = gated(&frames);
            let pump = tokio::spawn(send_pump(rx, open, "test".into()));
            let mut sent = Vec::new();
            let mut next = 0u64;
            let mut granted = 0;
            for step in steps {
                match step {
                    Step::Produce(n) => {
                        let e = if n == 0 {
                            StreamElement::Watermark(Watermark::new(next as i64))
                        } else {
                            next += n as u64;
                            StreamElement::records((next - n as u64..next).collect())
                        };
                        sent.push(e.clone());
                        // A full channel means the pump waits for credit: grant one.
                        while tx.try_send(e.clone()).is_err() {
                            credit.add_permits(1);
                            granted += 1;
                            tokio::task::yield_now().await;
                        }
                    }
                    Step::Grant(n) => {
                        credit.add_permits(n);
                        granted += n;
                    }
                    Step::Yield => tokio::task::yield_now().await,
                }
            }
            sent.push(StreamElement::EndOfInput);
            while tx.try_send(StreamElement::EndOfInput).is_err() {
                tokio::task::yield_now().await;
            }
            credit.add_permits(1_000);
            granted += 1_000;
            pump.await.unwrap().unwrap();

            let all = frames.0.lock().unwrap().clone();
            assert!(all.len() <= granted);
            // A batch of 3,000 records encodes to at most ~9 KiB.
            for f in &all {
                assert!(f.len() <= REMOTE_FRAME_BYTES + 16 * 1024, "{}", f.len());
            }
            assert_eq!(replay(&frames).await, sent);
        });
    }
}

#[tokio::test]
async fn a_task_is_done_once_its_send_pumps_delivered_everything() {
    let (tx, rx) = channel::<u64>(8);
    let frames = Frames::default();
    let (open, credit, waiting) = gated(&frames);
    // The task sends everything and ends at once; its pump still waits for credit.
    let task: BoxFuture<'static, Result<(), TaskError>> = Box::pin(async move {
        for e in elements() {
            tx.send(e).await.unwrap();
        }
        Ok(())
    });
    let run = tokio::spawn(run_with_pumps(
        task,
        vec![send_pump(rx, open, "test".into())],
        Vec::new(),
    ));
    waiting.notified().await;
    assert!(!run.is_finished());
    credit.add_permits(10);
    run.await.unwrap().unwrap();
    assert_eq!(replay(&frames).await, elements());
}

#[tokio::test]
async fn a_failing_receive_pump_fails_its_task() {
    let (tx, _rx) = channel::<u64>(8);
    // A channel that closes before the end of input.
    let receiver: Box<dyn ByteReceiver> = Box::new(Frames::default());
    let open: OpenReceiver = Box::pin(async move { Ok(receiver) });
    let task: BoxFuture<'static, Result<(), TaskError>> = Box::pin(std::future::pending());
    let result = run_with_pumps(
        task,
        Vec::new(),
        vec![receive_pump(open, tx, "edge 0".into())],
    )
    .await;
    assert!(matches!(result, Err(TaskError::PeerGone(m)) if m.contains("edge 0")));
}
