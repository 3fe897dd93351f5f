//! The coordinator of a `tollgate pace` run: the clock, the interval
//! lines and the summary.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tollgate::spec::Verb;

use super::args::Plan;
use super::cpu::{CpuTime, HostCpu};
use super::plot::History;
use super::report::{self, Lateness, Line, Printer, Summary};
use super::worker::{new_histogram, Control, Report, Shared};
use super::{active_pool_ns, interrupt, mode, nanos};

/// An open interval line waiting for the workers' histograms.
#[derive(Debug)]
struct Pending {
    epoch: u64,
    from: (Duration, u64),
    to: (Duration, u64),
    backlog: Duration,
    stalled: bool,
    deadline: Duration,
    seen: usize,
}

/// The coordinator's state across one run.
struct Run<'a> {
    plan: &'a Plan,
    printer: &'a mut Printer,
    /// The lines kept for `--plot`.
    history: Option<&'a mut History>,
    start: Instant,
    /// Histograms received since the last line was printed.
    open: Histogram<u64>,
    total: Histogram<u64>,
    pending: Option<Pending>,
}

impl Run<'_> {
    fn now(&self) -> Duration {
        self.start.elapsed()
    }

    fn receive(&mut self, report: &Report) {
        if let Some(histogram) = &report.histogram {
            self.open.add(histogram).expect("histograms auto-resize");
            self.total.add(histogram).expect("histograms auto-resize");
        }
        if let Some(pending) = &mut self.pending {
            if report.epoch == pending.epoch {
                pending.seen += 1;
            }
            if pending.seen == self.plan.threads {
                self.print_pending();
            }
        }
    }

    /// At the end of a run of tasks: adds the histograms of the tasks
    /// waiting in `acquire_async` now, then waits for the last report of
    /// every task that was running (each sends it once it sees the stop,
    /// within an op), so that every op run is reported. `until` bounds the
    /// wait, for a runtime that stopped polling.
    fn collect_tasks(&mut self, shared: &Shared, inbox: &mpsc::Receiver<Report>, until: Duration) {
        let (left, mut running) = shared.close_parked();
        for histogram in &left {
            self.open.add(histogram).expect("histograms auto-resize");
            self.total.add(histogram).expect("histograms auto-resize");
        }
        let mut owed = running.iter().filter(|r| **r).count();
        while owed > 0 {
            let Ok(report) = inbox.recv_timeout(until.saturating_sub(self.now())) else {
                return;
            };
            if report.last && std::mem::take(&mut running[report.caller]) {
                owed -= 1;
            }
            self.receive(&report);
        }
    }

    fn print_pending(&mut self) {
        let Some(p) = self.pending.take() else {
            return;
        };
        let span = (p.to.0 - p.from.0).as_secs_f64();
        let ops = p.to.1 - p.from.1;
        let target = self.plan.spec.ops_per_sec();
        let achieved = if span > 0.0 { ops as f64 / span } else { 0.0 };
        let histogram = std::mem::replace(&mut self.open, Histogram::new_from(&self.total));
        let recorded = !histogram.is_empty();
        let line = Line {
            elapsed_s: p.to.0.as_secs_f64(),
            target_ops_per_s: target,
            achieved_ops_per_s: achieved,
            ratio: achieved / target,
            ops,
            backlog_ns: nanos(p.backlog),
            lateness: Lateness::of(&histogram),
            stalled: p.stalled,
        };
        self.printer.line(&line);
        if let Some(history) = &mut self.history {
            history.push(line, recorded);
        }
    }

    /// Waits for reports until `until` (run time) or the pending line's
    /// deadline, whichever is first.
    fn wait(&mut self, inbox: &mpsc::Receiver<Report>, until: Duration) {
        let until = self
            .pending
            .as_ref()
            .map_or(until, |p| until.min(p.deadline));
        let now = self.now();
        if until > now {
            if let Ok(report) = inbox.recv_timeout(until - now) {
                self.receive(&report);
                while let Ok(report) = inbox.try_recv() {
                    self.receive(&report);
                }
            }
        }
        if self
            .pending
            .as_ref()
            .is_some_and(|p| self.now() >= p.deadline)
        {
            self.print_pending();
        }
    }
}

/// The longest the end of a run of tasks waits for the last reports of the
/// tasks that were running (beyond `--op-time`): each sends it within an
/// op, when its worker thread polls it; only a runtime that stopped
/// polling takes longer.
const TASKS_GRACE: Duration = Duration::from_secs(10);

/// How long a line waits for histograms from workers blocked across its end.
fn grace(interval: Duration) -> Duration {
    (interval / 4).min(Duration::from_millis(50))
}

