//! The waiters of one limiter: a FIFO queue of per-waiter nodes, served by
//! direct hand-off.
//!
//! # Implementation notes
//!
//! Every blocked acquire, sync or async, is one [`Waiter`] node in one FIFO
//! queue behind a mutex. A node has its own state word and its own way to
//! be woken: the parked thread (`Thread::unpark`) or the task's `Waker`.
//! No waiter sleeps on a word another waiter's wake touches, so there is no
//! herd and no futile wake-up.
//!
//! Hand-off: whoever adds tokens to the pool (a fill, a return, a cancelled
//! waiter) then *serves* the queue: under the queue lock it takes each
//! front node's tokens out of the pool for it, marks the node `GRANTED`,
//! and wakes it after the lock is released. A woken waiter therefore
//! always finds its tokens: they are already its own. Serving stops at the
//! first node the pool cannot satisfy, so order is strictly FIFO among
//! waiters (an acquire that never waits may still take tokens ahead of
//! them on the lock-free fast path, bounded by what fills leave after
//! serving the queue, since fills serve the queue first).
//!
//! Batching: a served node may also be handed up to `batch` tokens beyond
//! its need, so that one wake-up admits many ops, which is what makes
//! waiting cheap at high rates; the cost is that the ops of one fill start
//! in bursts (all within that fill, which the pool's semantics allow), so
//! later nodes wait up to one more fill. A woken thread keeps them in its
//! budget (budget.rs), which its next acquire spends and which goes back
//! when the thread exits. A woken task cannot: the next acquire on its
//! worker thread may be another task's, or never come. It leaves them in
//! the pool, in its thread's home slice, where its own next acquire (a task
//! acquiring in a loop goes on in the same poll) takes them first, and then
//! *nudges* the queue: the front task is woken without a grant and, when
//! polled, serves the queue from what the pool holds (`serve_for`). After
//! a looping task it finds nothing and waits on: one extra poll per fill.
//! After a task that took one op and ended, it takes the rest and leaves
//! what it does not need in turn, so no token waits where no queued waiter
//! looks. A front thread, which need not defer to anyone's loop, is served
//! at once. A task that queued again after spending the hand-off its
//! thread last left for it acquires in a loop: its grants nudge no one,
//! so each fill wakes one task, and if it stops, what it leaves waits in
//! the pool for the next fill, which serves the queue from the whole pool
//! even when it adds nothing.
//!
//! The head: the front node is flagged `head` when it reaches the front
//! (and a parked thread is unparked once to learn it). A head thread
//! sleeps with a timeout: only until the next fill is due, then fills by
//! itself if the filler thread is late (core.rs), so a descheduled filler
//! never turns elapsed time into backlog while callers sleep.
//!
//! Lost wake-ups: a waiter pushes its node and increments `queued`, then
//! (still under the lock, after a `SeqCst` fence) serves the queue itself,
//! which re-checks the pool. A notifier adds tokens, fences, then reads
//! `queued` and serves (or nudges) only if it is non-zero. Of the two
//! fences one comes first in the single total order: either the notifier
//! sees the node, or the waiter's own serve sees the tokens (the
//! store-load pattern). A nudged task sees the tokens that were left
//! before the nudge: its wake-up orders them before its poll.
//!
//! Cancellation (a timeout, a dropped future) takes the lock: a node still
//! `WAITING` becomes `CANCELLED` and gives back what a large request had
//! gathered; a node already `GRANTED` reports what it was handed, which
//! the caller keeps (a timed wait that was granted just succeeded) or
//! returns (a dropped future). Cancelled nodes are skipped by the next
//! serve and compacted away when they are the majority: memory stays
//! bounded by twice the live waiters.

use std::collections::VecDeque;
use std::task::Waker;

use crate::sync::{
    fence, lock, AtomicBool, AtomicU32, AtomicU64, Mutex,
    Ordering::{Acquire, Relaxed, Release, SeqCst},
    Thread,
};

/// Node state: queued, nothing handed yet.
const WAITING: u32 = 0;
/// Final: the tokens (`need` plus `extra`) are the waiter's.
const GRANTED: u32 = 1;
/// Final: the waiter left; the node is skipped.
const CANCELLED: u32 = 2;

