//! The simulated world: jobs of real servers on a virtual clock, the
//! clients of the leaves, and the seeded random source that drives them.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tracing::info;

use super::fleet::{Fleet, Wants, MAX_WANTS};
use super::report::{LevelSample, Overshoot, Sample};
use super::T0;
use tollgate_doorman::in_process::watermark::{self, Found, Record};
use tollgate_doorman::in_process::{self, Connection, InProcess};
use tollgate_doorman::{Client, ExpiryMode, Resource, ResourceOptions};
use tollgate_doorman::{Election, Mastership, Promise};
use tollgate_doorman::{Parent, Server, ServerConfig, WallClock};

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
    fn now(&self) -> Duration {
        Duration::from_secs(T0) + self.origin.elapsed()
    }
}

/// One server task of a job.
#[derive(Debug)]
pub(super) struct Task {
    address: String,
    switch: Switch,
    /// Its identity in the watermark, new at every start, and the revision
    /// of its last write there.
    id: u64,
    last_write: Option<i64>,
    /// `None` while the task is dead.
    server: Option<Server>,
}

impl Task {
    /// The running server, `None` while the task is dead.
    pub(super) fn server(&self) -> Option<&Server> {
        self.server.as_ref()
    }
}

/// A node of the tree: a job of server tasks.
///
/// Its election follows the etcd election's rules (`election/watermark.rs`):
/// a master stores its watermark (the latest expiry it may grant) before it
/// grants and every second while etcd answers; a new master learns until
/// the stored watermark plus [`SKEW`], not at all on an empty election, and
/// keeps its leases when it wrote the watermark last.
#[derive(Debug)]
pub(super) struct Job {
    pub(super) name: String,
    pub(super) level: usize,
    pub(super) parent: Option<usize>,
    pub(super) tasks: Vec<Task>,
    pub(super) master: Option<usize>,
    /// The master's promise.
    promise: Option<Promise>,
    /// The stored watermark and the revision of its last write.
    record: Option<(Record, i64)>,
    revision: i64,
    /// How far ahead of now a watermark promises: the level's longest
    /// lease and an election lease more.
    ahead: Duration,
    /// Whether etcd answers: no election is won while it does not.
    pub(super) reachable: bool,
    clock: Arc<VirtualClock>,
}

/// The clock skew between servers the simulated election allows for.
const SKEW: Duration = Duration::from_secs(1);

impl Job {
    fn addresses(&self) -> Vec<String> {
        self.tasks.iter().map(|t| t.address.clone()).collect()
    }

    /// The job's own address: its first live task.
    fn address(name: &str) -> String {
        format!("{name}:1")
    }

    /// Makes a random live task master; nothing changes if it already is.
    pub(super) fn elect(&mut self, rng: &mut Rng) {
        let live: Vec<usize> = (0..self.tasks.len())
            .filter(|&i| self.tasks[i].server.is_some())
            .collect();
        if live.is_empty() {
            return;
        }
        let m = live[rng.below(live.len())];
        self.make_master(m);
    }

    fn found(&self) -> Found {
        match self.record {
            None => Found::Empty,
            Some((r, revision)) => Found::Record(r, revision),
        }
    }

    /// The master stores its watermark, if etcd answers.
    pub(super) fn renew(&mut self) {
        let (Some(m), Some(promise), true) = (self.master, &self.promise, self.reachable) else {
            return;
        };
        let until = watermark::next(self.found(), self.clock.now(), self.ahead);
        self.revision += 1;
        let writer = self.tasks[m].id;
        self.record = Some((Record { until, writer }, self.revision));
        self.tasks[m].last_write = Some(self.revision);
        promise.set(until);
    }

    /// Makes task `m` master, if it is not already and etcd answers.
    pub(super) fn make_master(&mut self, m: usize) {
        if self.master == Some(m) || !self.reachable {
            return;
        }
        self.master = Some(m);
        let address = self.tasks[m].address.clone();
        let task = &self.tasks[m];
        let won = watermark::won(
            Some(address.clone()),
            self.found(),
            task.id,
            task.last_write,
            SKEW,
        );
        let promise = Promise::new(Duration::ZERO);
        self.promise = Some(promise.clone());
        self.renew();
        for (i, task) in self.tasks.iter().enumerate() {
            let value = if i == m {
                won.clone().promising(promise.clone())
            } else {
                Mastership::follower(Some(address.clone()))
            };
            task.switch.tx.send_replace(value);
        }
        info!(
            job = self.name.as_str(),
            master = address.as_str(),
            keeps_leases = won.keeps_leases,
            "elected"
        );
    }

    /// Leaves the job without a master.
    pub(super) fn lose_master(&mut self) {
        self.master = None;
        self.promise = None;
        for task in &self.tasks {
            task.switch.tx.send_replace(Mastership::follower(None));
        }
        info!(job = self.name.as_str(), "master lost");
    }

    /// Whether task `i` is alive.
    pub(super) fn alive(&self, i: usize) -> bool {
        self.tasks[i].server.is_some()
    }
}

