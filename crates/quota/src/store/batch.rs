//! Coalescing: Allows that find the store's calls busy queue, and go to
//! Redis together as one call of the script.
//!
//! # Implementation notes
//!
//! The store keeps at most one script call in flight per connection. A
//! reservation that finds a place free (and nothing queued before it)
//! takes it and goes at once, alone, in the script's usual form. One
//! that finds none joins the queue and waits for its answer. When a call
//! ends, its [`Turn`] (dropped by the caller, even one that gave up on
//! its future) takes what queued meanwhile and hands it to a task of its
//! own, which sends it as one call of the script's `batch` op, answers
//! each reservation from its part of the reply, and goes on with what
//! queued during that call until the queue is empty; only then is the
//! place free again.
//!
//! The script decides a batch's reservations in turn, each on the bucket
//! states the ones before it left, by the same steps as alone (its fast
//! path on doubles first): exactly as if they had been sent one by one in
//! arrival order, so coalescing changes no answer, debt, dynamic bucket
//! or count under a namespace's cap. A reservation waits for at most the
//! call in flight and then its own, and never longer than the deadline:
//! a waiter gives up at the deadline from when it queued (its reservation
//! may still be decided, as with a single call that passes the deadline),
//! and a call past the deadline answers each of its reservations with the
//! deadline error; either way the caller's [`OnError`](super::OnError)
//! mode answers.
//!
//! One call holds reservations of one time argument (the store's test
//! clock reads its time when an Allow arrives; Redis' `TIME` is the same
//! empty argument for all) and, on a Cluster, of one hash tag, as a
//! script's keys must share a slot there; the others stay queued, in
//! their order, for the next call. A call holds at most [`MOST`]
//! reservations.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;
use tollgate_service::redis_link::{Link, StoreError};
use tollgate_service::LockUnpoisoned;

use super::{answer, Reserved};

/// The most reservations one call carries.
const MOST: usize = 128;

/// One reservation's keys (its bucket's, then its namespace's set when
/// counted) and its 12 script arguments (the second is the time).
#[derive(Debug)]
pub(super) struct Call {
    pub(super) keys: Vec<String>,
    pub(super) args: [String; 12],
}

impl Call {
    /// The time argument.
    fn time(&self) -> &str {
        &self.args[1]
    }

    /// The hash tag of its keys (Redis Cluster's rule).
    fn tag(&self) -> &str {
        tollgate_service::redis_link::hash_tag(&self.keys[0])
    }
}

/// The store's script calls: who may call now, and who waits.
pub(super) struct Batcher {
    shared: Arc<Shared>,
}

struct Shared {
    link: Link,
    script: redis::Script,
    deadline: Duration,
    /// The calls in flight at most: one per connection.
    most: usize,
    /// Whether a call's keys must share one hash tag.
    cluster: bool,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Calls in flight, or tasks between two batch calls: at most `most`.
    in_flight: usize,
    /// Reservations waiting for a call, in arrival order.
    queue: VecDeque<Waiter>,
}

struct Waiter {
    call: Call,
    /// Closed once the waiter has given up at its deadline.
    answer: oneshot::Sender<Result<Reserved, StoreError>>,
}

impl Batcher {
    /// Calls of `script` on `link` (of `connections` connections), each
    /// within `deadline`.
    pub(super) fn new(
        link: Link,
        script: redis::Script,
        deadline: Duration,
        connections: usize,
    ) -> Batcher {
        let cluster = link.is_cluster();
        Batcher {
            shared: Arc::new(Shared {
                link,
                script,
                deadline,
                most: connections.max(1),
                cluster,
                state: Mutex::new(State::default()),
            }),
        }
    }

    /// Decides `call`: at once when a place is free, else in the next
    /// batch; within the deadline either way.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave the reservation decided in Redis;
    /// the place it held passes to the queue.
    pub(super) async fn reserve(&self, call: Call) -> Result<Reserved, StoreError> {
        let shared = &self.shared;
        let waiting = {
            let mut state = shared.state.lock_unpoisoned();
            if state.in_flight < shared.most && state.queue.is_empty() {
                state.in_flight += 1;
                Err(call)
            } else {
                let (answer, receiver) = oneshot::channel();
                state.queue.push_back(Waiter { call, answer });
                Ok(receiver)
            }
        };
        match waiting {
            Err(call) => {
                let _turn = Turn(shared);
                shared.alone(&call).await
            }
            Ok(receiver) => match tokio::time::timeout(shared.deadline, receiver).await {
                Ok(Ok(answer)) => answer,
                Ok(Err(_)) => Err(StoreError::Redis("the batch call was dropped".into())),
                Err(_) => Err(StoreError::Deadline(shared.deadline)),
            },
        }
    }
}