/// Where the queue takes tokens from: the limiter's active pool.
pub(crate) trait Source {
    /// Takes exactly `need` tokens if the pool holds them; on `false`
    /// nothing was taken.
    fn take_exact(&self, need: u64) -> bool;
    /// Takes up to `max` tokens; returns how many.
    fn take_up_to(&self, max: u64) -> u64;
    /// Takes up to `max` tokens for a hand-off, in whole ops only: a
    /// fraction of an op kept in a thread's budget could start no op there,
    /// and would sit idle, counted as admitted, until that thread's next
    /// grant.
    fn take_handoff(&self, max: u64) -> u64;
    /// Puts tokens back without serving the queue (the caller serves).
    fn put_raw(&self, tokens: u64);
    /// Counts tokens gathered by, or released from, large requests.
    fn in_flight(&self, add: u64, sub: u64);
    /// The queue's head no longer times the fills: a parked thread left the
    /// front and a task, which cannot time itself, took its place. Called
    /// after the queue lock is released.
    fn head_untimed(&self);
}

/// How a waiter is woken.
#[derive(Debug)]
enum Wake {
    /// A parked thread.
    Thread(Thread),
    /// A task; the lock is this node's own, never shared between waiters.
    Task(Mutex<Option<Waker>>),
}

/// One blocked acquire.
#[derive(Debug)]
pub(crate) struct Waiter {
    /// `WAITING`, then `GRANTED` or `CANCELLED`, each set once, under the
    /// queue lock.
    state: AtomicU32,
    /// Tokens the acquire needs.
    need: u64,
    /// Whether it gathers tokens as they come (larger than the active pool).
    partial: bool,
    /// Tokens a partial request has gathered (written under the queue lock).
    held: AtomicU64,
    /// Tokens handed beyond `need`; written before `GRANTED` is published.
    extra: AtomicU64,
    /// Set once the node reaches the front of the queue.
    head: AtomicBool,
    wake: Wake,
}

impl Waiter {
    /// A node for the current thread.
    pub(crate) fn thread(need: u64, partial: bool, held: u64, thread: Thread) -> Waiter {
        Waiter::new(need, partial, held, Wake::Thread(thread))
    }

    /// A node for a task.
    pub(crate) fn task(need: u64, partial: bool, held: u64, waker: Waker) -> Waiter {
        Waiter::new(need, partial, held, Wake::Task(Mutex::new(Some(waker))))
    }

    fn new(need: u64, partial: bool, held: u64, wake: Wake) -> Waiter {
        Waiter {
            state: AtomicU32::new(WAITING),
            need,
            partial,
            held: AtomicU64::new(held),
            extra: AtomicU64::new(0),
            head: AtomicBool::new(false),
            wake,
        }
    }

    /// The tokens handed beyond the need, once granted; `None` before.
    pub(crate) fn granted(&self) -> Option<u64> {
        // Acquire: pairs with the Release store of GRANTED in `serve_locked`,
        // so `extra` written before it is visible.
        match self.state.load(Acquire) {
            GRANTED => Some(self.extra.load(Relaxed)),
            WAITING | CANCELLED => None,
            other => panic!("wait queue: impossible node state {other}"),
        }
    }

    /// Whether the node is (or was) at the front of the queue.
    pub(crate) fn is_head(&self) -> bool {
        // Relaxed: a hint for how long to sleep; a stale value only makes
        // the waiter sleep without a timeout until its next wake.
        self.head.load(Relaxed)
    }

    /// The tokens the acquire needs.
    pub(crate) fn need(&self) -> u64 {
        self.need
    }

    /// Whether a pool holding `available` tokens could serve this node
    /// now: all its need, or for a partial request any token.
    pub(crate) fn could_take(&self, available: u64) -> bool {
        if self.partial {
            available > 0
        } else {
            available >= self.need
        }
    }

    /// Replaces a task's waker (a later poll may come from another task
    /// context). Re-check [`Waiter::granted`] afterwards.
    pub(crate) fn set_waker(&self, waker: &Waker) {
        if let Wake::Task(slot) = &self.wake {
            let mut slot = lock(slot);
            match &mut *slot {
                Some(current) if current.will_wake(waker) => {}
                other => *other = Some(waker.clone()),
            }
        }
    }

    fn wake(&self) {
        match &self.wake {
            Wake::Thread(thread) => thread.unpark(),
            Wake::Task(slot) => {
                let waker = lock(slot).take();
                if let Some(waker) = waker {
                    waker.wake();
                }
            }
        }
    }
}

/// What [`WaitQueue::cancel`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cancel {
    /// The node left the queue; anything it had gathered is back in the pool.
    Left,
    /// The node had been granted: its `need` plus this many tokens are the
    /// caller's to keep or return.
    Granted(u64),
}

