//! Coalescing: checks that arrive while the store's calls are in flight
//! wait, and go to Redis together as one script call.
//!
//! # Implementation notes
//!
//! The store lets at most one call per connection be in flight. A check
//! that finds one free goes at once, alone, in the script's usual form
//! (its fast path included). One that finds none joins the queue and
//! waits. When a call in flight ends, whoever ran it (the caller, or the
//! guard it leaves when dropped) takes the queue and hands it to a driver
//! task, which sends the waiting checks in arrival order as one `batch`
//! call, splits the answers back per check, and goes on with whatever
//! queued meanwhile until the queue is empty; only then is the call's
//! place free again.
//!
//! The script decides a batch's checks in turn, each whole (all its items
//! or, when an enforced limit rejects, nothing), each on the states the
//! ones before it left: exactly as if they had been sent one by one in
//! that order, so coalescing changes no answer. A check thus waits at
//! most for the call in flight and then its own, and never longer than
//! the deadline: a waiter gives up at the deadline (its check may still
//! be decided, as with a call that passes it), and a batch call that
//! passes the deadline answers every check in it with the deadline error.
//!
//! One call holds checks of one time (the store's clock, or Redis') and,
//! on a Cluster, of one hash tag (a script runs on one slot); the others
//! stay queued, in order, for the next call. A call holds at most
//! [`MOST_ITEMS`] items.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;
use tollgate_service::LockUnpoisoned;

use super::script::{self, Item, Reply};
use super::{hash_tag, StoreError, StoreInner};

/// The most items one batch call carries.
const MOST_ITEMS: usize = 256;

/// The queue of checks waiting for a call.
#[derive(Debug)]
pub(super) struct Batcher {
    queue: Mutex<Queue>,
    /// The calls in flight at most: one per connection.
    most: usize,
}

#[derive(Debug, Default)]
struct Queue {
    /// Calls in flight (or driver tasks between two calls).
    in_flight: usize,
    waiting: VecDeque<Pending>,
}

/// A queued check, its keys and arguments its own.
#[derive(Debug)]
struct Pending {
    op: &'static str,
    now: Option<u64>,
    /// The hash tag of its keys, on a Cluster.
    tag: Option<String>,
    keys: Vec<String>,
    /// Its items' arguments, nine each.
    args: Vec<String>,
    answer: oneshot::Sender<Result<Reply, StoreError>>,
}

impl Pending {
    fn items(&self) -> usize {
        self.keys.len()
    }

    fn joins(&self, first: &Pending) -> bool {
        self.now == first.now && self.tag == first.tag
    }
}

impl Batcher {
    pub(super) fn new(connections: usize) -> Batcher {
        Batcher {
            queue: Mutex::new(Queue::default()),
            most: connections.max(1),
        }
    }
}

/// A call's place in flight: given up (or handed to a driver, with the
/// queue) when dropped, so a caller that drops its future frees it too.
struct Place<'a> {
    inner: &'a Arc<StoreInner>,
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        if let Some(batch) = take(self.inner) {
            spawn_driver(Arc::clone(self.inner), batch);
        }
    }
}

/// Decides `items` (one check, `op` "check" or "standing") at `now`: at
/// once when a call's place is free, otherwise in the next batch.
pub(super) async fn check(
    inner: &Arc<StoreInner>,
    op: &'static str,
    now: Option<u64>,
    items: &[Item],
) -> Result<Reply, StoreError> {
    let receiver = {
        let mut queue = inner.batcher.queue.lock_unpoisoned();
        if queue.in_flight < inner.batcher.most && queue.waiting.is_empty() {
            queue.in_flight += 1;
            None
        } else {
            let (answer, receiver) = oneshot::channel();
            let mut args = Vec::with_capacity(9 * items.len());
            script::push_items(&mut args, items);
            queue.waiting.push_back(Pending {
                op,
                now,
                tag: inner
                    .link
                    .is_cluster()
                    .then(|| items.first().map(|i| hash_tag(&i.key).to_owned()))
                    .flatten(),
                keys: items.iter().map(|i| i.key.clone()).collect(),
                args,
                answer,
            });
            Some(receiver)
        }
    };
    match receiver {
        None => {
            let _place = Place { inner };
            super::invoke(inner, op, now, items).await
        }
        Some(receiver) => match tokio::time::timeout(inner.deadline, receiver).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err(StoreError::Redis(("the batch call was dropped").into())),
            Err(_) => Err(StoreError::Deadline(inner.deadline)),
        },
    }
}