pub(super) fn coordinate(
    shared: &Shared,
    plan: &Plan,
    inbox: &mpsc::Receiver<Report>,
    printer: &mut Printer,
    history: Option<&mut History>,
    use_async: bool,
) -> Summary {
    let limiter = &shared.limiter;
    limiter.apply(plan.spec.with_verb(Verb::Start));
    let start = Instant::now();
    let cpu_start = CpuTime::of_process();
    let host_start = HostCpu::now();
    let mut run = Run {
        plan,
        printer,
        history,
        start,
        open: new_histogram(),
        total: new_histogram(),
        pending: None,
    };
    let stalled_at = |t| plan.stalls.is_some_and(|s| s.stalled(t));
    let mut control = Control {
        stalled: stalled_at(Duration::ZERO),
        ..Control::default()
    };
    shared.set_control(control);

    let mut last = (Duration::ZERO, 0u64);
    // Whether the callers stalled at any time since the last line.
    let mut stall_seen = control.stalled;
    let mut next_tick = plan.interval;
    let mut next_fill = interrupt::POLL;
    let end;
    let stats;
    let backlog;
    let interrupted;
    loop {
        let now = run.now();
        let stop = interrupt::interrupted();
        if now >= plan.duration || stop {
            interrupted = stop && now < plan.duration;
            // Callers run no op that returns from `acquire` after this.
            control.stop = true;
            control.epoch += 1;
            shared.set_control(control);
            // The fill brings the limiter's account of waiting up to now
            // (ops admitted since the last fill count at the backlog they
            // saw): when no caller waits, nothing else fills.
            backlog = limiter.backlog();
            // At the same moment as the count: the ops admitted and the ops
            // run, side by side.
            stats = limiter.stats();
            end = (now, shared.ops());
            break;
        }
        if now >= next_tick {
            run.print_pending();
            let ops = shared.ops();
            control.epoch += 1;
            shared.set_control(control);
            let to = (now, ops);
            run.pending = Some(Pending {
                epoch: control.epoch - 1,
                from: last,
                to,
                backlog: limiter.backlog(),
                stalled: stall_seen,
                deadline: now + grace(plan.interval),
                seen: 0,
            });
            last = to;
            stall_seen = false;
            while next_tick <= now {
                next_tick += plan.interval;
            }
        }
        // After the line, so a stall starting on a boundary shows in the
        // next line, not the one that ended.
        let stalled = stalled_at(now);
        if stalled != control.stalled {
            control.stalled = stalled;
            shared.set_control(control);
        }
        stall_seen |= stalled;
        if now >= next_fill {
            limiter.backlog();
            next_fill = now + interrupt::POLL;
        }
        // Looks for Ctrl-C, and fills, at least this often.
        let mut wake = next_tick.min(plan.duration).min(next_fill);
        if let Some(change) = plan.stalls.and_then(|s| s.next_change(now)) {
            wake = wake.min(change);
        }
        run.wait(inbox, wake);
    }
    let cpu = CpuTime::of_process() - cpu_start;
    let host_cores = HostCpu::now()
        .zip(host_start)
        .map(|(now, start)| now.busy_cores_since(&start));

    // The last (possibly partial) interval: wait briefly for every worker's
    // final histogram, but not for workers still blocked in `acquire` (at a
    // low rate with many threads most are; what threads recorded before
    // blocking is left out, and their next op would come after the end
    // anyway). Tasks leave theirs parked while they wait: it joins the last
    // line, with the last reports of every task that was running, which
    // the line waits for.
    run.print_pending();
    if use_async {
        let until = run.now() + TASKS_GRACE + plan.op_time;
        run.collect_tasks(shared, inbox, until);
    }
    if end.0 > last.0 + Duration::from_millis(1) {
        run.pending = Some(Pending {
            epoch: control.epoch - 1,
            from: last,
            to: end,
            backlog,
            stalled: stall_seen,
            deadline: end.0 + grace(plan.interval),
            seen: 0,
        });
        if use_async {
            // Every report is in.
            run.print_pending();
        }
        while run.pending.is_some() {
            let deadline = run.pending.as_ref().map_or(end.0, |p| p.deadline);
            run.wait(inbox, deadline);
        }
    } else if !use_async {
        let deadline = run.now() + grace(plan.interval);
        while let Ok(report) = inbox.recv_timeout(deadline.saturating_sub(run.now())) {
            run.receive(&report);
        }
    }

    // Read again once every report is in: an op a caller counted just as
    // the stop was set counts, as its lateness may have been reported; the
    // callers count no op after they see the stop, so the ops reported
    // never exceed the ops run.
    let end = (end.0, shared.ops());
    let elapsed = end.0.as_secs_f64();
    let target = plan.spec.ops_per_sec();
    let achieved = end.1 as f64 / elapsed;
    Summary {
        spec: plan.spec.to_string(),
        mode: mode(use_async),
        threads: plan.threads,
        elapsed_s: elapsed,
        interrupted,
        total_ops: end.1,
        target_ops_per_s: target,
        achieved_ops_per_s: achieved,
        ratio: achieved / target,
        lateness: Lateness::of(&run.total),
        lateness_ops: run.total.len(),
        admitted: stats.admitted,
        total_wait_ns: nanos(stats.total_wait),
        limiter_mean_wait_ns: nanos(stats.total_wait) / stats.admitted.max(1),
        backlog_ns: nanos(backlog),
        cpu_user_s: cpu.user.as_secs_f64(),
        cpu_system_s: cpu.system.as_secs_f64(),
        cpu_ns_per_op: if end.1 > 0 {
            cpu.total().as_nanos() as f64 / end.1 as f64
        } else {
            0.0
        },
        cpu_cores: cpu.total().as_secs_f64() / elapsed,
        host_busy_cores: host_cores,
        warning: report::shortfall(
            achieved / target,
            elapsed,
            nanos(backlog),
            active_pool_ns(&plan.spec),
            plan.fill_interval.map(|i| i.as_nanos() as f64),
            report::Admitted {
                ops: stats.admitted,
                run: end.1,
                op_ns: 1e9 / target,
            },
            plan.stalls.is_some(),
        ),
    }
}
