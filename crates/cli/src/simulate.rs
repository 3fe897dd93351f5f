//! `tollgate simulate`: a server tree on a virtual clock; writes a CSV and
//! an SVG chart and prints the convergence figures.

use std::path::PathBuf;

use anyhow::Context as _;
use tollgate_doorman::simulate;

use crate::plot::{Chart, Figure, Series};

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
    Each run writes scenario-N-seed-S.csv (t, capacity, total_wants, total_has per second) \
    and .svg: the root's capacity (dashed) with what the clients hold, and their total \
    wants against the capacity, each on an axis that spans its data.\n\n\
    Mishaps the simulated clients and servers meet are logged at info: \
    RUST_LOG=tollgate_doorman::simulate=info lists them.\n\n\
    Examples:\n  tollgate simulate --scenario 1 --out /tmp/sim\n  \
    tollgate simulate --scenario 4 --seed 7 --seeds 10"
)]
pub(crate) struct Args {
    /// The scenario, 1 to 7 (listed below).
    #[arg(long)]
    scenario: u32,
    /// The random seed; the same seed gives the same run.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Run this many seeds (seed, seed + 1, ...) and print each and the
    /// mean; files are written for the first only.
    #[arg(long, default_value_t = 1)]
    seeds: u64,
    /// Directory for `scenario-N-seed-S.csv` and `.svg` (created).
    #[arg(long, default_value = ".")]
    out: PathBuf,
}

pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let mut totals = (0.0, 0usize, 0.0f64, 0.0, 0.0);
    for i in 0..args.seeds.max(1) {
        let seed = args.seed + i;
        let r = simulate::run(args.scenario, seed)?;
        if i == 0 {
            let base = args
                .out
                .join(format!("scenario-{}-seed-{seed}", args.scenario));
            let (csv, svg) = (base.with_extension("csv"), base.with_extension("svg"));
            std::fs::write(&csv, r.csv()).with_context(|| format!("writing {}", csv.display()))?;
            std::fs::write(&svg, chart(&r))
                .with_context(|| format!("writing {}", svg.display()))?;
            println!("wrote {} and {}", csv.display(), svg.display());
        }
        println!(
            "scenario {} seed {seed}: handed out {:.2}% of the available capacity after \
             learning mode ({:.2}% counting root outages); {}",
            args.scenario,
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
/// Two charts over time, as a self-contained SVG document: the root's
/// capacity with what the clients hold, and the clients' total wants
/// against the capacity. Each axis spans its chart's data, so wants far
/// above the capacity (scenario 7 adds 100 at a time) are drawn whole
/// without flattening what is held. The capacity is dashed and drawn
/// last, so it shows where a line equals it.
fn chart(report: &simulate::Report) -> String {
    let points = |f: fn(&simulate::Sample) -> f64| -> Vec<(f64, f64)> {
        report.samples.iter().map(|s| (s.t as f64, f(s))).collect()
    };
    let capacity = || Series::new("root capacity", "#d62728", points(|s| s.capacity)).dashed();
    let held = Chart::new(
        "Capacity and total has",
        "time since start (s)",
        "capacity units",
    )
    .series(Series::new("total has", "#1f77b4", points(|s| s.has)))
    .series(capacity());
    let wanted = Chart::new(
        "Total wants against the capacity",
        "time since start (s)",
        "capacity units",
    )
    .series(Series::new("total wants", "#2ca02c", points(|s| s.wants)))
    .series(capacity());
    Figure::new(&format!(
        "tollgate simulate: scenario {} (seed {})",
        report.scenario, report.seed
    ))
    .chart(held)
    .chart(wanted)
    .svg()
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }

    #[test]
    fn scenario_seven_draws_all_it_wants_on_an_axis_of_its_own() {
        let svg = chart(&simulate::run(7, 1).unwrap());
        assert!(svg.contains(">Capacity and total has</text>"));
        assert!(svg.contains(">Total wants against the capacity</text>"));
        // has and the capacity; wants and the capacity.
        assert_eq!(svg.matches("<polyline").count(), 4);
    }
}
