//! `tollgate simulate`: a server tree on a virtual clock, one of the
//! design doc's scenarios or a fleet file; writes a CSV and an SVG chart
//! and prints the figures.

use std::io::{IsTerminal as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

use anyhow::Context as _;
use tollgate_simulate::{self as simulate, Fleet, Report};

use crate::plot::{self, Chart, Figure, Series};

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Scenarios (capacity 500, FAIR_SHARE, 60 s leases, 60 s of learning mode \
    after each election; 600 s each, 7 runs an hour):\n  \
    1  a root, 5 clients wanting about 100 each\n  \
    2  as 1; the root loses its master at 120 s, a new one is elected at 140 s\n  \
    3  as 1; the root loses its master at 120 s, elected again at 190 s, after the leases expired\n  \
    4  a root and one region; 5 clients on the region wanting about 100 each\n  \
    5  a root, 3 regions, 3 datacenters each; 5 clients per datacenter wanting about 14.4\n  \
    6  as 5; two clients want 1000 from 150 s\n  \
    7  as 5 for an hour; every 60 s a mishap: a client's wants +100, a job losing its \
    master for up to 60 s, or an election\n\n\
    Each scenario is a fleet file (crates/simulate/examples/fleets/scenario-N.yaml). A fleet \
    file describes the tree (levels, jobs, tasks, server configurations), the clients and a \
    timeline of events: lose_master, elect, failover, kill, restart, partition, etcd_outage, \
    join, leave, capacity, set_wants (see the simulate module's docs).\n\n\
    Each run writes NAME-seed-S.csv (per second: capacity, total wants and has, clients \
    without a lease, and per level what its masters hold, have handed out and the RPCs they \
    took) and .svg: what the clients hold against the capacity, and one panel per level, \
    with the events marked on the time axis. It prints a summary: the share of the capacity \
    handed out, RPCs per level, overshoots and the time to converge after each event. A \
    fleet run shows its progress on stderr.\n\n\
    Mishaps the simulated clients and servers meet are logged at info: \
    RUST_LOG=tollgate_simulate=info lists them.\n\n\
    Examples:\n  tollgate simulate --scenario 1 --out /tmp/sim\n  \
    tollgate simulate --scenario 4 --seed 7 --seeds 10\n  \
    tollgate simulate --fleet docs/fleet/region-failover.yaml --out /tmp/sim"
)]
pub(crate) struct Args {
    /// The scenario, 1 to 7 (listed below).
    #[arg(long, required_unless_present = "fleet", conflicts_with = "fleet")]
    scenario: Option<u32>,
    /// A fleet file (YAML) to run instead of a scenario.
    #[arg(long)]
    fleet: Option<PathBuf>,
    /// The random seed; the same seed gives the same run.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Run this many seeds (seed, seed + 1, ...) and print each and the
    /// mean; files are written for the first only.
    #[arg(long, default_value_t = 1)]
    seeds: u64,
    /// Directory for the `.csv` and `.svg` files (created).
    #[arg(long, default_value = ".")]
    out: PathBuf,
}

pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    let (fleet, stem) = match (&args.fleet, args.scenario) {
        (Some(path), _) => {
            let fleet = Fleet::from_file(path).with_context(|| format!("{}", path.display()))?;
            (fleet, file_stem(path))
        }
        (None, Some(n)) => (simulate::scenario(n)?, format!("scenario-{n}")),
        (None, None) => anyhow::bail!("give --scenario or --fleet"),
    };
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let mut totals = (0.0, 0usize, 0.0f64, 0.0, 0.0);
    for i in 0..args.seeds.max(1) {
        let seed = args.seed + i;
        let r = match args.fleet {
            Some(_) => with_progress(&fleet, seed),
            None => simulate::run_fleet(&fleet, seed, None),
        };
        if i == 0 {
            let base = args.out.join(format!("{stem}-seed-{seed}"));
            let (csv, svg) = (base.with_extension("csv"), base.with_extension("svg"));
            std::fs::write(&csv, r.csv()).with_context(|| format!("writing {}", csv.display()))?;
            std::fs::write(&svg, chart(&r))
                .with_context(|| format!("writing {}", svg.display()))?;
            println!("wrote {} and {}", csv.display(), svg.display());
            if args.fleet.is_some() {
                print!("{}", r.summary());
            }
        }
        println!(
            "{} seed {seed}: handed out {:.2}% of the available capacity after \
             learning mode ({:.2}% counting root outages); {}",
            r.name,
            100.0 * r.mean_handed_out,
            100.0 * r.mean_handed_out_all,
            over_capacity(
                r.samples_over_capacity,
                r.max_has_over_capacity,
                r.mean_has_over_capacity_when_over
            ),
        );
        totals.0 += r.mean_handed_out;
        totals.1 += r.samples_over_capacity;
        totals.2 = totals.2.max(r.max_has_over_capacity);
        totals.3 += r.mean_has_over_capacity_when_over * r.samples_over_capacity as f64;
        totals.4 += r.mean_handed_out_all;
    }
    if args.seeds > 1 {
        let n = args.seeds as f64;
        println!(
            "over {} seeds: handed out {:.2}% of the available capacity on average \
             ({:.2}% counting root outages); {}",
            args.seeds,
            100.0 * totals.0 / n,
            100.0 * totals.4 / n,
            over_capacity(totals.1, totals.2, totals.3 / (totals.1.max(1) as f64)),
        );
    }
    Ok(())
}

