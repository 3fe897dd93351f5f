//! A deterministic convergence simulation: the real
//! [`Server`](crate::Server)s (templates, learning mode,
//! algorithms, the intermediate servers' parent poller) and the real lease
//! [`Client`](crate::Client)s, in one process on one
//! virtual clock, through the design doc's scenarios 1 to 7.
//!
//! # Implementation notes
//!
//! Everything runs on a current-thread tokio runtime with paused time: when
//! every task waits, tokio jumps to the next timer, so an hour passes in
//! well under a second and a seed fixes the run. The servers' and clients'
//! Unix clock reads the same virtual time. Clients and intermediate servers
//! reach servers through an in-process transport that calls them directly,
//! so the protocol code (discovery, redirects, backoff, lease expiry,
//! polling the parent) is the code that runs in production; only the
//! sockets are missing.
//!
//! Each node of the tree is a job of three server tasks, at most one of
//! them master (as in Go's simulation); clients know their job's three
//! addresses and find the master with Discovery. An election picks a
//! random task, and if that is the current master nothing changes; losing
//! the master leaves the job without one until the next election.
//!
//! Each second `t`: scheduled events and mishaps happen at `t`; the sample
//! is taken at `t + 0.5 s`: the root's capacity, the sum of the clients'
//! wants, and the sum of their unexpired leases (what the clients hold).
//! Every ten seconds each client's wants drift by a uniform ±10 %.
//! Randomness comes from a seeded SplitMix64.
//!
//! Scenarios (Go's `simulation/scenario_*.py`, protocol §5 and the design
//! doc's "Convergence and shortfall"), all with capacity 500, FAIR_SHARE,
//! 60 s leases, refresh 8/4/2 s at root/region/datacenter and 60 s of
//! learning mode after each election:
//!
//! | scenario | tree | clients | events |
//! |---|---|---|---|
//! | 1 | root | 5 wanting about 100 | none |
//! | 2 | root | as 1 | the root's master is lost at 120 s, elected at 140 s |
//! | 3 | root | as 1 | lost at 120 s, elected at 190 s, after the leases expired |
//! | 4 | root, one region | 5 on the region wanting about 100 | none |
//! | 5 | root, 3 regions, 3 datacenters each | 5 per datacenter wanting about 14.4 | none |
//! | 6 | as 5 | as 5 | two clients want 1000 from 150 s |
//! | 7 | as 5 | as 5 | one hour; every 60 s a mishap: a client's wants +100, a job losing its master for 0 to 60 s, or an election |
//!
//! Scenarios run 600 s, 7 runs 3600 s. The figures count from the end of
//! the first learning mode (60 s).

mod report;
mod scenario;
mod world;

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

mod in_process;

use self::in_process::InProcess;

pub use self::report::{Report, Sample};
use self::scenario::{Setup, Tree};
use self::world::{Rng, VirtualClock, World};

/// Unix time a simulation starts at.
const T0: u64 = 1_700_000_000;

/// The root's capacity in every scenario.
const CAPACITY: f64 = 500.0;

/// When the figures start: the end of the first learning mode.
const LEARNING: u64 = 60;

/// Server tasks per job.
const TASKS: usize = 3;

const ROOT_CONFIG: &str = r#"
resources:
  - identifier_glob: "*"
    capacity: 500
    algorithm: {kind: FAIR_SHARE, lease_length: 60, refresh_interval: 8, learning_mode_duration: 60}
"#;

/// An intermediate server's own template: capacity and timings come from
/// its parent; only learning mode is its own.
const MID_CONFIG: &str = r#"
resources:
  - identifier_glob: "*"
    capacity: 0
    algorithm: {kind: FAIR_SHARE, lease_length: 60, refresh_interval: 8, learning_mode_duration: 60}
"#;

/// Why a simulation could not run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownScenario(pub u32);

impl std::fmt::Display for UnknownScenario {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "unknown scenario {}: the scenarios are 1 to 7", self.0)
    }
}

impl std::error::Error for UnknownScenario {}

/// Runs `scenario` with `seed`.
///
/// The simulation has its own runtime on its own thread, so it may be
/// called from anywhere, inside a tokio runtime too.
///
/// # Errors
///
/// [`UnknownScenario`] for a scenario other than 1 to 7.
pub fn run(scenario: u32, seed: u64) -> Result<Report, UnknownScenario> {
    let setup = Setup::of(scenario)?;
    let samples = std::thread::scope(|s| {
        s.spawn(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(true)
                .build()
                .expect("a current-thread runtime")
                .block_on(simulate(scenario, setup, seed))
        })
        .join()
        .expect("the simulation does not panic")
    });
    Ok(Report::new(scenario, seed, samples))
}