#[derive(Debug, Default)]
struct Inner {
    nodes: VecDeque<std::sync::Arc<Waiter>>,
    /// `CANCELLED` nodes still in `nodes`.
    cancelled: usize,
}

impl Inner {
    /// Drops the cancelled nodes at the front, so that the front, if any,
    /// is `WAITING`.
    fn pop_cancelled_front(&mut self) {
        while let Some(front) = self.nodes.front() {
            // Relaxed: every state change happens under the queue lock.
            match front.state.load(Relaxed) {
                WAITING => return,
                CANCELLED => {
                    self.nodes.pop_front();
                    self.cancelled -= 1;
                }
                other => panic!("wait queue: node in state {other} still queued"),
            }
        }
    }
}

/// Wakes what a serve granted (but `except`, a waiter that is running),
/// after the queue lock is released, and tells the source if the head
/// stopped timing the fills.
fn wake_served(
    (woken, untimed): (Vec<std::sync::Arc<Waiter>>, bool),
    except: Option<&std::sync::Arc<Waiter>>,
    source: &impl Source,
) {
    for waiter in woken {
        if !except.is_some_and(|node| std::sync::Arc::ptr_eq(&waiter, node)) {
            waiter.wake();
        }
    }
    if untimed {
        source.head_untimed();
    }
}

/// The waiters of one limiter.
#[derive(Debug, Default)]
pub(crate) struct WaitQueue {
    /// `WAITING` nodes in the queue, readable without the lock (the
    /// store-load pattern of the module notes).
    queued: AtomicU64,
    /// Whether the front node is a parked thread, which times the next fill
    /// itself (so the filler thread can stand back).
    timed_head: AtomicBool,
    inner: Mutex<Inner>,
}

impl WaitQueue {
    pub(crate) fn new() -> WaitQueue {
        WaitQueue::default()
    }

    /// Whether anyone waits. Callers that need the store-load guarantee
    /// fence before calling.
    pub(crate) fn has_waiters(&self) -> bool {
        // SeqCst: the load side of the store-load pattern (module notes).
        self.queued.load(SeqCst) > 0
    }

    /// Whether a parked thread heads the queue and times the fills.
    pub(crate) fn has_timed_head(&self) -> bool {
        // Relaxed: a hint for the filler thread's sleep; the head fills by
        // itself whatever the filler does.
        self.timed_head.load(Relaxed)
    }

    /// Queues `node` and serves the queue (which may grant `node` at once:
    /// check [`Waiter::granted`]).
    pub(crate) fn enqueue(&self, node: &std::sync::Arc<Waiter>, source: &impl Source, batch: u64) {
        let mut inner = lock(&self.inner);
        inner.nodes.push_back(std::sync::Arc::clone(node));
        // SeqCst: the store side of the store-load pattern.
        self.queued.fetch_add(1, SeqCst);
        // SeqCst fence: orders the registration before the re-check of the
        // pool in `serve_locked`; pairs with the fence in `serve`.
        fence(SeqCst);
        let served = self.serve_locked(&mut inner, source, batch);
        drop(inner);
        wake_served(served, Some(node), source);
    }

    /// Hands tokens to waiters in queue order and wakes them. Call after
    /// adding tokens to the pool.
    pub(crate) fn serve(&self, source: &impl Source, batch: u64) {
        // SeqCst fence: orders the tokens just added before the load of
        // `queued`; pairs with the fence in `enqueue`.
        fence(SeqCst);
        if !self.has_waiters() {
            return;
        }
        let served = {
            let mut inner = lock(&self.inner);
            self.serve_locked(&mut inner, source, batch)
        };
        wake_served(served, None, source);
    }

    /// Like [`WaitQueue::serve`], for `node`, a queued task being polled
    /// without a grant (woken by [`WaitQueue::nudge`]): `node` is served in
    /// its turn but not woken, since it is running.
    pub(crate) fn serve_for(
        &self,
        node: &std::sync::Arc<Waiter>,
        source: &impl Source,
        batch: u64,
    ) {
        let served = {
            let mut inner = lock(&self.inner);
            self.serve_locked(&mut inner, source, batch)
        };
        wake_served(served, Some(node), source);
    }

