//! The scenarios: the shape of each tree, its clients, and the events
//! and mishaps of each second.

use tracing::info;

use super::world::World;
use super::UnknownScenario;

/// The shape of the server tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Tree {
    /// A root alone.
    Root,
    /// A root and one region.
    Region,
    /// A root, 3 regions and 3 datacenters per region.
    Planet,
}

/// What a scenario runs.
#[derive(Debug, Clone, Copy)]
pub(super) struct Setup {
    pub(super) tree: Tree,
    pub(super) clients_per_leaf: usize,
    pub(super) wants: f64,
    pub(super) duration: u64,
}

impl Setup {
    pub(super) fn of(scenario: u32) -> Result<Setup, UnknownScenario> {
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

impl World {
    /// The events of second `t`.
    pub(super) fn events(&mut self, t: u64) {
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
        if t > 0 && t.is_multiple_of(10) {
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
}
