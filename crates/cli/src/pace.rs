//! `tollgate pace`: drives a limiter with N threads (or tokio tasks) that
//! each loop acquire, synthetic op, and reports how well it holds the rate.
//!
//! # Implementation notes
//!
//! The measurement must not disturb what it measures, so nothing a worker
//! does per op touches a line another core writes: it stores its op count
//! into its own cache-padded counter (a plain store, no read-modify-write),
//! records lateness into a histogram it owns, and reads one control word
//! (stop, stall and the interval number) that only the coordinator writes,
//! once per interval or stall change.
//!
//! The coordinator (the main thread) keeps the clock: at each interval
//! boundary it sums the counters (the achieved rate comes from those counts
//! and the exact times they were read), bumps the interval number, and
//! collects the workers' histograms, which each worker sends through a
//! channel the first time it sees the new number. A worker blocked in
//! `acquire` across a boundary sends late; its lateness joins whichever
//! line is open when it arrives, and the summary. A task leaves its
//! histogram in a slot of its own while its `acquire_async` waits (two
//! uncontended locks per wait, when it is suspended anyway), and the
//! coordinator takes those left when the run ends, so the ops of tasks
//! waiting past the end are reported too; it then waits for the last
//! report of every task that was not waiting (each sends it within an op,
//! once polled), so a run of tasks reports every op it ran. A thread
//! blocked past the end is not: knowing it is about to block would cost the measured path a
//! lock or a second atomic per op; the summary says how many ops the
//! lateness figures cover instead.
//!
//! The limiter is built unstarted and started only once every worker is
//! running, so the run's clock and the limiter's schedule begin together.
//!
//! The coordinator also fills the limiter every 100 ms (and at each line
//! and at the end). At rates the callers cannot reach (above about 1e9
//! ops/s the active pool's millisecond is more ops than they take in a
//! run) no caller ever waits, so nothing else fills: the backlog, the
//! lateness `acquire` returns and the limiter's mean wait would stay at
//! what they were at the start while the schedule ran away.

mod args;
mod coordinate;
mod cpu;
mod interrupt;
mod limits;
mod plot;
mod report;
mod stalls;
mod worker;

use std::io::Write as _;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use tollgate::spec::Verb;
use tollgate::{RateLimiter, RateSpec};

pub(crate) use self::args::Args;
use self::args::{mega_note, plan, Plan};
use self::coordinate::coordinate;
use self::cpu::CpuTime;
use self::plot::History;
use self::report::{IdleSummary, Printer, Start};
use self::worker::Shared;

/// Runs `tollgate pace`.
pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    let plan = plan(&args)?;
    if !args.use_async && !args.idle {
        limits::check(plan.threads, limits::bounds(worker::CALLER_STACK as u64))?;
    }
    let mut builder = RateLimiter::builder(plan.spec.with_verb(Verb::Configure));
    if let Some(slices) = args.slices {
        builder = builder.slices(slices);
    }
    if let Some(interval) = args.fill_interval {
        builder = builder.fill_interval(interval);
    }
    let limiter = builder
        .try_build()
        .context("cannot start the limiter's filler thread")?;
    // Created now, so that a path that cannot be written fails before the
    // run rather than after it.
    let plot_file = match &args.plot {
        Some(path) => Some(
            std::fs::File::create(path)
                .with_context(|| format!("cannot write the picture to {}", path.display()))?,
        ),
        None => None,
    };
    let mut printer = Printer::new(args.format);
    if args.idle {
        let summary = idle(&limiter, &plan);
        printer.idle(&summary);
        return Ok(());
    }

    printer.start(&Start {
        spec: plan.spec.to_string(),
        note: mega_note(&args.spec.text, &plan.spec),
        mode: mode(args.use_async),
        threads: plan.threads,
        duration: plan.duration,
        interval: plan.interval,
        plot: args.plot.as_ref().map(|p| p.display().to_string()),
    });
    let shared = Arc::new(Shared::new(limiter, plan.threads, plan.op_time));
    let (reports, inbox) = mpsc::channel();
    let runtime = if args.use_async {
        Some(worker::spawn_tasks(&shared, &reports)?)
    } else {
        worker::spawn_threads(&shared, &reports)?;
        None
    };
    drop(reports);
    // From here Ctrl-C ends the run early, with its summary and picture.
    interrupt::catch();
    let mut history = args.plot.as_ref().map(|_| History::default());
    let summary = coordinate(
        &shared,
        &plan,
        &inbox,
        &mut printer,
        history.as_mut(),
        args.use_async,
    );
    printer.summary(&summary);
    if let (Some(path), Some(mut file), Some(history)) = (&args.plot, plot_file, &history) {
        file.write_all(history.svg(&summary).as_bytes())
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    // Workers blocked in `acquire` at a very low rate may not return for a
    // long time: leave them to the process exit instead of joining them.
    if let Some(runtime) = runtime {
        runtime.shutdown_background();
    }
    if summary.interrupted {
        // What a shell expects of a command ended by SIGINT.
        std::process::exit(130);
    }
    Ok(())
}

/// The summary's name for what runs the ops.
fn mode(use_async: bool) -> &'static str {
    if use_async {
        "async"
    } else {
        "threads"
    }
}

/// The idle measurement: a short burst of acquires (so the filler thread
/// has run), then no caller at all while the process's CPU time is taken.
fn idle(limiter: &RateLimiter, plan: &Plan) -> IdleSummary {
    limiter.apply(plan.spec.with_verb(Verb::Start));
    let warm = Instant::now() + Duration::from_millis(50);
    let mut warm_ops = 0u64;
    while let Some(left) = warm.checked_duration_since(Instant::now()) {
        if limiter.acquire_timeout(1, left).is_ok() {
            warm_ops += 1;
        }
    }
    // Let the filler notice that no one waits any more.
    std::thread::sleep(Duration::from_millis(20));
    let cpu_start = CpuTime::of_process();
    let start = Instant::now();
    std::thread::sleep(plan.duration);
    let cpu = CpuTime::of_process() - cpu_start;
    let elapsed = start.elapsed().as_secs_f64();
    IdleSummary {
        spec: plan.spec.to_string(),
        warm_ops,
        elapsed_s: elapsed,
        cpu_user_s: cpu.user.as_secs_f64(),
        cpu_system_s: cpu.system.as_secs_f64(),
        cpu_core_pct: 100.0 * cpu.total().as_secs_f64() / elapsed,
    }
}

/// The most the limiter's active pool holds, in ns of schedule time:
/// `max(1 ms, 2 ops) * burst_ratio` (the token pool's sizing).
fn active_pool_ns(spec: &RateSpec) -> f64 {
    (1e6f64).max(2e9 / spec.ops_per_sec()) * spec.burst_ratio()
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_active_pool_is_a_millisecond_or_two_ops() {
        let fast: RateSpec = "10M,1.1".parse().unwrap();
        assert_eq!(active_pool_ns(&fast), 1e6 * 1.1);
        let slow: RateSpec = "1,2".parse().unwrap();
        assert_eq!(active_pool_ns(&slow), 4e9);
    }
}