    /// After tokens were added to the pool where the caller takes them
    /// first (a served task's hand-off, see the module notes): wakes the
    /// front task to take what the caller leaves, or serves a front thread
    /// at once, as [`WaitQueue::serve`] does.
    pub(crate) fn nudge(&self, source: &impl Source, batch: u64) {
        // SeqCst fence: as in `serve`, orders the tokens just added before
        // the load of `queued`; pairs with the fence in `enqueue`.
        fence(SeqCst);
        if !self.has_waiters() {
            return;
        }
        let mut inner = lock(&self.inner);
        inner.pop_cancelled_front();
        let front_task = inner
            .nodes
            .front()
            .filter(|front| matches!(front.wake, Wake::Task(_)))
            .map(std::sync::Arc::clone);
        match front_task {
            Some(front) => {
                drop(inner);
                // Not granted: it serves the queue when polled
                // (`WaitQueue::serve_for`).
                front.wake();
            }
            None => {
                let served = self.serve_locked(&mut inner, source, batch);
                drop(inner);
                wake_served(served, None, source);
            }
        }
    }

    /// The hand-off; returns the nodes to wake once the lock is released,
    /// and whether the head stopped timing the fills (see
    /// [`Source::head_untimed`]).
    fn serve_locked(
        &self,
        inner: &mut Inner,
        source: &impl Source,
        batch: u64,
    ) -> (Vec<std::sync::Arc<Waiter>>, bool) {
        let mut woken = Vec::new();
        loop {
            inner.pop_cancelled_front();
            let Some(front) = inner.nodes.front() else {
                break;
            };
            let extra = if front.partial {
                // Relaxed: `held` is written only under the queue lock.
                let held = front.held.load(Relaxed);
                let got = source.take_up_to(front.need - held);
                if held + got < front.need {
                    front.held.store(held + got, Relaxed);
                    source.in_flight(got, 0);
                    break;
                }
                front.held.store(0, Relaxed);
                source.in_flight(0, held);
                0
            } else if source.take_exact(front.need) {
                if batch > 0 {
                    source.take_handoff(batch)
                } else {
                    0
                }
            } else {
                break;
            };
            // Relaxed: published by the Release store of the state below.
            front.extra.store(extra, Relaxed);
            // Release: pairs with the Acquire in `Waiter::granted`.
            front.state.store(GRANTED, Release);
            // SeqCst: keeps the count in the same total order as its readers.
            self.queued.fetch_sub(1, SeqCst);
            if let Some(node) = inner.nodes.pop_front() {
                woken.push(node);
            }
        }
        let mut timed = false;
        if let Some(front) = inner.nodes.front() {
            timed = matches!(front.wake, Wake::Thread(_));
            // Relaxed: a hint (see `Waiter::is_head`); the unpark that
            // follows orders it for the woken thread.
            if !front.head.swap(true, Relaxed) && timed {
                woken.push(std::sync::Arc::clone(front));
            }
        }
        // Relaxed: a hint; see `has_timed_head`.
        let was_timed = self.timed_head.swap(timed, Relaxed);
        let untimed = was_timed && !timed && !inner.nodes.is_empty();
        (woken, untimed)
    }

    /// Takes `node` out of the queue, or reports that it was granted.
    pub(crate) fn cancel(
        &self,
        node: &std::sync::Arc<Waiter>,
        source: &impl Source,
        batch: u64,
    ) -> Cancel {
        let mut inner = lock(&self.inner);
        // Relaxed: state changes happen under the queue lock, which we hold.
        match node.state.load(Relaxed) {
            GRANTED => return Cancel::Granted(node.extra.load(Relaxed)),
            WAITING => {}
            other => panic!("wait queue: cancelling a node in state {other}"),
        }
        node.state.store(CANCELLED, Relaxed);
        // SeqCst: as in `serve_locked`.
        self.queued.fetch_sub(1, SeqCst);
        inner.cancelled += 1;
        let held = node.held.swap(0, Relaxed);
        if held > 0 {
            source.in_flight(0, held);
            source.put_raw(held);
        }
        if inner.cancelled > 16 && inner.cancelled * 2 > inner.nodes.len() {
            // Relaxed: under the lock.
            inner
                .nodes
                .retain(|waiter| waiter.state.load(Relaxed) == WAITING);
            inner.cancelled = 0;
        }
        // The node may have been the front that blocked the others, and
        // what it gathered is back in the pool: serve.
        let served = self.serve_locked(&mut inner, source, batch);
        drop(inner);
        wake_served(served, None, source);
        Cancel::Left
    }

    /// Queued nodes, cancelled ones included (for tests of the bound).
    #[cfg(test)]
    fn len(&self) -> usize {
        lock(&self.inner).nodes.len()
    }
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::sync::atomic::Ordering;
    use std::sync::Arc;

