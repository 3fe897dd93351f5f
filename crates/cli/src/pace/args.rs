//! The arguments of `tollgate pace`, checked and resolved into a plan.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, ensure};
use tollgate::spec::Verb;
use tollgate::RateSpec;

use super::report::Format;
use super::stalls::Stalls;

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
    pub(super) spec: SpecArg,
    /// Caller threads (tokio tasks with --async), at most 100000. A thread
    /// count the machine cannot start (each thread takes four memory maps
    /// and a pid) is refused before the run, naming the limit.
    #[arg(short, long, default_value_t = 2, value_parser = parse_threads)]
    pub(super) threads: usize,
    /// How long to run.
    #[arg(short, long, default_value = "5s", value_parser = parse_duration, allow_hyphen_values = true)]
    pub(super) duration: Duration,
    /// The synthetic op: busy-wait this long after each acquire.
    #[arg(long, value_parser = parse_duration, allow_hyphen_values = true)]
    pub(super) op_time: Option<Duration>,
    /// Stall every caller for --stall-for, every this often.
    #[arg(long, value_parser = parse_duration, requires = "stall_for", allow_hyphen_values = true)]
    pub(super) stall_every: Option<Duration>,
    /// Stall every caller for --stall-for once, this long into the run.
    #[arg(long, value_parser = parse_duration, requires = "stall_for", allow_hyphen_values = true)]
    pub(super) stall_at: Option<Duration>,
    /// How long a stall lasts (with --stall-every or --stall-at).
    #[arg(long, value_parser = parse_duration, allow_hyphen_values = true)]
    pub(super) stall_for: Option<Duration>,
    /// Run the callers as tokio tasks using `acquire_async`.
    #[arg(long = "async")]
    pub(super) use_async: bool,
    /// Output: text for people, csv or json (one object a line) for plots.
    /// Each starts with what the run does (a `# start` line in csv, a
    /// `start` object in json); lateness fields are `lateness_*`.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub(super) format: Format,
    /// Also draw the run in FILE as an SVG picture: achieved rate against
    /// the target, the backlog, and lateness p50/p99/max per --interval,
    /// over time. FILE must end in `.svg`; it is created before the run
    /// starts, so a path that cannot be written is an error at once. A run
    /// ended by Ctrl-C (SIGINT) still prints its summary and draws what ran.
    #[arg(long, value_name = "FILE.svg", conflicts_with = "idle")]
    pub(super) plot: Option<PathBuf>,
    /// How often to print a line.
    #[arg(short, long, default_value = "1s", value_parser = parse_duration, allow_hyphen_values = true)]
    pub(super) interval: Duration,
    /// Slices of the limiter's active pool (default: the library's choice).
    #[arg(long)]
    pub(super) slices: Option<usize>,
    /// The limiter's fill interval (default: the library's, 500us).
    #[arg(long, value_parser = parse_duration, allow_hyphen_values = true)]
    pub(super) fill_interval: Option<Duration>,
    /// Measure an idle limiter instead: after 50 ms of acquires, no caller
    /// for --duration; report the process's CPU time.
    #[arg(long, conflicts_with_all = ["op_time", "stall_every", "stall_at", "use_async"])]
    pub(super) idle: bool,
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
pub(super) struct SpecArg {
    pub(super) spec: RateSpec,
    pub(super) text: String,
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
pub(super) fn mega_note(text: &str, spec: &RateSpec) -> Option<String> {
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

/// Arguments checked and resolved.
#[derive(Debug)]
pub(super) struct Plan {
    pub(super) spec: RateSpec,
    pub(super) threads: usize,
    pub(super) duration: Duration,
    pub(super) interval: Duration,
    pub(super) op_time: Duration,
    pub(super) stalls: Option<Stalls>,
    /// The limiter's fill interval, if not the library's.
    pub(super) fill_interval: Option<Duration>,
}

pub(super) fn plan(args: &Args) -> anyhow::Result<Plan> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
