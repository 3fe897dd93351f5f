//! Blocking and async waiting for tokens, and waking only as many waiters
//! as new tokens can admit.
//!
//! # Implementation notes
//!
//! Two kinds of waiter share one queue:
//!
//! - *Sleepers* (plain blocking acquires) sleep on a futex word, `epoch`,
//!   which every notification bumps. `sleepers` counts threads between
//!   [`WaitQueue::begin_sleep`] and [`WaitQueue::end_sleep`].
//! - *Parked* waiters (acquires with a deadline, and futures) sit in a FIFO
//!   list as a `Waker` (for a thread, one that unparks it); `parked` counts
//!   them.
//!
//! A waiter registers (a store), then re-checks for tokens (loads), then
//! sleeps; a notifier adds tokens and bumps `epoch` (stores), then reads the
//! counts (a load). Each side puts a `SeqCst` fence between its store and
//! its load, so of the two fences one comes first in the single total
//! order: either the notifier sees the registration (and wakes the waiter)
//! or the waiter's re-check sees the tokens and the new epoch (a futex wait
//! on a stale epoch returns at once). This is the store-load (Dekker)
//! pattern; without the fences a wake-up could be lost. Fences rather than
//! `SeqCst` accesses alone, because fences are what loom models exactly.
//!
//! [`WaitQueue::notify`] wakes at most `n` waiters, where the caller passes
//! how many single ops the available tokens can admit, and at most four
//! per core: each woken caller takes a chunk of ops, so more would mostly
//! wake to find nothing. A woken waiter that succeeds and still sees tokens
//! and waiters wakes one more, so the wake-up chains on to the others, and
//! a wake never gets stuck on a waiter that lost the race.

use std::collections::VecDeque;
use std::task::Waker;

use crate::sync::{fence, lock, AtomicU32, Futex, Mutex, Ordering::SeqCst};

/// The waiters of one limiter.
#[derive(Debug)]
pub(crate) struct WaitQueue {
    /// Futex word: bumped (wrapping) by every notification.
    epoch: Futex,
    /// Threads registered to sleep on `epoch`.
    sleepers: AtomicU32,
    /// Entries in `list`, readable without the lock.
    parked: AtomicU32,
    /// Parked waiters in arrival order, by id.
    list: Mutex<VecDeque<(u64, Waker)>>,
    /// Source of parked-waiter ids (under `list`'s lock).
    next_id: Mutex<u64>,
    /// The most waiters one notification wakes: four per core.
    max_wake: u64,
}

impl WaitQueue {
    pub(crate) fn new() -> WaitQueue {
        WaitQueue {
            epoch: Futex::new(0),
            sleepers: AtomicU32::new(0),
            parked: AtomicU32::new(0),
            list: Mutex::new(VecDeque::new()),
            next_id: Mutex::new(0),
            max_wake: 4 * std::thread::available_parallelism().map_or(2, |n| n.get() as u64),
        }
    }

    /// Whether anyone waits (sleeping or parked).
    /// Callers that need the store-load guarantee fence before calling.
    pub(crate) fn has_waiters(&self) -> bool {
        // SeqCst: ordered with the registrations in `begin_sleep`/`park`
        // by the callers' fences (see the module notes).
        self.sleepers.load(SeqCst) > 0 || self.parked.load(SeqCst) > 0
    }

    /// Registers the current thread as a sleeper; returns the epoch to pass
    /// to [`WaitQueue::sleep`]. Re-check for tokens after this call.
    pub(crate) fn begin_sleep(&self) -> u32 {
        // SeqCst: the store side of the store-load pattern; pairs with the
        // notifier's `epoch` bump and `sleepers` load.
        self.sleepers.fetch_add(1, SeqCst);
        // SeqCst fence: orders the registration before the re-check; pairs
        // with the fence in `notify` (module notes).
        fence(SeqCst);
        self.epoch.word().load(SeqCst)
    }

    /// Sleeps until a notification after `epoch` (or spuriously).
    pub(crate) fn sleep(&self, epoch: u32) {
        self.epoch.wait(epoch);
    }

    /// Ends a registration made by [`WaitQueue::begin_sleep`].
    pub(crate) fn end_sleep(&self) {
        // SeqCst: keeps the count in the same total order as its readers.
        let before = self.sleepers.fetch_sub(1, SeqCst);
        if before == 0 {
            panic!("wait queue: more sleepers ended than began");
        }
    }

    /// A fresh id for a parked waiter.
    pub(crate) fn new_id(&self) -> u64 {
        let mut next = lock(&self.next_id);
        *next += 1;
        *next
    }

    /// Adds (or replaces) a parked waiter. Re-check for tokens after this call.
    pub(crate) fn park(&self, id: u64, waker: &Waker) {
        let mut list = lock(&self.list);
        if let Some(entry) = list.iter_mut().find(|(entry, _)| *entry == id) {
            entry.1.clone_from(waker);
            return;
        }
        list.push_back((id, waker.clone()));
        // SeqCst: the store side of the store-load pattern, as in `begin_sleep`.
        self.parked.fetch_add(1, SeqCst);
        drop(list);
        // SeqCst fence: orders the registration before the caller's re-check;
        // pairs with the fence in `notify`.
        fence(SeqCst);
    }

    /// Removes a parked waiter; `false` if a notification already took it.
    pub(crate) fn unpark(&self, id: u64) -> bool {
        let mut list = lock(&self.list);
        match list.iter().position(|(entry, _)| *entry == id) {
            Some(at) => {
                list.remove(at);
                // SeqCst: as in `park`.
                self.parked.fetch_sub(1, SeqCst);
                true
            }
            None => false,
        }
    }

    /// Call after adding tokens that admit `n` single ops: wakes at most
    /// `n` waiters, and at most four per core (sleepers first, then parked
    /// ones in arrival order).
    pub(crate) fn notify(&self, n: u64) {
        self.wake(n.min(self.max_wake));
    }

    /// Wakes everyone (used when the limiter's state changes wholesale).
    pub(crate) fn notify_all(&self) {
        self.wake(u64::MAX);
    }

    fn wake(&self, n: u64) {
        // SeqCst: the bump publishes the tokens added before it and is the
        // store side the waiters' `begin_sleep` load pairs with.
        self.epoch.word().fetch_add(1, SeqCst);
        if n == 0 {
            return;
        }
        // SeqCst fence: orders the tokens and the bump before reading the
        // counts; pairs with the fences in `begin_sleep` and `park`.
        fence(SeqCst);
        // SeqCst: the load side of the store-load pattern.
        let sleepers = u64::from(self.sleepers.load(SeqCst));
        let mut left = n;
        if sleepers > 0 {
            if n >= sleepers {
                self.epoch.wake_all();
                left -= sleepers;
            } else {
                for _ in 0..n {
                    self.epoch.wake_one();
                }
                left = 0;
            }
        }
        // SeqCst: as for `sleepers`.
        if left > 0 && self.parked.load(SeqCst) > 0 {
            let mut list = lock(&self.list);
            while left > 0 {
                let Some((_, waker)) = list.pop_front() else {
                    break;
                };
                // SeqCst: as in `park`.
                self.parked.fetch_sub(1, SeqCst);
                waker.wake();
                left -= 1;
            }
        }
    }
}