    /// A pool of plain tokens.
    #[derive(Default)]
    struct Pool {
        tokens: Cell<u64>,
        in_flight: Cell<u64>,
        untimed: Cell<u32>,
    }

    impl Source for Pool {
        fn take_exact(&self, need: u64) -> bool {
            if self.tokens.get() < need {
                return false;
            }
            self.tokens.set(self.tokens.get() - need);
            true
        }
        fn take_up_to(&self, max: u64) -> u64 {
            let got = self.tokens.get().min(max);
            self.tokens.set(self.tokens.get() - got);
            got
        }
        fn take_handoff(&self, max: u64) -> u64 {
            self.take_up_to(max)
        }
        fn put_raw(&self, tokens: u64) {
            self.tokens.set(self.tokens.get() + tokens);
        }
        fn in_flight(&self, add: u64, sub: u64) {
            self.in_flight.set(self.in_flight.get() + add - sub);
        }
        fn head_untimed(&self) {
            self.untimed.set(self.untimed.get() + 1);
        }
    }

    fn node(need: u64) -> Arc<Waiter> {
        Arc::new(Waiter::task(need, false, 0, Waker::noop().clone()))
    }

    #[test]
    fn serves_in_fifo_order_and_stops_at_the_first_it_cannot_satisfy() {
        let (queue, pool) = (WaitQueue::new(), Pool::default());
        let (a, b, c) = (node(2), node(5), node(1));
        for n in [&a, &b, &c] {
            queue.enqueue(n, &pool, 0);
            assert_eq!(n.granted(), None);
        }
        assert!(a.is_head() && !b.is_head());
        pool.put_raw(4);
        queue.serve(&pool, 0);
        assert_eq!(a.granted(), Some(0));
        assert_eq!(b.granted(), None, "5 > 2 left");
        assert_eq!(c.granted(), None, "FIFO: c waits behind b");
        assert!(b.is_head());
        assert_eq!(pool.tokens.get(), 2);
        pool.put_raw(4);
        queue.serve(&pool, 0);
        assert_eq!((b.granted(), c.granted()), (Some(0), Some(0)));
        assert_eq!(pool.tokens.get(), 0);
        assert!(!queue.has_waiters());
    }

    #[test]
    fn a_served_waiter_is_handed_a_batch() {
        let (queue, pool) = (WaitQueue::new(), Pool::default());
        let (a, b) = (node(2), node(2));
        queue.enqueue(&a, &pool, 3);
        queue.enqueue(&b, &pool, 3);
        pool.put_raw(6);
        queue.serve(&pool, 3);
        assert_eq!(a.granted(), Some(3));
        assert_eq!(b.granted(), None, "the batch went to the first waiter");
        assert_eq!(pool.tokens.get(), 1);
    }

    #[test]
    fn a_cancelled_waiter_returns_what_it_gathered_and_unblocks_the_next() {
        let (queue, pool) = (WaitQueue::new(), Pool::default());
        let big = Arc::new(Waiter::task(10, true, 0, Waker::noop().clone()));
        let small = node(1);
        queue.enqueue(&big, &pool, 0);
        queue.enqueue(&small, &pool, 0);
        pool.put_raw(4);
        queue.serve(&pool, 0);
        assert_eq!((pool.tokens.get(), pool.in_flight.get()), (0, 4));
        assert_eq!(queue.cancel(&big, &pool, 0), Cancel::Left);
        assert_eq!(small.granted(), Some(0), "served from what big gave back");
        assert_eq!((pool.tokens.get(), pool.in_flight.get()), (3, 0));
        assert_eq!(queue.cancel(&small, &pool, 0), Cancel::Granted(0));
    }

