//! The synchronisation primitives of the event delivery protocol ([`crate::delivery`]) and the
//! direct path ([`crate::DirectSlot`]), in tokio's style: `std` (and tokio's `Notify`) in a
//! normal build, `loom`'s instrumented ones under `--cfg loom`, so that the models in
//! `tests/loom_*.rs` explore every interleaving of the real code.
//!
//! Only what the protocol needs lives here: a mutex and a read-write lock (both
//! poison-tolerant: every critical section leaves its data consistent before it can panic), and
//! `Notify` with the one pattern the protocol uses: `notified()` before checking, then `await`;
//! `notify_waiters()` after changing what was checked (tokio guarantees a `Notified` receives
//! `notify_waiters` from its creation on, polled or not).

#[cfg(not(loom))]
pub(crate) use std::sync::{Mutex, MutexGuard, RwLock};

#[cfg(loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard, RwLock};

#[cfg(not(loom))]
pub(crate) use tokio::sync::Notify;

#[cfg(loom)]
pub(crate) use self::loom_notify::Notify;

/// Locks `m`, recovering the data if a previous holder panicked.
pub(crate) fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Takes `l`'s read lock, recovering the data if a previous writer panicked.
#[cfg(not(loom))]
pub(crate) fn read<T: ?Sized>(l: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Takes `l`'s write lock, recovering the data if a previous holder panicked.
#[cfg(not(loom))]
pub(crate) fn write<T: ?Sized>(l: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Takes `l`'s read lock, recovering the data if a previous writer panicked.
#[cfg(loom)]
pub(crate) fn read<T: ?Sized>(l: &RwLock<T>) -> loom::sync::RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Takes `l`'s write lock, recovering the data if a previous holder panicked.
#[cfg(loom)]
pub(crate) fn write<T: ?Sized>(l: &RwLock<T>) -> loom::sync::RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// tokio's `Notify` is not instrumented outside tokio's own tests, so under loom the protocol
/// waits on this one: the subset of tokio's semantics it relies on, over loom's mutex.
#[cfg(loom)]
mod loom_notify {
    use super::{Mutex, lock};
    use std::future::Future;
    use std::pin::Pin;
    use std::task::{Context, Poll, Waker};

    /// `notify_waiters` completes every [`Notified`] created before it, whether or not it was
    /// polled yet (tokio's rule); it stores no permit for later ones.
    #[derive(Debug, Default)]
    pub(crate) struct Notify {
        state: Mutex<State>,
    }

    #[derive(Debug, Default)]
    struct State {
        /// How many times `notify_waiters` was called.
        calls: u64,
        wakers: Vec<Waker>,
    }

    impl Notify {
        pub(crate) fn new() -> Self {
            Self::default()
        }

        pub(crate) fn notified(&self) -> Notified<'_> {
            Notified {
                notify: self,
                calls: lock(&self.state).calls,
            }
        }

        pub(crate) fn notify_waiters(&self) {
            let wakers = {
                let mut st = lock(&self.state);
                st.calls += 1;
                std::mem::take(&mut st.wakers)
            };
            for w in wakers {
                w.wake();
            }
        }
    }

    /// A wait for the next `notify_waiters` after its creation.
    pub(crate) struct Notified<'a> {
        notify: &'a Notify,
        calls: u64,
    }

    impl Future for Notified<'_> {
        type Output = ();

        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            let mut st = lock(&self.notify.state);
            if st.calls != self.calls {
                return Poll::Ready(());
            }
            st.wakers.push(cx.waker().clone());
            Poll::Pending
        }
    }
}