impl fmt::Debug for Batcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Batcher")
            .field("link", &self.shared.link)
            .field("deadline", &self.shared.deadline)
            .field("most", &self.shared.most)
            .finish_non_exhaustive()
    }
}

/// A place in flight, held by a lone call: when dropped, it passes to
/// what queued meanwhile, or is given up.
struct Turn<'a>(&'a Arc<Shared>);

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        if let Some(batch) = self.0.next_batch() {
            drive(Arc::clone(self.0), batch);
        }
    }
}

impl Shared {
    /// The next batch: the first live waiter and the live ones after it
    /// with its time (and tag, on a Cluster), at most [`MOST`]; `None`,
    /// and the place given up, when none waits.
    fn next_batch(&self) -> Option<Vec<Waiter>> {
        let mut state = self.state.lock_unpoisoned();
        // A waiter past its deadline has been answered.
        state.queue.retain(|w| !w.answer.is_closed());
        let Some(first) = state.queue.pop_front() else {
            state.in_flight -= 1;
            return None;
        };
        let mut batch = vec![first];
        let mut rest = VecDeque::new();
        while let Some(w) = state.queue.pop_front() {
            let first = &batch[0].call;
            if batch.len() < MOST
                && w.call.time() == first.time()
                && (!self.cluster || w.call.tag() == first.tag())
            {
                batch.push(w);
            } else {
                rest.push_back(w);
            }
        }
        state.queue = rest;
        Some(batch)
    }

    /// Runs `call` alone, in the script's usual form.
    async fn alone(&self, call: &Call) -> Result<Reserved, StoreError> {
        let mut invocation = self.script.prepare_invoke();
        for key in &call.keys {
            invocation.key(key);
        }
        for arg in &call.args {
            invocation.arg(arg);
        }
        let reply: Vec<String> = self.link.invoke(&invocation, self.deadline).await?;
        answer(&reply)
    }

    /// Runs `batch` as one call and answers each waiter in it.
    async fn run(&self, batch: Vec<Waiter>) {
        if let [one] = batch.as_slice() {
            let reply = self.alone(&one.call).await;
            for w in batch {
                let _ = w.answer.send(reply.clone());
            }
            return;
        }
        let mut invocation = self.script.prepare_invoke();
        invocation
            .arg("batch")
            .arg(batch[0].call.time())
            .arg(batch.len());
        for w in &batch {
            for key in &w.call.keys {
                invocation.key(key);
            }
            invocation.arg(&w.call.args[0]);
            for arg in &w.call.args[2..] {
                invocation.arg(arg);
            }
        }
        let reply: Result<Vec<Reserved>, StoreError> = self
            .link
            .invoke::<Vec<String>>(&invocation, self.deadline)
            .await
            .and_then(|reply| {
                if reply.len() == 3 * batch.len() {
                    reply.chunks(3).map(answer).collect()
                } else {
                    Err(StoreError::Redis(format!(
                        "the quota script answered {} values for {} reservations",
                        reply.len(),
                        batch.len()
                    )))
                }
            });
        match reply {
            Ok(answers) => {
                for (w, answer) in batch.into_iter().zip(answers) {
                    let _ = w.answer.send(Ok(answer));
                }
            }
            Err(e) => {
                for w in batch {
                    let _ = w.answer.send(Err(e.clone()));
                }
            }
        }
    }
}

/// Runs batches from a task of its own until the queue is empty (the
/// lone call that ended returns to its caller meanwhile).
fn drive(shared: Arc<Shared>, batch: Vec<Waiter>) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        // Dropped outside a runtime: nothing can be sent.
        let mut batch = Some(batch);
        while let Some(waiters) = batch {
            for w in waiters {
                let _ = w
                    .answer
                    .send(Err(StoreError::Redis("no runtime to call redis".into())));
            }
            batch = shared.next_batch();
        }
        return;
    };
    runtime.spawn(async move {
        let mut batch = batch;
        loop {
            shared.run(batch).await;
            match shared.next_batch() {
                Some(next) => batch = next,
                None => return,
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(key: &str) -> Call {
        Call {
            keys: vec![key.to_owned()],
            args: Default::default(),
        }
    }

    #[test]
    fn a_calls_tag_follows_redis_clusters_rule() {
        assert_eq!(call("tollgate:quota:2{ns}:b").tag(), "ns");
        // The first `}` after the first `{` closes it, whatever the name.
        assert_eq!(call("p:3{a}b}:x").tag(), "a");
        assert_eq!(call("p:2{}:x{y}").tag(), "p:2{}:x{y}");
        assert_eq!(call("p:open{ns").tag(), "p:open{ns");
    }
}
