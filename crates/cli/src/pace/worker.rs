//! The callers: threads or tokio tasks looping acquire, synthetic op.

use std::future::Future as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use crossbeam_utils::CachePadded;
use hdrhistogram::Histogram;
use tollgate::RateLimiter;

/// How often a stalled task looks at the control word again (stalled
/// threads sleep on the gate instead, woken when the stall ends).
const STALL_POLL: Duration = Duration::from_micros(100);
/// A task yields to its runtime every this many ops, so tasks sharing a
/// worker thread all run even when acquires never block.
const YIELD_EVERY: u64 = 64;

/// A caller thread's stack: it runs a short loop and keeps its histogram
/// on the heap, so a small stack lets many thousands start quickly.
pub(super) const CALLER_STACK: usize = 64 << 10;

/// Bit 0 of the control word: callers exit.
const STOP: u64 = 1;
/// Bit 1: callers pause (stall injection, and before the start).
const STALL: u64 = 2;
/// Bits 2..: the interval number.
const EPOCH_SHIFT: u32 = 2;

/// Where a waiting task leaves its histogram (see `Shared::parked`).
type Slot = Mutex<Parked>;

/// A task's slot, one per caller.
#[derive(Debug, Default)]
enum Parked {
    /// The task holds its histogram: it runs, or waits to be polled.
    #[default]
    Running,
    /// The task waits in `acquire_async` and left what it recorded here
    /// (`None`: nothing since it last reported).
    Waiting(Option<Histogram<u64>>),
    /// The run has ended and the coordinator took what was left
    /// (`Shared::close_parked`): the task runs no more ops, and if it was
    /// running then, it owes the coordinator its last report.
    Closed,
}

/// The decoded control word.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Control {
    pub(super) stop: bool,
    pub(super) stalled: bool,
    /// Bumped at every interval boundary; a caller that sees it change
    /// sends its histogram for the interval that ended.
    pub(super) epoch: u64,
}

impl Control {
    fn encode(self) -> u64 {
        (self.epoch << EPOCH_SHIFT)
            | if self.stop { STOP } else { 0 }
            | if self.stalled { STALL } else { 0 }
    }

    fn decode(word: u64) -> Control {
        Control {
            stop: word & STOP != 0,
            stalled: word & STALL != 0,
            epoch: word >> EPOCH_SHIFT,
        }
    }
}

/// What the callers share.
#[derive(Debug)]
pub(super) struct Shared {
    pub(super) limiter: RateLimiter,
    /// The [`Control`] word. Written only by the coordinator, read by every
    /// caller once per op: the line stays shared in every cache between
    /// writes. Padded so no other write invalidates it.
    control: CachePadded<AtomicU64>,
    /// Each caller's op count, on its own line: the caller stores into it
    /// every op and the coordinator reads it once per interval, so callers
    /// never write a line another core writes.
    counts: Box<[CachePadded<AtomicU64>]>,
    op_time: Duration,
    /// Where stalled threads sleep until the stall bit clears: thousands of
    /// threads waiting to start must not poll.
    gate: (Mutex<()>, Condvar),
    /// Each task's histogram while it waits in `acquire_async` (tasks
    /// only): a task parks it here when its acquire does not complete at
    /// once and takes it back when it does, so the coordinator can collect
    /// the ops of tasks still waiting when the run ends, and knows which
    /// tasks were running then, whose last reports it waits for. Locked
    /// twice per wait by its task, which is about to be suspended anyway,
    /// and once by the coordinator at the end.
    parked: Box<[CachePadded<Slot>]>,
}

impl Shared {
    /// Callers start stalled, until the coordinator's first control word.
    pub(super) fn new(limiter: RateLimiter, callers: usize, op_time: Duration) -> Shared {
        Shared {
            limiter,
            control: CachePadded::new(AtomicU64::new(STALL)),
            counts: (0..callers)
                .map(|_| CachePadded::new(AtomicU64::new(0)))
                .collect(),
            op_time,
            gate: (Mutex::new(()), Condvar::new()),
            parked: (0..callers)
                .map(|_| CachePadded::new(Mutex::new(Parked::Running)))
                .collect(),
        }
    }

