//! A deterministic convergence simulation of a server tree on one virtual
//! clock, driving the real [`Server`] (templates, learning mode, algorithms,
//! the intermediate servers' parent link) in-process, without gRPC.
//!
//! # Implementation notes
//!
//! Time advances in whole seconds on a [`ManualClock`] shared by every
//! server. Each second, in this order: scheduled mishaps happen; every
//! intermediate server whose poll is due asks its parent (parents first, so
//! grants flow down within the second); every client whose refresh is due
//! asks its server with `has` = its unexpired lease; then one sample is
//! taken: the root's capacity, the sum of the clients' wants and the sum of
//! their unexpired grants.
//!
//! The clients are the simulator's own (a client library is not part of this
//! module): a client refreshes after the interval its lease names, retries
//! after one second when its server is not master, and treats an expired
//! lease as 0. Every ten seconds each client's wants drift by a uniform
//! ±10 %. Randomness comes from a seeded SplitMix64, so a seed fixes a run.
//!
//! Scenarios (protocol §5 and the design doc's "Convergence and
//! shortfall"): 1 is a root with 5 clients wanting about 100; 5 is a root,
//! 3 regions, 3 datacenters each and 5 clients per datacenter wanting about
//! 14.4 (650 in all); 6 is 5 with two clients jumping to 1000 at t = 150 s;
//! 7 is 5 for an hour with a mishap every 60 s (a client's wants +100, a
//! server losing mastership for up to 60 s, or a new election). The design
//! doc does not describe scenarios 2 to 4; they are refused.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tracing::info;

use super::clock::{Clock as _, ManualClock};
use super::config::Config;
use super::election::{Election, Mastership};
use super::pb;
use super::server::{Parent, Server};

/// Unix time a simulation starts at.
const T0: u64 = 1_700_000_000;

/// The root's capacity in every scenario.
const CAPACITY: f64 = 500.0;

/// Learning mode after an election, and the lease length.
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
        write!(
            f,
            "unknown scenario {}: the design doc describes 1, 5, 6 and 7",
            self.0
        )
    }
}

impl std::error::Error for UnknownScenario {}

/// One sample: what the chart plots.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Seconds since the start.
    pub t: u64,
    /// The root's capacity.
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
    /// Mean of `has / capacity` after the first learning mode.
    pub mean_handed_out: f64,
    /// Samples (after the first learning mode) with `has > capacity`.
    pub shortfall_samples: usize,
    /// Largest `has / capacity` after the first learning mode.
    pub max_overshoot: f64,
    /// Mean `has / capacity` over the shortfall samples (0 without any).
    pub mean_overshoot: f64,
}

