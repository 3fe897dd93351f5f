//! A deterministic convergence simulation: the real [`Server`]s (templates,
//! learning mode, algorithms, the intermediate servers' parent poller) and
//! the real lease [`Client`]s, in one process on one virtual clock, through
//! the design doc's scenarios 1 to 7.
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

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tracing::info;

mod in_process;

use super::client::{Client, ExpiryMode, Resource, ResourceOptions};
use super::clock::WallClock;
use super::config::Config;
use super::election::{Election, Mastership};
use super::lease::Timestamp;
use super::server::{Parent, Server};
use in_process::InProcess;

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

/// One sample: what the chart plots.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Seconds since the start.
    pub t: u64,
    /// The capacity available at the root: its configured capacity while
    /// the root job has a master, else 0 (the drop in the design doc's
    /// chart during a root crash).
    pub capacity: f64,
    /// Sum of the clients' wants.
    pub wants: f64,
    /// Sum of the clients' unexpired grants.
    pub has: f64,
}

/// A finished run and its figures.
#[derive(Debug, Clone)]
pub struct Report {
    /// The scenario run.
    pub scenario: u32,
    /// The seed used.
    pub seed: u64,
    /// One sample per second.
    pub samples: Vec<Sample>,
    /// Mean of `has / capacity` after the first learning mode, over the
    /// samples with capacity available (the root job has a master).
    pub mean_handed_out: f64,
    /// Mean of `has` over the configured capacity after the first learning
    /// mode, over all samples (root outages count as capacity not handed
    /// out).
    pub mean_handed_out_all: f64,
    /// Samples (after the first learning mode) with `has` above the
    /// configured capacity.
    pub shortfall_samples: usize,
    /// Largest `has` over the configured capacity after the first learning
    /// mode.
    pub max_overshoot: f64,
    /// Mean `has` over the configured capacity, over the shortfall samples
    /// (0 without any).
    pub mean_overshoot: f64,
}

impl Report {
    /// The figures of a run's samples, counted from the end of the first
    /// learning mode.
    fn new(scenario: u32, seed: u64, samples: Vec<Sample>) -> Report {
        let settled: Vec<&Sample> = samples.iter().filter(|s| s.t >= LEARNING).collect();
        // Folded from +0.0: an empty `sum` of floats is -0.0.
        let mean = |v: &[f64]| v.iter().fold(0.0, |a, b| a + b) / v.len().max(1) as f64;
        let available: Vec<f64> = settled
            .iter()
            .filter(|s| s.capacity > 0.0)
            .map(|s| s.has / s.capacity)
            .collect();
        let fraction: Vec<f64> = settled.iter().map(|s| s.has / CAPACITY).collect();
        let over: Vec<f64> = fraction
            .iter()
            .copied()
            .filter(|&f| f > 1.0 + 1e-9)
            .collect();
        let max_overshoot = fraction.iter().copied().fold(0.0, f64::max);
        let mean_overshoot = mean(&over);
        Report {
            scenario,
            seed,
            mean_handed_out: mean(&available),
            mean_handed_out_all: mean(&fraction),
            samples,
            shortfall_samples: over.len(),
            max_overshoot,
            mean_overshoot,
        }
    }
    /// The samples as CSV: `t,capacity,total_wants,total_has`.
    pub fn csv(&self) -> String {
        let mut out = String::from("t,capacity,total_wants,total_has\n");
        for s in &self.samples {
            let _ = writeln!(out, "{},{},{:.3},{:.3}", s.t, s.capacity, s.wants, s.has);
        }
        out
    }