    /// At the end of a run (after the stop is set), closes every task's
    /// slot: returns the histograms the tasks waiting in `acquire_async`
    /// left (each task's ops since it last reported), and which tasks were
    /// running instead. A waiting task resumes to find its slot closed and
    /// runs no more ops; a running task sends its last report (`last`) when
    /// it sees the stop or, if it starts to wait first, when it finds its
    /// slot closed.
    pub(super) fn close_parked(&self) -> (Vec<Histogram<u64>>, Vec<bool>) {
        let mut left = Vec::new();
        let running = self
            .parked
            .iter()
            .map(|slot| {
                let mut slot = slot.lock().unwrap_or_else(|e| e.into_inner());
                match std::mem::replace(&mut *slot, Parked::Closed) {
                    Parked::Running => true,
                    Parked::Waiting(histogram) => {
                        left.extend(histogram);
                        false
                    }
                    Parked::Closed => false,
                }
            })
            .collect();
        (left, running)
    }

    pub(super) fn set_control(&self, control: Control) {
        // Relaxed: the word carries no other data; callers only need to
        // see it soon (histograms travel through the channel, which orders
        // them).
        let before = Control::decode(self.control.swap(control.encode(), Relaxed));
        if before.stalled != control.stalled || before.stop != control.stop {
            // Taking the gate's lock orders the store before any sleeper's
            // next check: a thread either saw the new word or is already
            // waiting and gets the notification.
            drop(self.gate.0.lock().unwrap_or_else(|e| e.into_inner()));
            self.gate.1.notify_all();
        }
    }

    /// Sleeps while the callers are stalled (and not stopped).
    ///
    /// No timeout: every change of the stall or stop bit notifies the gate
    /// after taking its lock (`set_control`), so a thread that saw the old
    /// word is already waiting when the notification comes. A timed wait
    /// here woke every sleeping thread ten times a second: with thousands
    /// of threads spawning, a storm of futile wake-ups that delayed the
    /// start of the run.
    fn wait_unstalled(&self) {
        let mut guard = self.gate.0.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let control = self.control();
            if !control.stalled || control.stop {
                return;
            }
            guard = self.gate.1.wait(guard).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn control(&self) -> Control {
        // Relaxed: see `set_control`.
        Control::decode(self.control.load(Relaxed))
    }

    /// Ops completed by all callers so far.
    pub(super) fn ops(&self) -> u64 {
        // Relaxed: each count is a gauge written only by its caller.
        self.counts.iter().map(|c| c.load(Relaxed)).sum()
    }

    /// After an acquire: whether the run has ended, in which case the op is
    /// neither run nor counted and `recorder` sends what it holds. The
    /// coordinator reads the count after setting the stop, so the ops the
    /// callers report never exceed the ops counted.
    #[inline]
    fn stopped(&self, recorder: &mut Recorder) -> bool {
        let control = self.control();
        if control.stop {
            recorder.roll(control);
        }
        control.stop
    }

    /// After an acquire: the synthetic op, then count it.
    #[inline]
    fn finish_op(&self, caller: usize, ops: u64) {
        if !self.op_time.is_zero() {
            spin_for(self.op_time);
        }
        // Relaxed: a gauge; see `ops`.
        self.counts[caller].store(ops, Relaxed);
    }
}

/// Busy-waits: the synthetic op occupies its thread like real work.
fn spin_for(d: Duration) {
    let until = Instant::now() + d;
    while Instant::now() < until {
        std::hint::spin_loop();
    }
}

/// A caller's lateness histogram for one interval.
#[derive(Debug)]
pub(super) struct Report {
    /// The interval the histogram covers (or, for a caller blocked across
    /// boundaries, the first of those it covers).
    pub(super) epoch: u64,
    /// `None` when the caller recorded nothing in it.
    pub(super) histogram: Option<Histogram<u64>>,
    /// Which caller sent it.
    pub(super) caller: usize,
    /// Sent once the caller saw the stop: it records nothing more.
    pub(super) last: bool,
}

/// A histogram for lateness in nanoseconds (3 significant digits, grows
/// as needed).
pub(super) fn new_histogram() -> Histogram<u64> {
    Histogram::new(3).expect("3 significant digits is valid")
}

/// A caller's own histogram, handed to the coordinator at each boundary.
///
/// Consecutive ops mostly see the same lateness (the backlog changes only
/// at fills), so equal values are counted in a run and recorded together:
/// the histogram costs less than the acquire it measures.
///
/// The histogram is created on the first record: a caller that never got
/// an op (thousands of threads at a low rate) costs no memory.
struct Recorder {
    caller: usize,
    epoch: u64,
    histogram: Option<Histogram<u64>>,
    reports: mpsc::Sender<Report>,
    /// The lateness of the current run of equal values, and its length.
    run_ns: u64,
    run_len: u64,
}

impl Recorder {
    fn new(caller: usize, reports: mpsc::Sender<Report>) -> Recorder {
        Recorder {
            caller,
            epoch: 0,
            histogram: None,
            reports,
            run_ns: 0,
            run_len: 0,
        }
    }