/// The next batch from the queue: the first live check and the live ones
/// after it of its time and tag, up to [`MOST_ITEMS`] items. `None` (and
/// the place given up) when nothing waits.
fn take(inner: &StoreInner) -> Option<Vec<Pending>> {
    let mut queue = inner.batcher.queue.lock_unpoisoned();
    // A waiter past its deadline is answered already.
    queue.waiting.retain(|p| !p.answer.is_closed());
    let Some(first) = queue.waiting.pop_front() else {
        queue.in_flight -= 1;
        return None;
    };
    let mut items = first.items();
    let mut batch = vec![first];
    let mut rest = VecDeque::with_capacity(queue.waiting.len());
    while let Some(p) = queue.waiting.pop_front() {
        if p.joins(&batch[0]) && items + p.items() <= MOST_ITEMS {
            items += p.items();
            batch.push(p);
        } else {
            rest.push_back(p);
        }
    }
    queue.waiting = rest;
    Some(batch)
}

/// Runs batches until the queue is empty, from a task of its own (the
/// call that ended returns to its caller meanwhile).
fn spawn_driver(inner: Arc<StoreInner>, batch: Vec<Pending>) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        // No runtime (a store dropped outside one): nothing can be sent.
        for p in batch {
            let _ = p
                .answer
                .send(Err(StoreError::Redis(("no runtime to call redis").into())));
        }
        if let Some(rest) = take(&inner) {
            spawn_driver(inner, rest);
        }
        return;
    };
    runtime.spawn(async move {
        let mut batch = batch;
        loop {
            run(&inner, batch, inner.deadline).await;
            match take(&inner) {
                Some(next) => batch = next,
                None => return,
            }
        }
    });
}

/// Sends `batch` as one call and answers each of its checks.
async fn run(inner: &StoreInner, batch: Vec<Pending>, deadline: Duration) {
    let now = batch[0].now;
    let mut invocation = inner.script.prepare_invoke();
    let replies = if let [one] = batch.as_slice() {
        for key in &one.keys {
            invocation.key(key);
        }
        invocation
            .arg(one.op)
            .arg(now.map(|t| t.to_string()).unwrap_or_default())
            .arg(one.items());
        for arg in &one.args {
            invocation.arg(arg);
        }
        inner
            .link
            .invoke::<Vec<String>>(&invocation, deadline)
            .await
            .map_err(StoreError::from)
            .and_then(|reply| script::answers(&reply, one.items()))
            .map(|reply| vec![reply])
    } else {
        invocation
            .arg("batch")
            .arg(now.map(|t| t.to_string()).unwrap_or_default())
            .arg(batch.len());
        for p in &batch {
            for key in &p.keys {
                invocation.key(key);
            }
            invocation.arg(p.op).arg(p.items());
            for arg in &p.args {
                invocation.arg(arg);
            }
        }
        let counts: Vec<usize> = batch.iter().map(Pending::items).collect();
        inner
            .link
            .invoke::<Vec<String>>(&invocation, deadline)
            .await
            .map_err(StoreError::from)
            .and_then(|reply| script::batch_answers(&reply, &counts))
    };
    match replies {
        Ok(replies) => {
            for (p, reply) in batch.into_iter().zip(replies) {
                let _ = p.answer.send(Ok(reply));
            }
        }
        Err(e) => {
            for p in batch {
                let _ = p.answer.send(Err(e.clone()));
            }
        }
    }
}
