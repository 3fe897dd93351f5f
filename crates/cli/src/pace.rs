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
//! waiting past the end are reported too. A thread blocked past the end
//! is not: knowing it is about to block would cost the measured path a
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

mod cpu;
mod interrupt;
mod limits;
mod plot;
mod report;
mod worker;

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context as _};
use hdrhistogram::Histogram;
use tollgate::spec::Verb;
use tollgate::{RateLimiter, RateSpec};

use self::cpu::{CpuTime, HostCpu};
use self::plot::History;
use self::report::{Format, IdleSummary, Lateness, Line, Printer, Start, Summary};
use self::worker::{new_histogram, Control, Report, Shared};

/// Options of `tollgate pace`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Durations read like 5s, 250ms, 1m30s or 20us.\n\n\
    Examples:\n  tollgate pace\n  tollgate pace 1M --threads 8 --duration 3s --format json\n  \
    tollgate pace 100K,1.5 --stall-at 1s --stall-for 1s --interval 250ms\n  \
    tollgate pace 100K,1.5 --duration 3s --interval 100ms --plot pace.svg")]
pub(crate) struct Args {
    /// The rate spec: `<rate>[,<burst_ratio>][,<verb>]`, e.g. `10M,1.1`,
    /// `2500,1.5` or `1000,1.05,restart`.
    ///
    /// `<rate>` is ops per second, as `12000`, `1.5K`, `10M` or `1E6`
    /// (optionally followed by `/s`). `<burst_ratio>` (1 to 1000, default
    /// 1.1) is how much faster than the rate the limiter admits ops while it
    /// catches up on a backlog. The separators `,` `:` and `;` are alike.
    /// `<verb>` is what applying the spec does: `configure` (set the rate,
    /// do not start), `start` (the default: start if idle, else apply) or
    /// `restart` (clear the pools and the backlog, as if new). pace builds a
    /// new limiter and starts it once every caller runs, so here the verb
    /// changes nothing.
    ///
    /// Suffixes are read in either case: `10m` is 10M ops/s (mega, not
    /// milli), and the start line says so.
    #[arg(default_value = "10M,1.1", value_parser = parse_spec, verbatim_doc_comment)]
    spec: SpecArg,
    /// Caller threads (tokio tasks with --async), at most 100000. A thread
    /// count the machine cannot start (each thread takes four memory maps
    /// and a pid) is refused before the run, naming the limit.
    #[arg(short, long, default_value_t = 2, value_parser = parse_threads)]
    threads: usize,
    /// How long to run.
    #[arg(short, long, default_value = "5s", value_parser = parse_duration, allow_hyphen_values = true)]
    duration: Duration,
    /// The synthetic op: busy-wait this long after each acquire.
    #[arg(long, value_parser = parse_duration, allow_hyphen_values = true)]
    op_time: Option<Duration>,
    /// Stall every caller for --stall-for, every this often.
    #[arg(long, value_parser = parse_duration, requires = "stall_for", allow_hyphen_values = true)]
    stall_every: Option<Duration>,
    /// Stall every caller for --stall-for once, this long into the run.
    #[arg(long, value_parser = parse_duration, requires = "stall_for", allow_hyphen_values = true)]
    stall_at: Option<Duration>,
    /// How long a stall lasts (with --stall-every or --stall-at).
    #[arg(long, value_parser = parse_duration, allow_hyphen_values = true)]
    stall_for: Option<Duration>,
    /// Run the callers as tokio tasks using `acquire_async`.
    #[arg(long = "async")]
    use_async: bool,
    /// Output: text for people, csv or json (one object a line) for plots.
    /// Each starts with what the run does (a `# start` line in csv, a
    /// `start` object in json); lateness fields are `lateness_*`.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Also draw the run in FILE as an SVG picture: achieved rate against
    /// the target, the backlog, and lateness p50/p99/max per --interval,
    /// over time. FILE must end in `.svg`; it is created before the run
    /// starts, so a path that cannot be written is an error at once. A run
    /// ended by Ctrl-C (SIGINT) still prints its summary and draws what ran.
    #[arg(long, value_name = "FILE.svg", conflicts_with = "idle")]
    plot: Option<PathBuf>,
    /// How often to print a line.
    #[arg(short, long, default_value = "1s", value_parser = parse_duration, allow_hyphen_values = true)]
    interval: Duration,
    /// Slices of the limiter's active pool (default: the library's choice).
    #[arg(long)]
    slices: Option<usize>,
    /// The limiter's fill interval (default: the library's, 500us).
    #[arg(long, value_parser = parse_duration, allow_hyphen_values = true)]
    fill_interval: Option<Duration>,
    /// Measure an idle limiter instead: after 50 ms of acquires, no caller
    /// for --duration; report the process's CPU time.
    #[arg(long, conflicts_with_all = ["op_time", "stall_every", "stall_at", "use_async"])]
    idle: bool,
}