async fn simulate(scenario: u32, setup: Setup, seed: u64) -> Vec<Sample> {
    let origin = Instant::now();
    let mut world = World {
        scenario,
        rng: Rng(seed ^ 0x5EED_0000_0000_0000 ^ u64::from(scenario)),
        transport: Arc::new(InProcess::default()),
        clock: Arc::new(VirtualClock { origin }),
        jobs: Vec::new(),
        clients: Vec::new(),
        elections: Vec::new(),
    };
    let root = world.add_job("root", None);
    let leaves = match setup.tree {
        Tree::Root => vec![root],
        Tree::Region => vec![world.add_job("region0", Some(root))],
        Tree::Planet => {
            let mut leaves = Vec::new();
            for r in 0..3 {
                let region = world.add_job(&format!("region{r}"), Some(root));
                for d in 0..3 {
                    leaves.push(world.add_job(&format!("dc{r}.{d}"), Some(region)));
                }
            }
            leaves
        }
    };
    for leaf in leaves {
        for _ in 0..setup.clients_per_leaf {
            let wants = setup.wants * (0.95 + 0.1 * world.rng.unit());
            world.add_client(leaf, wants);
        }
    }
    let mut samples = Vec::with_capacity(setup.duration as usize + 1);
    for t in 0..=setup.duration {
        tokio::time::sleep_until(origin + Duration::from_secs(t)).await;
        world.events(t);
        tokio::time::sleep_until(origin + Duration::from_millis(t * 1000 + 500)).await;
        samples.push(world.sample(t));
    }
    // The servers hold the transport and the transport the servers.
    world.transport.clear();
    samples
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_fixes_a_run() {
        let a = run(7, 3).unwrap();
        let b = run(7, 3).unwrap();
        assert_eq!(a.samples, b.samples);
        assert_eq!(a.samples.len(), 3601);
        assert_ne!(a.samples, run(7, 4).unwrap().samples);
    }

    #[test]
    fn scenario_one_hands_out_the_capacity_without_overshoot() {
        let r = run(1, 1).unwrap();
        // Learning mode: nothing is held, so nothing is granted.
        assert!(r.samples[..60].iter().all(|s| s.has == 0.0));
        // Then the root hands out what is wanted, up to its capacity.
        assert!(
            r.max_has_over_capacity <= 1.0 + 1e-9,
            "{}",
            r.max_has_over_capacity
        );
        assert_eq!(r.samples_over_capacity, 0);
        for s in &r.samples[80..] {
            assert!(s.has >= 0.9 * s.wants.min(CAPACITY), "{s:?}");
        }
    }

    #[test]
    fn scenario_seven_wants_far_more_than_is_held() {
        let r = run(7, 1).unwrap();
        let most_wanted = r.samples.iter().map(|s| s.wants).fold(0.0, f64::max);
        let most_held = r.samples.iter().map(|s| s.has).fold(0.0, f64::max);
        // Wants climb far above the capacity, and what is held does not.
        assert!(most_wanted > 2.0 * CAPACITY, "{most_wanted}");
        assert!(most_held < 1.1 * CAPACITY, "{most_held}");
    }

    #[test]
    fn scenario_two_keeps_the_leases_through_a_short_root_outage() {
        let r = run(2, 1).unwrap();
        let before = r.samples[119].has;
        assert!(before > 400.0, "{before}");
        // No master from 120 s to 140 s: nothing available, nobody can
        // refresh, and the 60 s leases carry the clients through.
        for s in &r.samples[120..140] {
            assert_eq!(s.capacity, 0.0);
            assert_eq!(s.has, before, "{s:?}");
        }
        // The new master's learning mode echoes what the clients hold.
        for s in &r.samples[140..200] {
            assert_eq!(s.capacity, CAPACITY);
            assert!(s.has >= 0.95 * before, "{s:?}");
        }
    }

    #[test]
    fn scenario_three_loses_the_leases_and_learns_from_nothing() {
        let r = run(3, 1).unwrap();
        assert!(r.samples[119].has > 400.0);
        // The leases run out before the master comes back at 190 s ...
        assert_eq!(r.samples[189].has, 0.0);
        // ... so its learning mode has nothing to echo until 250 s.
        for s in &r.samples[190..250] {
            assert_eq!(s.has, 0.0, "{s:?}");
        }
        assert!(r.samples[260].has > 400.0);
        assert_eq!(r.samples_over_capacity, 0);
    }

    #[test]
    fn scenario_four_hands_out_through_a_region() {
        let r = run(4, 1).unwrap();
        assert_eq!(r.samples_over_capacity, 0);
        // The region passes on what its clients want, up to the capacity.
        for s in &r.samples[80..] {
            assert!(s.has >= 0.9 * s.wants.min(CAPACITY), "{s:?}");
        }
    }

    #[test]
    fn scenario_seven_survives_its_mishaps() {
        for seed in 1..=3 {
            let r = run(7, seed).unwrap();
            assert_eq!(r.samples.len(), 3601);
            assert!(
                r.mean_handed_out > 0.9,
                "seed {seed}: {}",
                r.mean_handed_out
            );
            assert!(
                r.max_has_over_capacity < 1.1,
                "seed {seed}: {}",
                r.max_has_over_capacity
            );
        }
    }

    #[test]
    fn unknown_scenarios_are_refused() {
        assert_eq!(run(0, 0).unwrap_err(), UnknownScenario(0));
        assert_eq!(run(8, 0).unwrap_err(), UnknownScenario(8));
    }
}