impl Report {
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
        let y_max = self
            .samples
            .iter()
            .map(|s| s.capacity.max(s.wants).max(s.has))
            .fold(1.0, f64::max)
            * 1.1;
        let x = |t: u64| m + (t as f64 / t_max) * (w - 2.0 * m);
        let y = |v: f64| h - m - (v / y_max) * (h - 2.0 * m);
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
<text x="{m}" y="20">scenario {} (seed {}): capacity (red), total wants (green), total has (blue)</text>
<line x1="{m}" y1="{b}" x2="{r}" y2="{b}" stroke="black"/>
<line x1="{m}" y1="{m}" x2="{m}" y2="{b}" stroke="black"/>
<text x="{m}" y="{lb}">0</text><text x="{r}" y="{lb}" text-anchor="end">{t_max} s</text>
<text x="5" y="{m}">{y_max:.0}</text>
"#,
            self.scenario,
            self.seed,
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

#[derive(Debug)]
struct Node {
    server: Server,
    switch: Switch,
    parent: Option<usize>,
    next_poll: u64,
    /// When a lost mastership comes back.
    regain_at: Option<u64>,
}

#[derive(Debug)]
struct SimClient {
    id: String,
    node: usize,
    wants: f64,
    has: f64,
    expiry: u64,
    next_refresh: u64,
}

/// Runs `scenario` with `seed`.
///
/// # Errors
///
/// [`UnknownScenario`] for a scenario the design doc does not describe.
pub fn run(scenario: u32, seed: u64) -> Result<Report, UnknownScenario> {
    let (tree, per_leaf, wants, duration) = match scenario {
        1 => (false, 5, 100.0, 600),
        5 | 6 => (true, 5, 650.0 / 45.0, 600),
        7 => (true, 5, 650.0 / 45.0, 3600),
        n => return Err(UnknownScenario(n)),
    };
    let clock = Arc::new(ManualClock::new(Duration::from_secs(T0)));
    let mut rng = Rng(seed ^ 0x5EED_0000_0000_0000 ^ u64::from(scenario));
    let mut nodes: Vec<Node> = Vec::new();
    let add = |nodes: &mut Vec<Node>, parent: Option<usize>, name: String| {
        let switch = Switch {
            tx: watch::Sender::new(Mastership::master(Some(name.clone()))),
        };
        let server = match parent {
            None => Server::new(
                Config::from_yaml(ROOT_CONFIG).expect("valid"),
                &switch,
                clock.clone(),
            ),
            Some(_) => Server::with_parent(
                Config::from_yaml(MID_CONFIG).expect("valid"),
                &switch,
                clock.clone(),
                Parent {
                    address: String::new(),
                    server_id: name,
                    decay_factor: 0.5,
                },
            ),
        };
        nodes.push(Node {
            server,
            switch,
            parent,
            next_poll: 0,
            regain_at: None,
        });
        nodes.len() - 1
    };
    let root = add(&mut nodes, None, "root".into());
    let mut leaves = Vec::new();
    if tree {
        for r in 0..3 {
            let region = add(&mut nodes, Some(root), format!("region{r}"));
            for d in 0..3 {
                leaves.push(add(&mut nodes, Some(region), format!("dc{r}.{d}")));
            }
        }
    } else {
        leaves.push(root);
    }
    let mut clients: Vec<SimClient> = Vec::new();
    for &leaf in &leaves {
        for _ in 0..per_leaf {
            clients.push(SimClient {
                id: format!("client{}", clients.len()),
                node: leaf,
                wants: wants * (0.95 + 0.1 * rng.unit()),
                has: 0.0,
                expiry: 0,
                next_refresh: 0,
            });
        }
    }

    let learning = 60;
    let mut samples = Vec::with_capacity(duration as usize + 1);
    for t in 0..=duration {
        // Mishaps and drift.
        if scenario == 6 && t == 150 {
            clients[0].wants = 1000.0;
            clients[1].wants = 1000.0;
        }
        if scenario == 7 && t > 0 && t % 60 == 0 {
            match rng.below(3) {
                0 => {
                    let c = rng.below(clients.len());
                    clients[c].wants += 100.0;
                    info!(t, client = c, "mishap: wants +100");
                }
                1 => {
                    let n = rng.below(nodes.len());
                    if nodes[n].regain_at.is_none() {
                        nodes[n].switch.tx.send_replace(Mastership::follower(None));
                        nodes[n].regain_at = Some(t + 1 + rng.below(60) as u64);
                        info!(
                            t,
                            node = n,
                            until = nodes[n].regain_at,
                            "mishap: mastership lost"
                        );
                    }
                }
                _ => {
                    let n = rng.below(nodes.len());
                    if nodes[n].regain_at.is_none() {
                        nodes[n].switch.tx.send_replace(Mastership::follower(None));
                        nodes[n].regain_at = Some(t);
                        info!(t, node = n, "mishap: new election");
                    }
                }
            }
        }
        for node in &mut nodes {
            if node.regain_at == Some(t) {
                node.regain_at = None;
                node.switch.tx.send_replace(Mastership::master(None));
            }
        }
        if t > 0 && t % 10 == 0 {
            for c in &mut clients {
                c.wants = (c.wants * (0.9 + 0.2 * rng.unit())).max(0.0);
            }
        }
        // Intermediate servers ask their parents, parents first (nodes
        // were added in that order).
        for i in 0..nodes.len() {
            let Some(p) = nodes[i].parent else { continue };
            if nodes[i].next_poll <= t {
                let next = nodes[i].server.poll_parent_in_process(&nodes[p].server);
                nodes[i].next_poll = t + next.as_secs().max(1);
            }
        }
        // Clients refresh.
        for c in &mut clients {
            if c.expiry <= t {
                c.has = 0.0;
            }
            if c.next_refresh > t {
                continue;
            }
            let has = (c.expiry > t).then_some(c.has);
            let response = nodes[c.node].server.get_capacity(pb::GetCapacityRequest {
                client_id: c.id.clone(),
                resource: vec![pb::ResourceRequest {
                    resource_id: "r".into(),
                    priority: 0,
                    has: has.map(|capacity| pb::Lease {
                        expiry_time: 0,
                        refresh_interval: 0,
                        capacity,
                    }),
                    wants: c.wants,
                }],
            });
            match response {
                Ok(r) if r.mastership.is_none() && !r.response.is_empty() => {
                    let gets = &r.response[0].gets;
                    c.has = gets.capacity;
                    c.expiry = (gets.expiry_time.max(0) as u64).saturating_sub(T0);
                    c.next_refresh = t + gets.refresh_interval.max(1) as u64;
                }
                _ => c.next_refresh = t + 1,
            }
        }
        samples.push(Sample {
            t,
            capacity: CAPACITY,
            wants: clients.iter().map(|c| c.wants).sum(),
            has: clients.iter().filter(|c| c.expiry > t).map(|c| c.has).sum(),
        });
        clock.advance(Duration::from_secs(1));
    }
    debug_assert_eq!(clock.now(), Duration::from_secs(T0 + duration + 1));

    // Figures after the first learning mode (and a refresh at each level).
    let settled: Vec<&Sample> = samples.iter().filter(|s| s.t >= learning).collect();
    let n = settled.len().max(1) as f64;
    let mean_handed_out = settled.iter().map(|s| s.has / s.capacity).sum::<f64>() / n;
    let over: Vec<f64> = settled
        .iter()
        .filter(|s| s.has > s.capacity + 1e-9)
        .map(|s| s.has / s.capacity)
        .collect();
    let max_overshoot = settled
        .iter()
        .map(|s| s.has / s.capacity)
        .fold(0.0, f64::max);
    let mean_overshoot = if over.is_empty() {
        0.0
    } else {
        over.iter().sum::<f64>() / over.len() as f64
    };
    Ok(Report {
        scenario,
        seed,
        samples,
        mean_handed_out,
        shortfall_samples: over.len(),
        max_overshoot,
        mean_overshoot,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_fixes_a_run() {
        let a = run(6, 3).unwrap();
        let b = run(6, 3).unwrap();
        assert_eq!(a.samples, b.samples);
        assert_eq!(a.samples.len(), 601);
    }

    #[test]
    fn scenario_one_hands_out_the_capacity_without_overshoot() {
        let r = run(1, 1).unwrap();
        // 5 clients want about 500 in all; after learning mode the root
        // never hands out more than its capacity.
        assert!(r.max_overshoot <= 1.0 + 1e-9, "{}", r.max_overshoot);
        assert!(r.mean_handed_out > 0.8, "{}", r.mean_handed_out);
    }

    #[test]
    fn scenario_seven_survives_its_mishaps() {
        for seed in 1..=3 {
            let r = run(7, seed).unwrap();
            assert_eq!(r.samples.len(), 3601);
            assert!(
                r.mean_handed_out > 0.95,
                "seed {seed}: {}",
                r.mean_handed_out
            );
            assert!(r.max_overshoot < 1.1, "seed {seed}: {}", r.max_overshoot);
        }
    }

    #[test]
    fn unknown_scenarios_are_refused() {
        assert_eq!(run(3, 0).unwrap_err(), UnknownScenario(3));
    }
}