    /// A line chart of capacity (red), total wants (green) and total has
    /// (blue) over time, as SVG.
    pub fn svg(&self) -> String {
        let (w, h, m) = (900.0, 400.0, 50.0);
        let t_max = self.samples.last().map_or(1, |s| s.t).max(1) as f64;
        // Wants may grow far past the capacity (scenario 7 adds 100 at a
        // time); the axis stops at twice the capacity or the most handed
        // out, and wants above it run along the top.
        let top = |f: &dyn Fn(&Sample) -> f64| self.samples.iter().map(f).fold(1.0, f64::max);
        let y_max = (top(&|s| s.capacity.max(s.wants).max(s.has)) * 1.1)
            .min((2.0 * CAPACITY).max(top(&|s| s.has) * 1.1));
        let x = |t: u64| m + (t as f64 / t_max) * (w - 2.0 * m);
        let y = |v: f64| h - m - (v.min(y_max) / y_max) * (h - 2.0 * m);
        let line = |f: &dyn Fn(&Sample) -> f64, colour: &str| {
            let mut d = String::new();
            for s in &self.samples {
                let _ = write!(d, "{:.1},{:.1} ", x(s.t), y(f(s)));
            }
            format!(r#"<polyline fill="none" stroke="{colour}" stroke-width="1.2" points="{d}"/>"#)
        };
        let mut svg = format!(
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{m}" y="20">scenario {} (seed {}): capacity (red), total wants (green{clipped}), total has (blue)</text>
<line x1="{m}" y1="{b}" x2="{r}" y2="{b}" stroke="black"/>
<line x1="{m}" y1="{m}" x2="{m}" y2="{b}" stroke="black"/>
<text x="{m}" y="{lb}">0</text><text x="{r}" y="{lb}" text-anchor="end">{t_max} s</text>
<text x="5" y="{m}">{y_max:.0}</text>
"#,
            self.scenario,
            self.seed,
            clipped = if top(&|s| s.wants) > y_max {
                format!(", up to {:.0} off the chart", top(&|s| s.wants))
            } else {
                String::new()
            },
            b = h - m,
            r = w - m,
            lb = h - m + 15.0,
        );
        svg.push_str(&line(&|s| s.capacity, "red"));
        svg.push('\n');
        svg.push_str(&line(&|s| s.wants, "green"));
        svg.push('\n');
        svg.push_str(&line(&|s| s.has, "blue"));
        svg.push_str("\n</svg>\n");
        svg
    }
}

/// SplitMix64: small, seedable and good enough for drift and mishaps.
#[derive(Debug)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `0..n`.
    fn below(&mut self, n: usize) -> usize {
        (self.unit() * n as f64) as usize % n.max(1)
    }
}

/// An election the simulation switches.
#[derive(Debug)]
struct Switch {
    tx: watch::Sender<Mastership>,
}

impl Election for Switch {
    fn subscribe(&self) -> watch::Receiver<Mastership> {
        self.tx.subscribe()
    }
}

/// Unix time on tokio's clock, which is paused and jumps from timer to
/// timer.
#[derive(Debug)]
struct VirtualClock {
    origin: Instant,
}

impl WallClock for VirtualClock {
    fn now(&self) -> Timestamp {
        Duration::from_secs(T0) + self.origin.elapsed()
    }
}

/// One server task of a job.
#[derive(Debug)]
struct Task {
    address: String,
    switch: Switch,
    /// Kept so the server lives as long as the simulation.
    _server: Server,
}

/// A node of the tree: a job of [`TASKS`] server tasks.
#[derive(Debug)]
struct Job {
    name: String,
    tasks: Vec<Task>,
    master: Option<usize>,
}

impl Job {
    fn addresses(&self) -> Vec<String> {
        self.tasks.iter().map(|t| t.address.clone()).collect()
    }

    /// Makes a random task master; nothing changes if it already is.
    fn elect(&mut self, rng: &mut Rng) {
        let m = rng.below(self.tasks.len());
        if self.master == Some(m) {
            return;
        }
        self.master = Some(m);
        let address = self.tasks[m].address.clone();
        for (i, task) in self.tasks.iter().enumerate() {
            let value = if i == m {
                Mastership::master(Some(address.clone()))
            } else {
                Mastership::follower(Some(address.clone()))
            };
            task.switch.tx.send_replace(value);
        }
        info!(
            job = self.name.as_str(),
            master = address.as_str(),
            "elected"
        );
    }