/// A client and what it wants.
#[derive(Debug)]
pub(super) struct SimClient {
    _client: Client,
    pub(super) resource: Resource,
    pub(super) wants: f64,
}

/// The tree, its clients and the random source.
pub(super) struct World {
    pub(super) fleet: Fleet,
    pub(super) rng: Rng,
    pub(super) net: Arc<InProcess>,
    clients_link: Arc<Connection>,
    pub(super) clock: Arc<VirtualClock>,
    pub(super) jobs: Vec<Job>,
    links: Vec<Arc<Connection>>,
    /// Each level's server configuration.
    pub(super) configs: Vec<ServerConfig>,
    /// The root's configured capacity for the clients' resource.
    pub(super) capacity: f64,
    pub(super) clients: Vec<SimClient>,
    /// Clients made so far, for their ids.
    made: usize,
    /// Server tasks started so far, for their identities.
    made_tasks: u64,
    /// The leaves, in order, and the next one a joining client goes to.
    pub(super) leaves: Vec<usize>,
    pub(super) next_leaf: usize,
    /// Elections due: (second, job).
    pub(super) elections: Vec<(u64, usize)>,
    /// Clients due to join: (millisecond, leaf, wants), in time order.
    pub(super) joins: VecDeque<(u64, usize, f64)>,
    /// The next timeline event.
    pub(super) cursor: usize,
    /// Partitions that heal: (second, job).
    pub(super) heals: Vec<(u64, usize)>,
    /// An etcd outage: (second masters lose mastership, second etcd is
    /// back).
    pub(super) etcd: Option<(u64, u64)>,
    /// Calls per level at the last sample.
    last_rpcs: Vec<u64>,
    /// What happened so far: (second, what).
    pub(super) log: Vec<(u64, String)>,
}

impl World {
    /// The fleet's tree with its first clients, drawing from `rng`.
    pub(super) fn new(fleet: Fleet, rng: Rng, origin: Instant) -> World {
        let levels = fleet.levels.len();
        let configs: Vec<ServerConfig> = (0..levels).map(|l| fleet.config(l)).collect();
        let capacity = configs[0].find(&fleet.resource).map_or(0.0, |t| t.capacity);
        let net = Arc::new(InProcess::new(levels));
        let mut world = World {
            clients_link: net.client_link(),
            net,
            rng,
            clock: Arc::new(VirtualClock { origin }),
            jobs: Vec::new(),
            links: Vec::new(),
            configs,
            capacity,
            clients: Vec::new(),
            made: 0,
            made_tasks: 0,
            leaves: Vec::new(),
            next_leaf: 0,
            elections: Vec::new(),
            joins: VecDeque::new(),
            cursor: 0,
            heals: Vec::new(),
            etcd: None,
            last_rpcs: vec![0; levels],
            log: Vec::new(),
            fleet,
        };
        for (name, level, parent) in world.fleet.jobs() {
            world.add_job(name, level, parent);
            if level + 1 == levels {
                world.leaves.push(world.jobs.len() - 1);
            }
        }
        let wants = world.fleet.clients.wants;
        for i in 0..world.leaves.len() {
            for _ in 0..world.fleet.clients.per_leaf {
                let w = wants.draw(|| world.rng.unit());
                world.add_client(world.leaves[i], w);
            }
        }
        world
    }

    /// Adds a job under `parent` (the root when `None`) and elects its
    /// master.
    fn add_job(&mut self, name: String, level: usize, parent: Option<usize>) {
        let job = self.jobs.len();
        let tasks = self.fleet.levels[level].tasks;
        let addresses: Vec<String> = (0..tasks).map(|i| format!("{name}-{i}:1")).collect();
        let link = self
            .net
            .add_job(job, Job::address(&name), addresses.clone());
        self.links.push(link);
        self.jobs.push(Job {
            name,
            level,
            parent,
            tasks: addresses
                .into_iter()
                .map(|address| Task {
                    address,
                    switch: Switch {
                        tx: watch::Sender::new(Mastership::follower(None)),
                    },
                    id: 0,
                    last_write: None,
                    server: None,
                })
                .collect(),
            master: None,
            promise: None,
            record: None,
            revision: 0,
            ahead: self.configs[level].longest_lease_length() + Duration::from_secs(10),
            reachable: true,
            clock: self.clock.clone(),
        });
        for i in 0..tasks {
            self.start(job, i);
        }
        self.jobs[job].elect(&mut self.rng);
    }