fn file_stem(path: &Path) -> String {
    path.file_stem()
        .map_or_else(|| "fleet".to_owned(), |s| s.to_string_lossy().into_owned())
}

/// Runs `fleet`, showing on stderr how far the virtual clock is: on a
/// terminal one line rewritten every half second of wall time, else a line
/// every five seconds (and one at the end).
fn with_progress(fleet: &Fleet, seed: u64) -> Report {
    let start = Instant::now();
    let last = Mutex::new(start);
    let tty = std::io::stderr().is_terminal();
    let duration = fleet.duration;
    let progress = move |t: u64| {
        let mut last = last.lock().unwrap_or_else(|e| e.into_inner());
        let every = if tty { 500 } else { 5000 };
        if last.elapsed().as_millis() < every && t < duration {
            return;
        }
        *last = Instant::now();
        let line = format!(
            "simulated {t} of {duration} s in {:.1} s",
            start.elapsed().as_secs_f64()
        );
        let mut err = std::io::stderr().lock();
        let _ = if tty {
            write!(err, "\r{line}")
        } else {
            writeln!(err, "{line}")
        };
        if tty && t >= duration {
            let _ = writeln!(err);
        }
    };
    simulate::run_fleet(fleet, seed, Some(&progress))
}

/// The figures about holding more than the capacity: `0 samples over
/// capacity (max has/capacity 100.00%)`, or with the mean over those
/// samples when there are any.
fn over_capacity(samples: usize, max: f64, mean_when_over: f64) -> String {
    let max = format!("max has/capacity {:.2}%", 100.0 * max);
    match samples {
        0 => format!("no sample over capacity ({max})"),
        n => format!(
            "{n} samples over capacity; {max}, mean has/capacity over those samples {:.2}%",
            100.0 * mean_when_over
        ),
    }
}

/// The run's events as numbered marks over its length, and their key.
fn event_marks(report: &Report) -> (Vec<plot::Mark>, Vec<String>) {
    let events: Vec<(f64, String)> = report
        .events
        .iter()
        .map(|e| (e.t as f64, e.what.clone()))
        .collect();
    let span = report.samples.last().map_or(1.0, |s| s.t as f64);
    plot::event_marks(&events, span)
}