/// The shortest fill interval the limiter takes (shorter ones are raised to
/// it); pace refuses them instead of running something else than asked.
const MIN_FILL_INTERVAL: Duration = Duration::from_micros(10);
/// The longest fill interval pace takes: beyond it, no run sees a fill.
const MAX_FILL_INTERVAL: Duration = Duration::from_secs(3600);

/// Most callers pace runs: far more than needed to oversubscribe any core.
const MAX_THREADS: usize = 100_000;

fn parse_threads(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) if n > MAX_THREADS => Err(format!("must be at most {MAX_THREADS}")),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    crate::cli::duration(text)
}

/// The rate spec and how it was written.
#[derive(Debug, Clone)]
struct SpecArg {
    spec: RateSpec,
    text: String,
}

fn parse_spec(text: &str) -> Result<SpecArg, String> {
    let spec = text.parse::<RateSpec>().map_err(|e| e.to_string())?;
    Ok(SpecArg {
        spec,
        text: text.trim().to_owned(),
    })
}

/// What a rate written with a lowercase `m` means, said because `m` reads
/// as milli elsewhere: `10m = 10M ops/s`. `None` for any other spelling.
fn mega_note(text: &str, spec: &RateSpec) -> Option<String> {
    let rate = text.split([',', ':', ';']).next()?.trim();
    let rate = rate
        .strip_suffix("/s")
        .or_else(|| rate.strip_suffix("/S"))
        .unwrap_or(rate);
    rate.ends_with('m').then(|| {
        let spelled = spec.with_verb(Verb::Start).to_string();
        let canonical = spelled.split(',').next().unwrap_or(&spelled);
        format!("{rate} = {canonical} ops/s")
    })
}

/// When the callers stall: once at `at`, and/or every `every`, for `length`.
#[derive(Debug, Clone, Copy)]
struct Stalls {
    at: Option<Duration>,
    every: Option<Duration>,
    length: Duration,
}

impl Stalls {
    fn stalled(&self, t: Duration) -> bool {
        let once = self.at.is_some_and(|at| t >= at && t < at + self.length);
        let periodic = self.every.is_some_and(|every| {
            t >= every && t.as_nanos() % every.as_nanos() < self.length.as_nanos()
        });
        once || periodic
    }

    /// The first time after `t` at which [`Stalls::stalled`] may change.
    fn next_change(&self, t: Duration) -> Option<Duration> {
        let mut candidates = Vec::with_capacity(4);
        if let Some(at) = self.at {
            candidates.extend([at, at + self.length]);
        }
        if let Some(every) = self.every {
            let k = u32::try_from(t.as_nanos() / every.as_nanos()).unwrap_or(u32::MAX);
            let start = every * k.max(1);
            candidates.extend([start, start + self.length, every * k.saturating_add(1)]);
        }
        candidates.into_iter().filter(|&c| c > t).min()
    }
}

/// Arguments checked and resolved.
#[derive(Debug)]
struct Plan {
    spec: RateSpec,
    threads: usize,
    duration: Duration,
    interval: Duration,
    op_time: Duration,
    stalls: Option<Stalls>,
    /// The limiter's fill interval, if not the library's.
    fill_interval: Option<Duration>,
}

