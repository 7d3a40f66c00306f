//! [`FutureSlab`]: a bounded set of in-flight user futures, one reusable slot per request.
//!
//! Each slot owns a pinned box and a waker, allocated the first time the slot is used and reused
//! for every later request, so a request costs no allocation beyond what its future itself does.
//! A slot's waker sets the slot's bit in a shared bitset and wakes the task; the operator then
//! polls exactly the woken slots. Polling is wrapped in `catch_unwind`, so a panicking user future
//! becomes an error naming its input rather than tearing down the task.

use futures::task::AtomicWaker;
use sluice_core::panic_message;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, Wake, Waker};

/// The result of polling one slot.
#[derive(Debug)]
pub(crate) enum Polled<T> {
    /// Still running; the slot's waker is registered.
    Pending,
    /// Finished; the slot's future was dropped.
    Ready(T),
    /// The future panicked with this message; it was dropped.
    Panicked(String),
    /// The slot holds no future.
    Empty,
}

struct Shared {
    woken: Box<[AtomicU64]>,
    task: AtomicWaker,
}

struct SlotWaker {
    slot: usize,
    shared: Arc<Shared>,
}

impl Wake for SlotWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let word = &self.shared.woken[self.slot / 64];
        word.fetch_or(1 << (self.slot % 64), Ordering::Release);
        self.shared.task.wake();
    }
}

/// Up to `capacity` futures, each in its own reusable slot.
pub(crate) struct FutureSlab<Fut> {
    futs: Vec<Pin<Box<Option<Fut>>>>,
    wakers: Vec<Waker>,
    free: Vec<usize>,
    capacity: usize,
    shared: Arc<Shared>,
}

impl<Fut: Future> FutureSlab<Fut> {
    /// An empty slab of `capacity` slots; slots are allocated on first use.
    pub(crate) fn new(capacity: usize) -> Self {
        let words = capacity.div_ceil(64).max(1);
        FutureSlab {
            futs: Vec::new(),
            wakers: Vec::new(),
            free: Vec::new(),
            capacity,
            shared: Arc::new(Shared {
                woken: (0..words).map(|_| AtomicU64::new(0)).collect(),
                task: AtomicWaker::new(),
            }),
        }
    }

    /// Takes a free slot, if any.
    #[inline(always)]
    pub(crate) fn acquire(&mut self) -> Option<usize> {
        if let Some(slot) = self.free.pop() {
            return Some(slot);
        }
        let slot = self.futs.len();
        if slot >= self.capacity {
            return None;
        }
        self.futs.push(Box::pin(None));
        self.wakers.push(Waker::from(Arc::new(SlotWaker {
            slot,
            shared: self.shared.clone(),
        })));
        Some(slot)
    }

    /// Gives back a slot taken with [`acquire`](Self::acquire); its future must be gone.
    #[inline(always)]
    pub(crate) fn release(&mut self, slot: usize) {
        debug_assert!(self.futs[slot].is_none());
        self.free.push(slot);
    }

    /// How many slots are free.
    #[inline(always)]
    pub(crate) fn free_slots(&self) -> usize {
        self.free.len() + (self.capacity - self.futs.len())
    }

    /// How many slots are taken.
    #[inline]
    pub(crate) fn occupied(&self) -> usize {
        self.capacity - self.free_slots()
    }

    /// Puts `fut` into `slot` (dropping what was there).
    #[inline(always)]
    pub(crate) fn start(&mut self, slot: usize, fut: Fut) {
        self.futs[slot].set(Some(fut));
    }

    /// Polls the future of `slot` with the slot's own waker.
    #[inline(always)]
    pub(crate) fn poll(&mut self, slot: usize) -> Polled<Fut::Output> {
        let mut cx = Context::from_waker(&self.wakers[slot]);
        let Some(fut) = self.futs[slot].as_mut().as_pin_mut() else {
            return Polled::Empty;
        };
        match catch_unwind(AssertUnwindSafe(|| fut.poll(&mut cx))) {
            Ok(Poll::Pending) => Polled::Pending,
            Ok(Poll::Ready(out)) => {
                self.futs[slot].set(None);
                Polled::Ready(out)
            }
            Err(payload) => {
                let message = panic_message(payload.as_ref());
                self.cancel(slot);
                Polled::Panicked(message)
            }
        }
    }