    /// Leaves the job without a master.
    fn lose_master(&mut self) {
        self.master = None;
        for task in &self.tasks {
            task.switch.tx.send_replace(Mastership::follower(None));
        }
        info!(job = self.name.as_str(), "master lost");
    }
}

/// The shape of the server tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tree {
    /// A root alone.
    Root,
    /// A root and one region.
    Region,
    /// A root, 3 regions and 3 datacenters per region.
    Planet,
}

/// What a scenario runs.
#[derive(Debug, Clone, Copy)]
struct Setup {
    tree: Tree,
    clients_per_leaf: usize,
    wants: f64,
    duration: u64,
}

impl Setup {
    fn of(scenario: u32) -> Result<Setup, UnknownScenario> {
        let (tree, clients_per_leaf, wants, duration) = match scenario {
            1..=3 => (Tree::Root, 5, 100.0, 600),
            4 => (Tree::Region, 5, 100.0, 600),
            5 | 6 => (Tree::Planet, 5, 650.0 / 45.0, 600),
            7 => (Tree::Planet, 5, 650.0 / 45.0, 3600),
            n => return Err(UnknownScenario(n)),
        };
        Ok(Setup {
            tree,
            clients_per_leaf,
            wants,
            duration,
        })
    }
}

/// The tree, its clients and the random source.
struct World {
    scenario: u32,
    rng: Rng,
    transport: Arc<InProcess>,
    clock: Arc<VirtualClock>,
    jobs: Vec<Job>,
    /// Each client with its resource and what it wants.
    clients: Vec<(Client, Resource, f64)>,
    /// Elections due: (second, job).
    elections: Vec<(u64, usize)>,
}

impl World {
    /// Adds a job of [`TASKS`] servers under `parent` (the root when
    /// `None`), each serving in the background.
    fn add_job(&mut self, name: &str, parent: Option<usize>) -> usize {
        let mut tasks = Vec::with_capacity(TASKS);
        for i in 0..TASKS {
            let address = format!("{name}-{i}:1");
            let switch = Switch {
                tx: watch::Sender::new(Mastership::follower(None)),
            };
            let server = match parent {
                None => Server::new(
                    Config::from_yaml(ROOT_CONFIG).expect("valid"),
                    &switch,
                    self.clock.clone(),
                ),
                Some(p) => Server::with_parent_via(
                    Config::from_yaml(MID_CONFIG).expect("valid"),
                    &switch,
                    self.clock.clone(),
                    Parent {
                        address: self.jobs[p].tasks[0].address.clone(),
                        server_id: name.to_owned(),
                        decay_factor: 0.5,
                    },
                    self.transport.clone(),
                ),
            };
            server.spawn_background(Duration::from_secs(1));
            self.transport.add(address.clone(), server.clone());
            tasks.push(Task {
                address,
                switch,
                _server: server,
            });
        }
        self.jobs.push(Job {
            name: name.to_owned(),
            tasks,
            master: None,
        });
        let job = self.jobs.len() - 1;
        self.jobs[job].elect(&mut self.rng);
        job
    }

    /// Adds a client of `job` wanting `wants`.
    fn add_client(&mut self, job: usize, wants: f64) {
        let n = self.clients.len();
        // Clients start discovery at different tasks, as if balanced.
        let mut servers = self.jobs[job].addresses();
        servers.rotate_left(n % TASKS);
        let client = Client::builder()
            .servers(servers)
            .id(format!("client{n}"))
            .clock(self.clock.clone())
            .transport(self.transport.clone())
            .seed(self.rng.next())
            .build()
            .expect("a client inside the runtime");
        let resource = client
            .resource(
                "r",
                ResourceOptions::new(wants).mode(ExpiryMode::Pessimistic),
            )
            .expect("a new resource");
        self.clients.push((client, resource, wants));
    }

