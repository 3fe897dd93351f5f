//! The simulated world: jobs of real servers on a virtual clock, the
//! clients of the leaves, and the seeded random source that drives them.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tracing::info;

use super::{InProcess, Sample, CAPACITY, MID_CONFIG, ROOT_CONFIG, T0, TASKS};
use crate::election::{Election, Mastership};
use crate::lease::Timestamp;
use crate::ServerConfig;
use crate::WallClock;
use crate::{Client, ExpiryMode, Resource, ResourceOptions};
use crate::{Parent, Server};

/// SplitMix64: small, seedable and good enough for drift and mishaps.
#[derive(Debug)]
pub(super) struct Rng(pub(super) u64);

impl Rng {
    pub(super) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub(super) fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `0..n`.
    pub(super) fn below(&mut self, n: usize) -> usize {
        (self.unit() * n as f64) as usize % n.max(1)
    }
}

/// An election the simulation switches.
#[derive(Debug)]
pub(super) struct Switch {
    pub(super) tx: watch::Sender<Mastership>,
}

impl Election for Switch {
    fn subscribe(&self) -> watch::Receiver<Mastership> {
        self.tx.subscribe()
    }
}

/// Unix time on tokio's clock, which is paused and jumps from timer to
/// timer.
#[derive(Debug)]
pub(super) struct VirtualClock {
    pub(super) origin: Instant,
}

impl WallClock for VirtualClock {
    fn now(&self) -> Timestamp {
        Duration::from_secs(T0) + self.origin.elapsed()
    }
}

/// One server task of a job.
#[derive(Debug)]
pub(super) struct Task {
    address: String,
    switch: Switch,
    /// Kept so the server lives as long as the simulation.
    _server: Server,
}

/// A node of the tree: a job of [`TASKS`] server tasks.
#[derive(Debug)]
pub(super) struct Job {
    pub(super) name: String,
    pub(super) tasks: Vec<Task>,
    pub(super) master: Option<usize>,
}

impl Job {
    fn addresses(&self) -> Vec<String> {
        self.tasks.iter().map(|t| t.address.clone()).collect()
    }

    /// Makes a random task master; nothing changes if it already is.
    pub(super) fn elect(&mut self, rng: &mut Rng) {
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
    pub(super) fn lose_master(&mut self) {
        self.master = None;
        for task in &self.tasks {
            task.switch.tx.send_replace(Mastership::follower(None));
        }
        info!(job = self.name.as_str(), "master lost");
    }
}

/// The tree, its clients and the random source.
pub(super) struct World {
    pub(super) scenario: u32,
    pub(super) rng: Rng,
    pub(super) transport: Arc<InProcess>,
    pub(super) clock: Arc<VirtualClock>,
    pub(super) jobs: Vec<Job>,
    /// Each client with its resource and what it wants.
    pub(super) clients: Vec<(Client, Resource, f64)>,
    /// Elections due: (second, job).
    pub(super) elections: Vec<(u64, usize)>,
}

impl World {
    /// Adds a job of [`TASKS`] servers under `parent` (the root when
    /// `None`), each serving in the background.
    pub(super) fn add_job(&mut self, name: &str, parent: Option<usize>) -> usize {
        let mut tasks = Vec::with_capacity(TASKS);
        for i in 0..TASKS {
            let address = format!("{name}-{i}:1");
            let switch = Switch {
                tx: watch::Sender::new(Mastership::follower(None)),
            };
            let builder = match parent {
                None => Server::builder(ServerConfig::from_yaml(ROOT_CONFIG).expect("valid")),
                Some(p) => Server::builder(ServerConfig::from_yaml(MID_CONFIG).expect("valid"))
                    .parent(Parent {
                        address: self.jobs[p].tasks[0].address.clone(),
                        server_id: name.to_owned(),
                        decay_factor: 0.5,
                    })
                    .transport(self.transport.clone()),
            };
            let server = builder.election(&switch).clock(self.clock.clone()).build();
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
    pub(super) fn add_client(&mut self, job: usize, wants: f64) {
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

    pub(super) fn set_wants(&mut self, client: usize, wants: f64) {
        let (_, resource, w) = &mut self.clients[client];
        *w = wants.max(0.0);
        resource.set_wants(*w).expect("finite wants");
    }

    pub(super) fn sample(&self, t: u64) -> Sample {
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