    /// Sends the histogram if an interval ended since the last call.
    #[inline]
    fn roll(&mut self, control: Control) {
        if control.epoch != self.epoch {
            self.send(control.stop);
            self.epoch = control.epoch;
        }
    }

    /// Sends what was recorded since the last report.
    fn send(&mut self, last: bool) {
        self.flush();
        let fresh = self.histogram.as_ref().map(Histogram::new_from);
        let histogram = std::mem::replace(&mut self.histogram, fresh);
        // The coordinator may have finished: nothing to do then.
        let _ = self.reports.send(Report {
            epoch: self.epoch,
            histogram,
            caller: self.caller,
            last,
        });
    }

    #[inline]
    fn record(&mut self, late: Duration) {
        let ns = u64::try_from(late.as_nanos()).unwrap_or(u64::MAX);
        if ns != self.run_ns {
            self.flush();
            self.run_ns = ns;
        }
        self.run_len += 1;
    }

    /// Before a wait: leaves what was recorded in `slot` for the
    /// coordinator, in case the wait outlasts the run. If the run has
    /// ended (the slot is closed), sends it as the last report instead:
    /// the coordinator waits for it.
    fn park(&mut self, slot: &Slot) {
        self.flush();
        let mut slot = slot.lock().unwrap_or_else(|e| e.into_inner());
        match &*slot {
            Parked::Closed => {
                drop(slot);
                self.send(true);
            }
            Parked::Running | Parked::Waiting(_) => {
                *slot = Parked::Waiting(self.histogram.take());
            }
        }
    }

    /// After a wait: takes back what [`Recorder::park`] left, unless the
    /// coordinator collected it (the run has ended: the caller's next
    /// look at the control word sees the stop).
    fn unpark(&mut self, slot: &Slot) {
        let mut slot = slot.lock().unwrap_or_else(|e| e.into_inner());
        if let Parked::Waiting(histogram) = &mut *slot {
            self.histogram = histogram.take();
            *slot = Parked::Running;
        }
    }

