//! What happens each second: the fleet's timeline, the random mishaps,
//! elections due, partitions healing, etcd outages and drifting wants.
//!
//! # Implementation notes
//!
//! Each second `t`, in this order: partitions due to heal heal; an etcd
//! outage's masters lose mastership when their lease lapses, and when etcd
//! is back every job without a master elects one, in job order; the
//! timeline's events at `t` happen in file order; a mishap when one is due;
//! then the elections due (held while etcd is down); then the masters renew
//! their watermarks (not while etcd is down); then drift. The order is
//! fixed, so a seed fixes every draw.

use tokio::task::JoinSet;
use tracing::info;

use super::fleet::{Action, ServerTasks};
use super::world::World;

/// Seconds a dead master's election lease outlives it: then the job's
/// other tasks elect a new master.
const LEASE_TTL: u64 = 10;

impl World {
    /// The events of second `t`.
    pub(super) fn events(&mut self, t: u64) {
        let healed: Vec<usize> = self
            .heals
            .iter()
            .filter(|&&(at, _)| at <= t)
            .map(|&(_, job)| job)
            .collect();
        self.heals.retain(|&(at, _)| at > t);
        for job in healed {
            self.net.set_cut(job, false);
            self.note(t, format!("partition of {} healed", self.jobs[job].name));
        }
        if let Some((lapse, back)) = self.etcd {
            if lapse == t && lapse < back {
                for job in &mut self.jobs {
                    job.lose_master();
                }
                self.note(t, "masters' election leases lapsed".into());
            }
            if back <= t {
                self.etcd = None;
                for job in &mut self.jobs {
                    job.reachable = true;
                }
                for j in 0..self.jobs.len() {
                    if self.jobs[j].master.is_none() {
                        self.jobs[j].elect(&mut self.rng);
                    }
                }
                self.note(t, "etcd back: jobs without a master elect one".into());
            }
        }
        while let Some(event) = self.fleet.timeline.get(self.cursor) {
            if event.at > t {
                break;
            }
            let action = event.action.clone();
            self.cursor += 1;
            self.act(t, action);
        }
        if let Some(m) = self.fleet.mishaps {
            if t > 0 && t.is_multiple_of(m.every) {
                self.mishap(t);
            }
        }
        // Elections due now, those just scheduled for now included.
        if self.etcd.is_none() {
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
        }
        // The masters renew their watermarks while etcd answers.
        for job in &mut self.jobs {
            job.renew();
        }
        if let Some(d) = self.fleet.clients.drift {
            if t > 0 && t.is_multiple_of(d.every) {
                let low = 1.0 - d.spread / 2.0;
                for c in 0..self.clients.len() {
                    let w = self.clients[c].wants * (low + d.spread * self.rng.unit());
                    self.set_wants(c, w);
                }
            }
        }
    }

    fn note(&mut self, t: u64, what: String) {
        info!(t, "{what}");
        self.log.push((t, what));
    }

    fn job(&self, name: &str) -> usize {
        self.jobs
            .iter()
            .position(|j| j.name == name)
            .expect("checked when the fleet was read")
    }

    fn tasks(&self, target: &ServerTasks) -> (usize, Vec<usize>) {
        let job = self.job(&target.job);
        let tasks = match target.task {
            Some(i) => vec![i],
            None => (0..self.jobs[job].tasks.len()).collect(),
        };
        (job, tasks)
    }