fn plan(args: &Args) -> anyhow::Result<Plan> {
    ensure!(!args.duration.is_zero(), "--duration must be positive");
    if let Some(path) = &args.plot {
        let svg = path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("svg"));
        ensure!(
            svg,
            "--plot {} must name an .svg file: the picture is SVG (convert it afterwards \
             for another format, e.g. `rsvg-convert -o pace.png pace.svg`)",
            path.display()
        );
    }
    ensure!(
        args.interval >= Duration::from_millis(10),
        "--interval must be at least 10ms"
    );
    if args.slices == Some(0) {
        bail!("--slices must be at least 1");
    }
    if let Some(interval) = args.fill_interval {
        ensure!(
            (MIN_FILL_INTERVAL..=MAX_FILL_INTERVAL).contains(&interval),
            "--fill-interval must be between 10us and 1h (got {})",
            humantime::format_duration(interval)
        );
    }
    let stalls = match (args.stall_at, args.stall_every, args.stall_for) {
        (None, None, None) => None,
        (None, None, Some(_)) => bail!("--stall-for needs --stall-at or --stall-every"),
        (at, every, Some(length)) => {
            ensure!(!length.is_zero(), "--stall-for must be positive");
            let run = humantime::format_duration(args.duration);
            if let Some(at) = at {
                ensure!(
                    at < args.duration,
                    "--stall-at {} is not within the run (--duration {run}): no stall would happen",
                    humantime::format_duration(at)
                );
            }
            if let Some(every) = every {
                ensure!(
                    every < args.duration,
                    "--stall-every {} is not shorter than the run (--duration {run}): \
                     no stall would happen",
                    humantime::format_duration(every)
                );
                ensure!(
                    every > length,
                    "--stall-every ({}) must be longer than --stall-for ({})",
                    humantime::format_duration(every),
                    humantime::format_duration(length)
                );
            }
            Some(Stalls { at, every, length })
        }
        // clap's `requires` rules this out.
        (_, _, None) => bail!("--stall-at and --stall-every need --stall-for"),
    };
    Ok(Plan {
        spec: args.spec.spec,
        threads: args.threads,
        duration: args.duration,
        interval: args.interval,
        op_time: args.op_time.unwrap_or_default(),
        stalls,
        fill_interval: args.fill_interval,
    })
}

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

    /// Adds the histograms of the tasks waiting in `acquire_async` now.
    fn merge_parked(&mut self, shared: &Shared) {
        for histogram in shared.take_parked() {
            self.open.add(&histogram).expect("histograms auto-resize");
            self.total.add(&histogram).expect("histograms auto-resize");
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

/// How long a line waits for histograms from workers blocked across its end.
fn grace(interval: Duration) -> Duration {
    (interval / 4).min(Duration::from_millis(50))
}

fn coordinate(
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
    // line.
    run.print_pending();
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
        run.merge_parked(shared);
        while run.pending.is_some() {
            let deadline = run.pending.as_ref().map_or(end.0, |p| p.deadline);
            run.wait(inbox, deadline);
        }
    } else {
        run.merge_parked(shared);
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

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn the_help_gives_every_verb_of_the_spec_grammar() {
        use clap::CommandFactory as _;

        #[derive(clap::Parser)]
        struct Pace {
            #[command(flatten)]
            args: Args,
        }
        let help = Pace::command().render_long_help().to_string();
        assert!(help.contains("<rate>[,<burst_ratio>][,<verb>]"), "{help}");
        for (name, verb) in [
            ("configure", Verb::Configure),
            ("start", Verb::Start),
            ("restart", Verb::Restart),
        ] {
            assert!(help.contains(&format!("`{name}`")), "{name}: {help}");
            let spec: RateSpec = format!("1000,1.05,{name}").parse().unwrap();
            assert_eq!(spec.verb(), verb);
        }
        assert!(help.contains("--fill-interval"));
        assert!(help.contains("the library's, 500us"), "{help}");
    }

    #[test]
    fn a_fill_interval_outside_10us_to_1h_is_refused() {
        #[derive(clap::Parser)]
        struct Pace {
            #[command(flatten)]
            args: Args,
        }
        let plan_for = |interval: &str| {
            let pace =
                <Pace as clap::Parser>::try_parse_from(["pace", "1K", "--fill-interval", interval])
                    .expect("valid arguments");
            plan(&pace.args).map(|_| ()).map_err(|e| e.to_string())
        };
        assert_eq!(plan_for("10us"), Ok(()));
        assert_eq!(plan_for("1h"), Ok(()));
        assert_eq!(
            plan_for("0s"),
            Err("--fill-interval must be between 10us and 1h (got 0s)".into())
        );
        assert_eq!(
            plan_for("9us"),
            Err("--fill-interval must be between 10us and 1h (got 9us)".into())
        );
        assert_eq!(
            plan_for("2h"),
            Err("--fill-interval must be between 10us and 1h (got 2h)".into())
        );
    }

    /// `plan` of `tollgate pace ARGS`, its error as text.
    fn plan_of(args: &[&str]) -> Result<(), String> {
        #[derive(clap::Parser)]
        struct Pace {
            #[command(flatten)]
            args: Args,
        }
        let argv = std::iter::once("pace").chain(args.iter().copied());
        let pace = <Pace as clap::Parser>::try_parse_from(argv).expect("valid arguments");
        plan(&pace.args).map(|_| ()).map_err(|e| e.to_string())
    }

    #[test]
    fn a_stall_outside_the_run_is_refused() {
        assert_eq!(
            plan_of(&[
                "1K",
                "--duration",
                "1s",
                "--stall-at",
                "5s",
                "--stall-for",
                "1s"
            ]),
            Err(
                "--stall-at 5s is not within the run (--duration 1s): no stall would happen".into()
            )
        );
        assert!(plan_of(&["--duration", "1s", "--stall-at", "1s", "--stall-for", "1s"]).is_err());
        assert_eq!(
            plan_of(&[
                "--duration",
                "1s",
                "--stall-at",
                "999ms",
                "--stall-for",
                "1s"
            ]),
            Ok(())
        );
        assert_eq!(
            plan_of(&[
                "--duration",
                "2s",
                "--stall-every",
                "3s",
                "--stall-for",
                "1s"
            ]),
            Err(
                "--stall-every 3s is not shorter than the run (--duration 2s): \
                 no stall would happen"
                    .into()
            )
        );
        assert_eq!(
            plan_of(&[
                "--duration",
                "4s",
                "--stall-every",
                "3s",
                "--stall-for",
                "1s"
            ]),
            Ok(())
        );
    }

    #[test]
    fn a_plot_must_be_an_svg_file() {
        assert_eq!(
            plan_of(&["--plot", "x.png"]),
            Err(
                "--plot x.png must name an .svg file: the picture is SVG (convert it \
                 afterwards for another format, e.g. `rsvg-convert -o pace.png pace.svg`)"
                    .into()
            )
        );
        assert!(plan_of(&["--plot", "x"]).is_err());
        assert_eq!(plan_of(&["--plot", "x.svg"]), Ok(()));
        assert_eq!(plan_of(&["--plot", "dir/X.SVG"]), Ok(()));
    }

    #[test]
    fn a_lowercase_m_is_mega_and_said_so() {
        let note = |text: &str| {
            let arg = parse_spec(text).unwrap();
            mega_note(&arg.text, &arg.spec)
        };
        assert_eq!(note("10m"), Some("10m = 10M ops/s".into()));
        assert_eq!(note("2.5m/s,1.5"), Some("2.5m = 2.5M ops/s".into()));
        assert_eq!(note("10m:1.1:restart"), Some("10m = 10M ops/s".into()));
        assert_eq!(note("10M"), None);
        assert_eq!(note("1e6"), None);
        assert_eq!(note("500k"), None);
    }

    #[test]
    fn the_active_pool_is_a_millisecond_or_two_ops() {
        let fast: RateSpec = "10M,1.1".parse().unwrap();
        assert_eq!(active_pool_ns(&fast), 1e6 * 1.1);
        let slow: RateSpec = "1,2".parse().unwrap();
        assert_eq!(active_pool_ns(&slow), 4e9);
    }

    #[test]
    fn one_stall() {
        let s = Stalls {
            at: Some(1000 * MS),
            every: None,
            length: 500 * MS,
        };
        assert!(!s.stalled(999 * MS));
        assert!(s.stalled(1000 * MS));
        assert!(s.stalled(1499 * MS));
        assert!(!s.stalled(1500 * MS));
        assert_eq!(s.next_change(Duration::ZERO), Some(1000 * MS));
        assert_eq!(s.next_change(1000 * MS), Some(1500 * MS));
        assert_eq!(s.next_change(1500 * MS), None);
    }

    #[test]
    fn periodic_stalls() {
        let s = Stalls {
            at: None,
            every: Some(1000 * MS),
            length: 100 * MS,
        };
        assert!(!s.stalled(50 * MS), "no stall at the very start");
        assert!(s.stalled(1000 * MS));
        assert!(s.stalled(2050 * MS));
        assert!(!s.stalled(2100 * MS));
        assert_eq!(s.next_change(50 * MS), Some(1000 * MS));
        assert_eq!(s.next_change(1000 * MS), Some(1100 * MS));
        assert_eq!(s.next_change(1100 * MS), Some(2000 * MS));
    }
}