    /// Records the pending run of equal values.
    fn flush(&mut self) {
        if self.run_len == 0 {
            return;
        }
        let (ns, n) = (self.run_ns, std::mem::take(&mut self.run_len));
        // `record_n` grows the histogram to fit (`saturating_record_n`
        // would clamp to its current, possibly tiny, range); it fails only
        // past what any histogram can hold.
        let histogram = self.histogram.get_or_insert_with(new_histogram);
        if histogram.record_n(ns, n).is_err() {
            histogram.saturating_record_n(ns, n);
        }
    }
}

/// One caller thread.
fn run_thread(shared: &Shared, caller: usize, reports: mpsc::Sender<Report>) {
    let mut recorder = Recorder::new(caller, reports);
    let mut ops = 0;
    loop {
        let control = shared.control();
        recorder.roll(control);
        if control.stop {
            return;
        }
        if control.stalled {
            shared.wait_unstalled();
            continue;
        }
        let late = shared.limiter.acquire();
        if shared.stopped(&mut recorder) {
            return;
        }
        ops += 1;
        shared.finish_op(caller, ops);
        recorder.record(late);
    }
}

/// One caller task.
async fn run_task(shared: Arc<Shared>, caller: usize, reports: mpsc::Sender<Report>) {
    let mut recorder = Recorder::new(caller, reports);
    let mut ops = 0;
    loop {
        let control = shared.control();
        recorder.roll(control);
        if control.stop {
            return;
        }
        if control.stalled {
            tokio::time::sleep(STALL_POLL).await;
            continue;
        }
        let late = acquire_reporting(&shared, caller, &mut recorder).await;
        if shared.stopped(&mut recorder) {
            return;
        }
        ops += 1;
        shared.finish_op(caller, ops);
        recorder.record(late);
        if ops % YIELD_EVERY == 0 {
            tokio::task::yield_now().await;
        }
    }
}

/// `acquire_async`, with the recorder's histogram parked for the
/// coordinator while the acquire waits: a task served a burst of ops and
/// then queued behind many others may wait past the end of the run, and
/// its ops would otherwise go unreported.
async fn acquire_reporting(shared: &Shared, caller: usize, recorder: &mut Recorder) -> Duration {
    let mut acquire = std::pin::pin!(shared.limiter.acquire_async());
    let slot = &*shared.parked[caller];
    let mut parked = false;
    let late = std::future::poll_fn(|cx| {
        let poll = acquire.as_mut().poll(cx);
        if poll.is_pending() && !parked {
            recorder.park(slot);
            parked = true;
        }
        poll
    })
    .await;
    if parked {
        recorder.unpark(slot);
    }
    late
}

/// Starts one thread per caller. They are not joined: at the end of a run
/// the coordinator collects what they sent and the process exits.
///
/// # Errors
///
/// When a thread cannot start; the threads started before it are stopped
/// and joined first, so none is left running.
pub(super) fn spawn_threads(
    shared: &Arc<Shared>,
    reports: &mpsc::Sender<Report>,
) -> anyhow::Result<()> {
    let callers = shared.counts.len();
    let mut started = Vec::with_capacity(callers);
    for caller in 0..callers {
        let spawned = {
            let shared = Arc::clone(shared);
            let reports = reports.clone();
            std::thread::Builder::new()
                .name(format!("pace-{caller}"))
                .stack_size(CALLER_STACK)
                .spawn(move || run_thread(&shared, caller, reports))
        };
        match spawned {
            Ok(handle) => started.push(handle),
            Err(e) => {
                // Still stalled: every thread started waits at the gate,
                // and the stop bit sends it home.
                shared.set_control(Control {
                    stop: true,
                    ..Control::default()
                });
                for handle in started {
                    let _ = handle.join();
                }
                anyhow::bail!(
                    "cannot start caller thread {} of {callers}: {e} (the {caller} \
                     started were stopped); use --async (tasks, not threads) or fewer \
                     --threads",
                    caller + 1
                );
            }
        }
    }
    Ok(())
}

/// Starts one task per caller on a multi-threaded runtime with a worker
/// thread per core (at most one per task).
pub(super) fn spawn_tasks(
    shared: &Arc<Shared>,
    reports: &mpsc::Sender<Report>,
) -> anyhow::Result<tokio::runtime::Runtime> {
    let callers = shared.counts.len();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cores.min(callers))
        .thread_name("pace-rt")
        .enable_time()
        .build()
        .context("cannot start the tokio runtime")?;
    for caller in 0..callers {
        runtime.spawn(run_task(Arc::clone(shared), caller, reports.clone()));
    }
    Ok(runtime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_round_trips() {
        for control in [
            Control::default(),
            Control {
                stop: true,
                stalled: false,
                epoch: 7,
            },
            Control {
                stop: false,
                stalled: true,
                epoch: u64::MAX >> EPOCH_SHIFT,
            },
        ] {
            assert_eq!(Control::decode(control.encode()), control);
        }
        assert!(Control::decode(STALL).stalled, "callers start stalled");
    }
}