    /// Drops the future of `slot`, if any (a panic in its destructor is swallowed).
    pub(crate) fn cancel(&mut self, slot: usize) {
        let fut = &mut self.futs[slot];
        let _ = catch_unwind(AssertUnwindSafe(|| fut.set(None)));
    }

    /// Drops every future.
    pub(crate) fn cancel_all(&mut self) {
        for slot in 0..self.futs.len() {
            self.cancel(slot);
        }
    }

    /// Registers the task's waker, woken whenever any slot is.
    #[inline]
    pub(crate) fn register(&self, waker: &Waker) {
        self.shared.task.register(waker);
    }

    /// Appends the slots woken since the last call (in slot order) and resets them.
    #[inline]
    pub(crate) fn take_woken(&self, out: &mut Vec<usize>) {
        for (i, word) in self.shared.woken.iter().enumerate() {
            if word.load(Ordering::Relaxed) == 0 {
                continue;
            }
            let mut bits = word.swap(0, Ordering::Acquire);
            while bits != 0 {
                out.push(i * 64 + bits.trailing_zeros() as usize);
                bits &= bits - 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// A future that is pending until its flag is set, then ready with its value.
    struct Gate {
        open: Arc<AtomicUsize>,
        waker: Arc<std::sync::Mutex<Option<Waker>>>,
        value: u32,
    }

    impl Future for Gate {
        type Output = u32;
        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<u32> {
            if self.open.load(Ordering::SeqCst) > 0 {
                Poll::Ready(self.value)
            } else {
                *self.waker.lock().unwrap() = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }

    #[test]
    fn woken_slots_are_reported_once_and_slots_are_reused() {
        let mut slab: FutureSlab<Gate> = FutureSlab::new(70);
        let open = Arc::new(AtomicUsize::new(0));
        let mut wakers = Vec::new();
        let mut slots = Vec::new();
        for v in 0..70 {
            let w = Arc::new(std::sync::Mutex::new(None));
            let slot = slab.acquire().unwrap();
            slab.start(
                slot,
                Gate {
                    open: open.clone(),
                    waker: w.clone(),
                    value: v,
                },
            );
            assert!(matches!(slab.poll(slot), Polled::Pending));
            wakers.push(w);
            slots.push(slot);
        }
        assert_eq!(slab.acquire(), None);
        assert_eq!(slab.occupied(), 70);
        open.store(1, Ordering::SeqCst);
        for i in [3usize, 65] {
            wakers[i].lock().unwrap().take().unwrap().wake();
        }
        let mut woken = Vec::new();
        slab.take_woken(&mut woken);
        assert_eq!(woken, vec![slots[3], slots[65]]);
        woken.clear();
        slab.take_woken(&mut woken);
        assert!(woken.is_empty());
        assert!(matches!(slab.poll(slots[65]), Polled::Ready(65)));
        assert!(matches!(slab.poll(slots[65]), Polled::Empty));
        slab.release(slots[65]);
        assert_eq!(slab.free_slots(), 1);
        assert_eq!(slab.acquire(), Some(slots[65]));
    }

    #[test]
    fn a_panicking_future_is_reported_and_dropped() {
        let mut slab = FutureSlab::new(1);
        let slot = slab.acquire().unwrap();
        slab.start(slot, async { panic!("lookup exploded") });
        match slab.poll(slot) {
            Polled::Panicked(m) => assert_eq!(m, "lookup exploded"),
            other => panic!("expected a panic, got {other:?}"),
        }
        assert!(matches!(slab.poll(slot), Polled::Empty));
    }
}