    /// Starts task `i` of `job` with empty state, serving in the
    /// background.
    pub(super) fn start(&mut self, job: usize, i: usize) {
        let j = &self.jobs[job];
        let builder = Server::builder(self.configs[j.level].clone());
        let builder = match j.parent {
            None => builder,
            Some(p) => in_process::server_through(
                builder.parent(Parent {
                    address: Job::address(&self.jobs[p].name),
                    server_id: j.name.clone(),
                    decay_factor: 0.5,
                }),
                self.links[job].clone(),
            ),
        };
        let task = &self.jobs[job].tasks[i];
        let server = builder
            .election(&task.switch)
            .clock(self.clock.clone())
            .build();
        server.spawn_background(Duration::from_secs(1));
        self.net
            .add(task.address.clone(), server.clone(), self.jobs[job].level);
        self.made_tasks += 1;
        let task = &mut self.jobs[job].tasks[i];
        task.server = Some(server);
        task.id = self.made_tasks;
        task.last_write = None;
    }

    /// Stops task `i` of `job`: it answers nothing and forgets everything.
    pub(super) fn stop(&mut self, job: usize, i: usize) {
        let task = &mut self.jobs[job].tasks[i];
        self.net.remove(&task.address);
        task.server = None;
    }

    /// Adds a client of `job` wanting `wants`.
    pub(super) fn add_client(&mut self, job: usize, wants: f64) {
        let n = self.made;
        self.made += 1;
        let tasks = self.jobs[job].tasks.len();
        // Clients start discovery at different tasks, as if balanced.
        let mut servers = self.jobs[job].addresses();
        servers.rotate_left(n % tasks);
        let builder = Client::builder()
            .servers(servers)
            .id(format!("client{n}"))
            .clock(self.clock.clone());
        let client =
            in_process::client_through(builder, self.clients_link.clone(), self.rng.next())
                .build()
                .expect("a client inside the runtime");
        let mut options = ResourceOptions::new(wants).mode(ExpiryMode::Pessimistic);
        if self.fleet.clients.priority != 0 {
            options = options.priority(self.fleet.clients.priority);
        }
        let resource = client
            .resource(self.fleet.resource.clone(), options)
            .expect("a new resource");
        self.clients.push(SimClient {
            _client: client,
            resource,
            wants,
        });
    }

    /// Schedules `count` clients to join from second `t`, spread over
    /// `over` seconds and round the leaves.
    pub(super) fn schedule_joins(&mut self, t: u64, count: usize, over: f64, wants: Wants) {
        for i in 0..count {
            let leaf = self.leaves[self.next_leaf % self.leaves.len()];
            self.next_leaf += 1;
            let w = wants.draw(|| self.rng.unit());
            let ms = t * 1000 + (over * 1000.0 * i as f64 / count as f64) as u64;
            self.joins.push_back((ms, leaf, w));
        }
    }

    /// Adds the clients due to join before millisecond `until`, each at
    /// its instant.
    pub(super) async fn join_until(&mut self, until: u64) {
        while let Some(&(ms, leaf, wants)) = self.joins.front() {
            if ms >= until {
                break;
            }
            self.joins.pop_front();
            tokio::time::sleep_until(self.clock.origin + Duration::from_millis(ms)).await;
            self.add_client(leaf, wants);
        }
    }

    pub(super) fn set_wants(&mut self, client: usize, wants: f64) {
        let c = &mut self.clients[client];
        c.wants = wants.clamp(0.0, MAX_WANTS);
        c.resource.set_wants(c.wants).expect("finite wants");
    }

    /// The sample of second `t`, and any server handing out more than it
    /// holds.
    pub(super) fn sample(&mut self, t: u64) -> (Sample, Vec<LevelSample>, Vec<Overshoot>) {
        let now = self.clock.now();
        let mut has = 0.0;
        let mut without_lease = 0;
        for c in &self.clients {
            match c.resource.current().lease {
                Some(l) if l.expiry > now => has += l.capacity,
                _ => without_lease += 1,
            }
        }
        let sample = Sample {
            t,
            capacity: if self.jobs[0].master.is_some() {
                self.capacity
            } else {
                0.0
            },
            configured: self.capacity,
            wants: self.clients.iter().fold(0.0, |sum, c| sum + c.wants),
            has,
            without_lease,
        };
        let rpcs = self.net.rpcs();
        let mut levels: Vec<LevelSample> = rpcs
            .iter()
            .zip(&self.last_rpcs)
            .map(|(now, before)| LevelSample {
                rpcs: now - before,
                ..LevelSample::default()
            })
            .collect();
        self.last_rpcs = rpcs;
        let mut overshoots = Vec::new();
        for job in &self.jobs {
            let Some(server) = job.master.and_then(|m| job.tasks[m].server.as_ref()) else {
                continue;
            };
            let Some(status) = server
                .status()
                .into_iter()
                .find(|s| s.id == self.fleet.resource)
            else {
                continue;
            };
            let level = &mut levels[job.level];
            level.available += status.capacity;
            level.handed_out += status.sum_has;
            if !status.learning && status.sum_has > status.capacity * (1.0 + 1e-9) + 1e-9 {
                overshoots.push(Overshoot {
                    t,
                    job: job.name.clone(),
                    handed_out: status.sum_has,
                    capacity: status.capacity,
                    after: self.log.last().cloned(),
                });
            }
        }
        (sample, levels, overshoots)
    }
}