    /// A parked thread at the front times the fills; when it is served and
    /// a task takes the front, the source hears of it once, after the lock.
    #[test]
    fn a_task_taking_the_front_from_a_thread_is_reported_once() {
        let (queue, pool) = (WaitQueue::new(), Pool::default());
        let thread = Arc::new(Waiter::thread(1, false, 0, std::thread::current()));
        let (task, later) = (node(1), node(1));
        queue.enqueue(&thread, &pool, 0);
        assert!(queue.has_timed_head());
        queue.enqueue(&task, &pool, 0);
        assert_eq!(pool.untimed.get(), 0);
        pool.put_raw(1);
        queue.serve(&pool, 0);
        assert_eq!(thread.granted(), Some(0));
        assert!(!queue.has_timed_head());
        assert_eq!(pool.untimed.get(), 1);
        // A task after a task: nothing changes hands.
        queue.enqueue(&later, &pool, 0);
        pool.put_raw(1);
        queue.serve(&pool, 0);
        assert_eq!(task.granted(), Some(0));
        assert_eq!(pool.untimed.get(), 1);
        // The queue emptied by a thread's exit is not reported either.
        let lone = Arc::new(Waiter::thread(1, false, 0, std::thread::current()));
        pool.put_raw(1);
        queue.serve(&pool, 0);
        queue.enqueue(&lone, &pool, 0);
        assert!(queue.has_timed_head());
        pool.put_raw(1);
        queue.serve(&pool, 0);
        assert_eq!(lone.granted(), Some(0));
        assert_eq!(pool.untimed.get(), 1);
    }

    /// A nudge wakes a front task without handing it anything; polled, it
    /// serves the queue for itself, in queue order, and is not woken again.
    /// A front thread is served at once.
    #[test]
    fn a_nudge_wakes_a_front_task_to_serve_itself_and_serves_a_front_thread() {
        let (queue, pool) = (WaitQueue::new(), Pool::default());
        let (first_wakes, first) = counted_task(1);
        let (second_wakes, second) = counted_task(1);
        queue.nudge(&pool, 0);
        queue.enqueue(&first, &pool, 0);
        queue.enqueue(&second, &pool, 0);
        pool.put_raw(2);
        queue.nudge(&pool, 0);
        assert_eq!(first.granted(), None, "a nudge grants nothing");
        assert_eq!(first_wakes.load(Ordering::SeqCst), 1);
        assert_eq!(second_wakes.load(Ordering::SeqCst), 0);
        assert_eq!(pool.tokens.get(), 2);
        // Polled, the first serves the queue: itself, then the second.
        queue.serve_for(&first, &pool, 0);
        assert_eq!((first.granted(), second.granted()), (Some(0), Some(0)));
        assert_eq!(first_wakes.load(Ordering::SeqCst), 1, "running: not woken");
        assert_eq!(second_wakes.load(Ordering::SeqCst), 1);
        // A thread at the front is served by the nudge itself.
        let thread = Arc::new(Waiter::thread(1, false, 0, std::thread::current()));
        queue.enqueue(&thread, &pool, 0);
        pool.put_raw(1);
        queue.nudge(&pool, 0);
        assert_eq!(thread.granted(), Some(0));
        assert!(!queue.has_waiters());
    }

    /// A task node whose waker counts its wakes.
    fn counted_task(need: u64) -> (Arc<std::sync::atomic::AtomicUsize>, Arc<Waiter>) {
        struct Count(Arc<std::sync::atomic::AtomicUsize>);
        impl std::task::Wake for Count {
            fn wake(self: Arc<Self>) {
                self.wake_by_ref();
            }
            fn wake_by_ref(self: &Arc<Self>) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let waker = Waker::from(Arc::new(Count(Arc::clone(&count))));
        (count, Arc::new(Waiter::task(need, false, 0, waker)))
    }

    #[test]
    fn cancelled_nodes_are_compacted() {
        let (queue, pool) = (WaitQueue::new(), Pool::default());
        let blocker = node(1);
        queue.enqueue(&blocker, &pool, 0);
        for _ in 0..1000 {
            let n = node(1);
            queue.enqueue(&n, &pool, 0);
            assert_eq!(queue.cancel(&n, &pool, 0), Cancel::Left);
        }
        assert!(queue.len() <= 40, "{} nodes kept", queue.len());
        assert!(queue.has_waiters());
    }

    #[test]
    fn a_granted_task_is_woken_once_with_its_tokens() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        struct Count(AtomicUsize);
        impl std::task::Wake for Count {
            fn wake(self: Arc<Self>) {
                self.wake_by_ref();
            }
            fn wake_by_ref(self: &Arc<Self>) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(Arc::clone(&count));
        let (queue, pool) = (WaitQueue::new(), Pool::default());
        let n = Arc::new(Waiter::task(1, false, 0, waker.clone()));
        queue.enqueue(&n, &pool, 0);
        assert_eq!(count.0.load(Ordering::SeqCst), 0, "not woken when queued");
        n.set_waker(&waker);
        pool.put_raw(1);
        queue.serve(&pool, 0);
        queue.serve(&pool, 0);
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        assert_eq!(n.granted(), Some(0));
    }
}