/// The run as a self-contained SVG document: the root's capacity with
/// what the clients hold, and their total wants against the capacity
/// (each on an axis that spans its data, so wants far above the capacity
/// are drawn whole without flattening what is held); then, for trees of
/// more than one level, one panel per level with what its masters hold
/// and have handed out. The capacity is dashed and drawn last, so it shows
/// where a line equals it; events are marked on the time axis.
fn chart(report: &Report) -> String {
    let points = |f: &dyn Fn(&simulate::Sample) -> f64| -> Vec<(f64, f64)> {
        report.samples.iter().map(|s| (s.t as f64, f(s))).collect()
    };
    let (marks, key) = event_marks(report);
    let capacity = || Series::new("root capacity", "#d62728", points(&|s| s.capacity)).dashed();
    let held = Chart::new(
        "Capacity and total has",
        "time since start (s)",
        "capacity units",
    )
    .series(Series::new("total has", "#1f77b4", points(&|s| s.has)))
    .series(capacity())
    .marks(marks.clone());
    let wanted = Chart::new(
        "Total wants against the capacity",
        "time since start (s)",
        "capacity units",
    )
    .series(Series::new("total wants", "#2ca02c", points(&|s| s.wants)))
    .series(capacity())
    .marks(marks.clone());
    let mut figure = Figure::new(&format!(
        "tollgate simulate: {} (seed {})",
        report.name, report.seed
    ))
    .chart(held)
    .chart(wanted);
    if !key.is_empty() {
        let mut notes = vec!["Events (numbered at the top of each chart):".to_owned()];
        notes.extend(key);
        figure = figure.notes(notes);
    }
    if report.level_names.len() > 1 {
        for (l, name) in report.level_names.iter().enumerate() {
            let level = |f: fn(&simulate::LevelSample) -> f64| -> Vec<(f64, f64)> {
                report
                    .samples
                    .iter()
                    .zip(&report.levels)
                    .map(|(s, ls)| (s.t as f64, f(&ls[l])))
                    .collect()
            };
            figure = figure.chart(
                Chart::new(
                    &format!("Level {name}: handed out against what its masters hold"),
                    "time since start (s)",
                    "capacity units",
                )
                .series(Series::new(
                    "handed out",
                    "#1f77b4",
                    level(|s| s.handed_out),
                ))
                .series(Series::new("held", "#d62728", level(|s| s.available)).dashed())
                .marks(marks.clone()),
            );
        }
    }
    figure.svg()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn escape_text(text: &str) -> String {
        text.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('"', "&quot;")
    }

    #[test]
    fn over_capacity_names_what_it_counts() {
        assert_eq!(
            over_capacity(0, 1.0, 0.0),
            "no sample over capacity (max has/capacity 100.00%)"
        );
        assert_eq!(
            over_capacity(3, 1.05, 1.02),
            "3 samples over capacity; max has/capacity 105.00%, \
             mean has/capacity over those samples 102.00%"
        );
    }

    #[test]
    fn scenario_one_is_drawn_with_round_ticks_and_the_capacity_on_top() {
        let svg = chart(&simulate::run(1, 1).unwrap());
        // Round ticks over 600 s and up to the most wanted, and the
        // capacity dashed on top of the lines it may hide under.
        for tick in ["0", "100", "200", "300", "400", "500", "600"] {
            assert!(svg.contains(&format!(">{tick}</text>")), "{tick}");
        }
        assert!(svg.contains(">time since start (s)</text>"));
        let has = svg.find(r##"stroke="#1f77b4""##).unwrap();
        let capacity = svg.find(r##"stroke="#d62728" stroke-width="1.6" stroke-dasharray"##);
        assert!(capacity.unwrap() > has);
        // No events, no marks; one level, no level panels.
        assert!(!svg.contains("#ff7f0e"));
        assert!(!svg.contains("Level root"));
    }

    #[test]
    fn scenario_seven_draws_a_panel_per_level_and_marks_its_mishaps() {
        let report = simulate::run(7, 1).unwrap();
        let svg = chart(&report);
        assert!(svg.contains(">Capacity and total has</text>"));
        assert!(svg.contains(">Total wants against the capacity</text>"));
        for level in ["root", "region", "dc"] {
            let title = format!(">Level {level}: handed out against what its masters hold</text>");
            assert!(svg.contains(&title), "{level}");
        }
        // has and the capacity; wants and the capacity; two per level.
        assert_eq!(svg.matches("<polyline").count(), 4 + 2 * 3);
        // Events close together share a numbered mark, drawn in each of the
        // five panels, and the key under the charts names them all.
        let (marks, key) = event_marks(&report);
        assert!(!report.events.is_empty());
        assert!(marks.len() <= 60, "at most 60 marks: {}", marks.len());
        assert_eq!(
            svg.matches(r##"stroke="#ff7f0e""##).count(),
            5 * marks.len()
        );
        assert!(svg.contains(">Events (numbered at the top of each chart):</text>"));
        for line in key {
            assert!(
                svg.contains(&format!(">{}</text>", escape_text(&line))),
                "{line}"
            );
        }
    }
}