    fn set_wants(&mut self, client: usize, wants: f64) {
        let (_, resource, w) = &mut self.clients[client];
        *w = wants.max(0.0);
        resource.set_wants(*w).expect("finite wants");
    }

    /// The events of second `t`.
    fn events(&mut self, t: u64) {
        match (self.scenario, t) {
            (2 | 3, 120) => {
                self.jobs[0].lose_master();
                let back = if self.scenario == 2 { 140 } else { 190 };
                self.elections.push((back, 0));
            }
            (6, 150) => {
                self.set_wants(0, 1000.0);
                self.set_wants(1, 1000.0);
            }
            (7, t) if t > 0 && t % 60 == 0 => self.mishap(t),
            _ => {}
        }
        // Elections due now, those just scheduled for now included.
        let due: Vec<usize> = self
            .elections
            .iter()
            .filter(|&&(at, _)| at <= t)
            .map(|&(_, job)| job)
            .collect();
        self.elections.retain(|&(at, _)| at > t);
        for job in due {
            self.jobs[job].elect(&mut self.rng);
        }
        if t > 0 && t % 10 == 0 {
            for c in 0..self.clients.len() {
                let w = self.clients[c].2 * (0.9 + 0.2 * self.rng.unit());
                self.set_wants(c, w);
            }
        }
    }

    /// Scenario 7's mishaps, drawn as Go's simulation draws them: a
    /// client's wants +100 in 10 of 15 draws, a job losing its master in 4,
    /// an election in 1.
    fn mishap(&mut self, t: u64) {
        match self.rng.below(15) {
            0..=9 => {
                let c = self.rng.below(self.clients.len());
                let w = self.clients[c].2 + 100.0;
                info!(t, client = c, wants = w, "mishap: wants +100");
                self.set_wants(c, w);
            }
            10..=13 => {
                let job = self.rng.below(self.jobs.len());
                let back = t + self.rng.below(61) as u64;
                if self.jobs[job].master.is_some() {
                    info!(
                        t,
                        job = self.jobs[job].name.as_str(),
                        back,
                        "mishap: master lost"
                    );
                    self.jobs[job].lose_master();
                    self.elections.push((back, job));
                }
            }
            _ => {
                let job = self.rng.below(self.jobs.len());
                info!(t, job = self.jobs[job].name.as_str(), "mishap: election");
                self.jobs[job].elect(&mut self.rng);
            }
        }
    }

    fn sample(&self, t: u64) -> Sample {
        let now = self.clock.now();
        let has = self
            .clients
            .iter()
            .filter_map(|(_, r, _)| r.current().lease)
            .filter(|l| l.expiry > now)
            .fold(0.0, |sum, l| sum + l.capacity);
        Sample {
            t,
            capacity: if self.jobs[0].master.is_some() {
                CAPACITY
            } else {
                0.0
            },
            wants: self.clients.iter().fold(0.0, |sum, c| sum + c.2),
            has,
        }
    }
}

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
        assert!(r.max_overshoot <= 1.0 + 1e-9, "{}", r.max_overshoot);
        assert_eq!(r.shortfall_samples, 0);
        for s in &r.samples[80..] {
            assert!(s.has >= 0.9 * s.wants.min(CAPACITY), "{s:?}");
        }
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
        assert_eq!(r.shortfall_samples, 0);
    }

    #[test]
    fn scenario_four_hands_out_through_a_region() {
        let r = run(4, 1).unwrap();
        assert_eq!(r.shortfall_samples, 0);
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
            assert!(r.max_overshoot < 1.1, "seed {seed}: {}", r.max_overshoot);
        }
    }

    #[test]
    fn unknown_scenarios_are_refused() {
        assert_eq!(run(0, 0).unwrap_err(), UnknownScenario(0));
        assert_eq!(run(8, 0).unwrap_err(), UnknownScenario(8));
    }
}