    fn act(&mut self, t: u64, action: Action) {
        match action {
            Action::LoseMaster(name) => {
                let job = self.job(&name);
                self.jobs[job].lose_master();
                self.note(t, format!("{name} lost its master"));
            }
            Action::Elect(name) => {
                let job = self.job(&name);
                if self.etcd.is_none() {
                    self.jobs[job].elect(&mut self.rng);
                }
                self.note(t, format!("{name} held an election"));
            }
            Action::Failover(name) => {
                let job = self.job(&name);
                let j = &mut self.jobs[job];
                let n = j.tasks.len();
                let from = j.master.unwrap_or(n - 1);
                if let Some(next) = (1..=n).map(|k| (from + k) % n).find(|&i| j.alive(i)) {
                    j.make_master(next);
                }
                self.note(t, format!("{name} failed over"));
            }
            Action::Kill(target) => {
                let (job, tasks) = self.tasks(&target);
                for &i in &tasks {
                    if self.jobs[job].master == Some(i) {
                        self.jobs[job].lose_master();
                        self.elections.push((t + LEASE_TTL, job));
                    }
                    self.stop(job, i);
                }
                self.note(t, format!("{} killed {tasks:?}", target.job));
            }
            Action::Restart(target) => {
                let (job, tasks) = self.tasks(&target);
                for &i in &tasks {
                    if !self.jobs[job].alive(i) {
                        self.start(job, i);
                    }
                }
                let j = &mut self.jobs[job];
                match j.master {
                    // The new tasks follow the master there is (they learn
                    // of it from etcd, so not while it is down).
                    Some(m) if j.reachable => {
                        j.master = None;
                        j.make_master(m);
                    }
                    None if self.etcd.is_none() => j.elect(&mut self.rng),
                    Some(_) | None => {}
                }
                self.note(t, format!("{} restarted {tasks:?}", target.job));
            }
            Action::Partition(p) => {
                let job = self.job(&p.job);
                self.net.set_cut(job, true);
                self.heals.push((t.saturating_add(p.duration), job));
                self.note(
                    t,
                    format!("{} cut from its parent for {} s", p.job, p.duration),
                );
            }
            Action::EtcdOutage(o) => {
                self.etcd = Some((t.saturating_add(o.ttl), t.saturating_add(o.duration)));
                for job in &mut self.jobs {
                    job.reachable = false;
                }
                self.note(t, format!("etcd down for {} s", o.duration));
            }
            Action::Join(h) => {
                let wants = h.wants.unwrap_or(self.fleet.clients.wants);
                self.schedule_joins(t, h.count, h.over, wants);
                self.note(t, format!("{} clients join over {} s", h.count, h.over));
            }
            Action::Leave(h) => {
                let keep = self.clients.len().saturating_sub(h.count);
                let mut releases = JoinSet::new();
                for c in self.clients.drain(keep..) {
                    releases.spawn(async move {
                        let _ = c.resource.release().await;
                    });
                }
                releases.detach_all();
                self.note(t, format!("{} clients leave", h.count));
            }
            Action::Capacity(c) => {
                self.set_root_capacity(c);
                self.note(t, format!("root capacity set to {c}"));
            }
            Action::SetWants(s) => {
                let clients = s
                    .clients
                    .unwrap_or_else(|| (0..self.clients.len()).collect());
                for &c in &clients {
                    if c < self.clients.len() {
                        self.set_wants(c, s.wants);
                    }
                }
                self.note(
                    t,
                    format!("wants of {} clients set to {}", clients.len(), s.wants),
                );
            }
        }
    }

    /// Every root template's capacity becomes `capacity`, reloaded on
    /// every live root task.
    fn set_root_capacity(&mut self, capacity: f64) {
        let mut value = self.fleet.levels[0].config.clone();
        if let Some(resources) = value.get_mut("resources").and_then(|r| r.as_sequence_mut()) {
            for r in resources {
                if let Some(map) = r.as_mapping_mut() {
                    map.insert("capacity".into(), capacity.into());
                }
            }
        }
        self.fleet.levels[0].config = value;
        self.configs[0] = self.fleet.config(0);
        self.capacity = capacity;
        for task in &self.jobs[0].tasks {
            if let Some(server) = task.server() {
                server.reload(self.configs[0].clone());
            }
        }
    }

    /// Go's simulation's mishaps: a client's wants up in 10 of 15 draws, a
    /// job losing its master in 4, an election in 1.
    fn mishap(&mut self, t: u64) {
        let m = self.fleet.mishaps.expect("mishaps are on");
        match self.rng.below(15) {
            0..=9 => {
                let c = self.rng.below(self.clients.len());
                if c >= self.clients.len() {
                    return;
                }
                let w = self.clients[c].wants + m.wants_up;
                self.set_wants(c, w);
                self.note(t, format!("mishap: client{c} wants {w:.1}"));
            }
            10..=13 => {
                let job = self.rng.below(self.jobs.len());
                let back = t + self.rng.below(m.outage_max as usize + 1) as u64;
                if self.jobs[job].master.is_some() {
                    self.jobs[job].lose_master();
                    self.elections.push((back, job));
                    let name = &self.jobs[job].name;
                    let what = format!("mishap: {name} lost its master until {back} s");
                    self.note(t, what);
                }
            }
            _ => {
                let job = self.rng.below(self.jobs.len());
                self.jobs[job].elect(&mut self.rng);
                let what = format!("mishap: {} held an election", self.jobs[job].name);
                self.note(t, what);
            }
        }
    }
}
