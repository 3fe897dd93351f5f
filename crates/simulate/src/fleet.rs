//! The fleet file: a server tree, its clients and a timeline of events, in
//! YAML, read and checked.

use std::fmt;
use std::path::Path;

use serde::Deserialize;

use tollgate_doorman::ServerConfig;

/// A fleet to simulate, as a fleet file describes it in YAML.
///
/// Jobs are named after their level and their place under the root:
/// `root`, `region0`, `region1`, then `dc0.0`, `dc0.1`, ... one level
/// further down. Every field is described below and on [`Event`].
///
/// # Examples
///
/// ```
/// use tollgate_simulate::Fleet;
///
/// let fleet = Fleet::from_yaml(r#"
/// name: two regions
/// duration: 600              # seconds of virtual time
/// levels:                    # from the root down; the last holds the clients
///   - name: root
///     config:                # a server configuration, as `tollgate serve` reads
///       resources:
///         - identifier_glob: "*"
///           capacity: 1000
///           algorithm: {kind: FAIR_SHARE, lease_length: 60, refresh_interval: 8,
///                       learning_mode_duration: 60}
///   - name: region
///     jobs: 2                # jobs under each job of the level above
///     tasks: 3               # server tasks per job (default 3)
///     config:
///       resources:
///         - identifier_glob: "*"
///           capacity: 0
///           algorithm: {kind: FAIR_SHARE, lease_length: 60, refresh_interval: 4,
///                       learning_mode_duration: 60}
/// clients:
///   per_leaf: 100
///   wants: {around: 6, spread: 0.1}   # or a number, or {uniform: [4, 8]}
/// timeline:
///   - {at: 120, failover: region0}
///   - {at: 200, partition: {job: region1, for: 60}}
/// "#).unwrap();
/// assert_eq!(fleet.levels[1].jobs, 2);
/// assert_eq!(fleet.timeline.len(), 2);
/// ```
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fleet {
    /// What the reports call it.
    #[serde(default = "Fleet::default_name")]
    pub name: String,
    /// Seconds of virtual time to run.
    pub duration: u64,
    /// Seconds at the start left out of the figures (the first learning
    /// mode); 60 unless given.
    #[serde(default = "Fleet::default_warmup")]
    pub warmup: u64,
    /// Which of a seed's random streams the fleet draws from: two fleets
    /// with the same seed and different streams draw differently. The
    /// design doc's scenarios use their number.
    #[serde(default)]
    pub stream: u64,
    /// The resource every client asks for.
    #[serde(default = "Fleet::default_resource")]
    pub resource: String,
    /// The levels of the tree, root first.
    pub levels: Vec<Level>,
    /// The clients of every job of the last level.
    pub clients: Clients,
    /// Scripted events, in time order (events at the same second happen in
    /// file order).
    #[serde(default)]
    pub timeline: Vec<Event>,
    /// Random mishaps, as the design doc's scenario 7 draws them.
    #[serde(default)]
    pub mishaps: Option<Mishaps>,
}

/// One level of the tree.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Level {
    /// The level's name, the prefix of its jobs' names.
    pub name: String,
    /// Jobs under each job of the level above (the root level has one).
    #[serde(default = "Level::one")]
    pub jobs: usize,
    /// Server tasks per job, at most one of them master.
    #[serde(default = "Level::three")]
    pub tasks: usize,
    /// The servers' configuration, as `tollgate serve --config` reads it;
    /// below the root, capacity and timings come from the parent and only
    /// learning mode is the server's own.
    pub config: serde_norway::Value,
}

/// The clients of each leaf job.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Clients {
    /// Clients per job of the last level.
    pub per_leaf: usize,
    /// What each client wants at the start.
    pub wants: Wants,
    /// The clients' priority.
    #[serde(default)]
    pub priority: i64,
    /// Random drift of every client's wants.
    #[serde(default)]
    pub drift: Option<Drift>,
}

/// How much a client wants: a number, or drawn per client.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(untagged, deny_unknown_fields)]
pub enum Wants {
    /// The same for every client.
    Constant(f64),
    /// Uniform in `around * [1 - spread/2, 1 + spread/2)`.
    Around {
        /// The middle of the range.
        around: f64,
        /// The width of the range, as a fraction of `around`.
        spread: f64,
    },
    /// Uniform in `[low, high)`.
    Uniform {
        /// `[low, high]`.
        uniform: [f64; 2],
    },
}

/// Every `every` seconds each client's wants are multiplied by a uniform
/// factor in `[1 - spread/2, 1 + spread/2)`.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Drift {
    /// Seconds between drifts.
    pub every: u64,
    /// The width of the factor's range.
    pub spread: f64,
}

/// Go's simulation's mishaps: every `every` seconds one of: a random
/// client's wants grow by `wants_up` (10 draws in 15), a random job loses
/// its master for 0 to `outage_max` seconds (4 in 15), or a random job
/// holds an election (1 in 15).
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mishaps {
    /// Seconds between mishaps.
    pub every: u64,
    /// What a client's wants grow by.
    pub wants_up: f64,
    /// The longest a job stays without a master.
    pub outage_max: u64,
}

/// A scripted event at second `at`: `{at: 120, failover: region0}`, the
/// time and exactly one action.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// Seconds since the start.
    pub at: u64,
    /// What happens.
    pub action: Action,
}

impl<'de> Deserialize<'de> for Event {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Event, D::Error> {
        use serde::de::Error as _;
        let mut map = serde_norway::Mapping::deserialize(d)?;
        let at = map
            .remove("at")
            .ok_or_else(|| D::Error::missing_field("at"))?;
        let at: u64 = serde_norway::from_value(at).map_err(D::Error::custom)?;
        if map.len() != 1 {
            return Err(D::Error::custom(format!(
                "the event at {at} s has {} actions: an event has one",
                map.len()
            )));
        }
        let Some((serde_norway::Value::String(name), value)) = map.into_iter().next() else {
            return Err(D::Error::custom("an action is named by a string"));
        };
        let tagged = serde_norway::value::TaggedValue {
            tag: serde_norway::value::Tag::new(name),
            value,
        };
        let action = serde_norway::from_value(serde_norway::Value::Tagged(Box::new(tagged)))
            .map_err(D::Error::custom)?;
        Ok(Event { at, action })
    }
}

/// What a scripted event does.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// The job loses its master; none is elected until an `elect`.
    LoseMaster(String),
    /// The job holds an election: a random live task becomes master
    /// (possibly the one that was).
    Elect(String),
    /// The job's mastership moves at once to its next live task.
    Failover(String),
    /// Server tasks stop answering (the whole job without `task`).
    Kill(ServerTasks),
    /// Killed tasks start again with empty state; a job without a master
    /// holds an election.
    Restart(ServerTasks),
    /// The job and its subtree cannot reach the job's parent for `for`
    /// seconds.
    Partition(Partition),
    /// etcd is unreachable for `for` seconds: masters keep mastership for
    /// `ttl` seconds (their lease), then every job is without a master
    /// until etcd is back and each job elects one.
    EtcdOutage(EtcdOutage),
    /// `count` clients join, spread evenly over the leaves and over `over`
    /// seconds.
    Join(Herd),
    /// The `count` most recently joined clients release their leases and
    /// leave.
    Leave(Herd),
    /// The root's capacity for every resource becomes this.
    Capacity(f64),
    /// Clients' wants become `wants` (every client without `clients`).
    SetWants(SetWants),
}

/// Server tasks: a job's task, or the whole job.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerTasks {
    /// The job's name.
    pub job: String,
    /// The task's number in the job; every task without it.
    #[serde(default)]
    pub task: Option<usize>,
}

/// A subtree cut from its parent.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Partition {
    /// The job at the top of the subtree (not the root).
    pub job: String,
    /// Seconds until the link heals.
    #[serde(rename = "for")]
    pub duration: u64,
}

/// An etcd outage.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EtcdOutage {
    /// Seconds etcd is unreachable.
    #[serde(rename = "for")]
    pub duration: u64,
    /// The election lease's time to live, in seconds (10 unless given).
    #[serde(default = "EtcdOutage::default_ttl")]
    pub ttl: u64,
}

/// Clients joining or leaving.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Herd {
    /// How many.
    pub count: usize,
    /// Seconds over which they are spread (0: all at once).
    #[serde(default)]
    pub over: f64,
    /// What each joining client wants (the fleet's clients' wants unless
    /// given).
    #[serde(default)]
    pub wants: Option<Wants>,
}

/// New wants for some clients.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetWants {
    /// Client numbers, in order of joining from 0; every client without it.
    #[serde(default)]
    pub clients: Option<Vec<usize>>,
    /// The new wants.
    pub wants: f64,
}

impl Fleet {
    fn default_name() -> String {
        "fleet".to_owned()
    }

    fn default_warmup() -> u64 {
        60
    }

    fn default_resource() -> String {
        "r".to_owned()
    }

    /// Reads a fleet file.
    ///
    /// # Errors
    ///
    /// As [`Fleet::from_yaml`], or [`FleetError`] naming the file when it
    /// cannot be read.
    pub fn from_file(path: &Path) -> Result<Fleet, FleetError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| FleetError(format!("reading {}: {e}", path.display())))?;
        Fleet::from_yaml(&text)
    }

    /// Parses and checks a fleet.
    ///
    /// # Errors
    ///
    /// [`FleetError`], one line naming the field: malformed YAML, an
    /// unknown or missing field, a server configuration that does not
    /// validate, an empty tree, wants that are not finite and `>= 0`, or
    /// an event naming a job or client the tree does not have.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate_simulate::Fleet;
    ///
    /// let err = Fleet::from_yaml("duration: 10\nlevels: []\nclients: {per_leaf: 1, wants: 1}")
    ///     .unwrap_err();
    /// assert_eq!(err.to_string(), "levels: the tree needs at least one level");
    /// ```
    pub fn from_yaml(text: &str) -> Result<Fleet, FleetError> {
        let fleet: Fleet =
            serde_norway::from_str(text).map_err(|e| FleetError(one_line(&e.to_string())))?;
        fleet.check()?;
        Ok(fleet)
    }

    /// The server configuration of level `level`.
    pub(super) fn config(&self, level: usize) -> ServerConfig {
        config_of(&self.levels[level].config).expect("checked when the fleet was read")
    }

    /// Every job's name, in the order the simulation builds them (depth
    /// first), with its level and its parent's index.
    pub(super) fn jobs(&self) -> Vec<(String, usize, Option<usize>)> {
        let mut out = Vec::new();
        if let Some(root) = self.levels.first() {
            out.push((root.name.clone(), 0, None));
            self.children(0, "", &mut out);
        }
        out
    }

    fn children(&self, parent: usize, path: &str, out: &mut Vec<(String, usize, Option<usize>)>) {
        let level = out[parent].1 + 1;
        let Some(l) = self.levels.get(level) else {
            return;
        };
        for i in 0..l.jobs {
            let path = if path.is_empty() {
                i.to_string()
            } else {
                format!("{path}.{i}")
            };
            out.push((format!("{}{path}", l.name), level, Some(parent)));
            let me = out.len() - 1;
            self.children(me, &path, out);
        }
    }

    fn check(&self) -> Result<(), FleetError> {
        let fail = |field: String, why: &str| Err(FleetError(format!("{field}: {why}")));
        if self.duration > MAX_DURATION {
            return fail("duration".into(), "more than 604800 s (a week)");
        }
        if self.levels.is_empty() {
            return fail("levels".into(), "the tree needs at least one level");
        }
        // Counted before the tree is built, so a huge one is refused
        // without the memory to list it.
        let (mut width, mut jobs) = (1usize, 0usize);
        for (i, l) in self.levels.iter().enumerate() {
            if i > 0 {
                width = width.saturating_mul(l.jobs);
            }
            jobs = jobs.saturating_add(width);
            if jobs > MAX_JOBS {
                return fail(format!("levels[{i}].jobs"), "more than 100000 jobs");
            }
            if !(1..=MAX_TASKS).contains(&l.tasks) {
                return fail(format!("levels[{i}].tasks"), "a job has 1 to 100 tasks");
            }
            if i > 0 && l.jobs == 0 {
                return fail(
                    format!("levels[{i}].jobs"),
                    "a level needs at least one job",
                );
            }
            if let Err(e) = config_of(&l.config) {
                return fail(format!("levels[{i}].config"), &one_line(&e.to_string()));
            }
        }
        let jobs = self.jobs();
        let leaves = jobs.iter().filter(|j| j.1 + 1 == self.levels.len()).count();
        if self.clients.per_leaf.saturating_mul(leaves) > 10_000_000 {
            return fail("clients.per_leaf".into(), "more than 10000000 clients");
        }
        check_wants("clients.wants", &self.clients.wants)?;
        if let Some(d) = self.clients.drift {
            if d.every == 0 || !(0.0..=2.0).contains(&d.spread) {
                return fail(
                    "clients.drift".into(),
                    "every must be at least 1 and spread within 0..=2",
                );
            }
        }
        if let Some(m) = self.mishaps {
            if m.every == 0 || !(0.0..=MAX_WANTS).contains(&m.wants_up) {
                return fail(
                    "mishaps".into(),
                    "every must be at least 1 and wants_up within 0..=1e15",
                );
            }
            if m.outage_max > MAX_DURATION {
                return fail("mishaps.outage_max".into(), "more than 604800 s (a week)");
            }
        }
        let job = |field: String, name: &str| -> Result<usize, FleetError> {
            jobs.iter()
                .position(|j| j.0 == name)
                .ok_or_else(|| FleetError(format!("{field}: no job {name:?} in the tree")))
        };
        let mut clients = self.clients.per_leaf * leaves;
        for (i, e) in self.timeline.iter().enumerate() {
            let field = |f: &str| format!("timeline[{i}].{f}");
            match &e.action {
                Action::LoseMaster(j) => drop(job(field("lose_master"), j)?),
                Action::Elect(j) => drop(job(field("elect"), j)?),
                Action::Failover(j) => drop(job(field("failover"), j)?),
                Action::Kill(t) | Action::Restart(t) => {
                    let name = if matches!(e.action, Action::Kill(_)) {
                        "kill"
                    } else {
                        "restart"
                    };
                    let j = job(field(&format!("{name}.job")), &t.job)?;
                    let tasks = self.levels[jobs[j].1].tasks;
                    if t.task.is_some_and(|t| t >= tasks) {
                        return fail(field(&format!("{name}.task")), "no such task in the job");
                    }
                }
                Action::Partition(p) => {
                    if job(field("partition.job"), &p.job)? == 0 {
                        return fail(field("partition.job"), "the root has no parent");
                    }
                    if p.duration > MAX_DURATION {
                        return fail(field("partition.for"), "more than 604800 s (a week)");
                    }
                }
                Action::EtcdOutage(o) => {
                    if o.duration.max(o.ttl) > MAX_DURATION {
                        return fail(field("etcd_outage"), "more than 604800 s (a week)");
                    }
                }
                Action::Join(h) => {
                    if let Some(w) = &h.wants {
                        check_wants(&field("join.wants"), w)?;
                    }
                    if !h.over.is_finite() || h.over < 0.0 {
                        return fail(field("join.over"), "must be finite and >= 0");
                    }
                    clients = clients.saturating_add(h.count);
                    if clients > 10_000_000 {
                        return fail(field("join.count"), "more than 10000000 clients");
                    }
                }
                Action::Leave(h) => clients = clients.saturating_sub(h.count),
                Action::Capacity(c) => {
                    if !(0.0..=MAX_WANTS).contains(c) {
                        return fail(field("capacity"), "must be within 0..=1e15");
                    }
                }
                Action::SetWants(s) => {
                    if !(0.0..=MAX_WANTS).contains(&s.wants) {
                        return fail(field("set_wants.wants"), "must be within 0..=1e15");
                    }
                }
            }
            if i > 0 && e.at < self.timeline[i - 1].at {
                return fail(field("at"), "events must be in time order");
            }
        }
        Ok(())
    }
}

impl Level {
    fn one() -> usize {
        1
    }

    fn three() -> usize {
        3
    }
}

impl EtcdOutage {
    fn default_ttl() -> u64 {
        10
    }
}

impl Wants {
    /// One client's wants, drawing from `unit` (uniform in `[0, 1)`) when
    /// they are random.
    pub(super) fn draw(&self, unit: impl FnOnce() -> f64) -> f64 {
        match *self {
            Wants::Constant(w) => w,
            Wants::Around { around, spread } => around * ((1.0 - spread / 2.0) + spread * unit()),
            Wants::Uniform { uniform: [lo, hi] } => lo + (hi - lo) * unit(),
        }
    }
}

/// The longest run, and the longest outage or partition, in seconds.
const MAX_DURATION: u64 = 7 * 86_400;

/// The most jobs in a tree.
const MAX_JOBS: usize = 100_000;

/// The most tasks in a job.
const MAX_TASKS: usize = 100;

/// The most any client may want (a server's largest capacity).
pub(super) const MAX_WANTS: f64 = 1e15;

fn check_wants(field: &str, wants: &Wants) -> Result<(), FleetError> {
    let ok = |w: f64| (0.0..=MAX_WANTS).contains(&w);
    let valid = match *wants {
        Wants::Constant(w) => ok(w),
        Wants::Around { around, spread } => ok(around) && (0.0..=2.0).contains(&spread),
        Wants::Uniform { uniform: [lo, hi] } => ok(lo) && ok(hi) && lo <= hi,
    };
    if valid {
        Ok(())
    } else {
        Err(FleetError(format!(
            "{field}: wants must be within 0..=1e15 (a spread within 0..=2, low <= high)"
        )))
    }
}

fn config_of(value: &serde_norway::Value) -> Result<ServerConfig, FleetError> {
    let text = serde_norway::to_string(value).map_err(|e| FleetError(e.to_string()))?;
    ServerConfig::from_yaml(&text).map_err(|e| FleetError(e.to_string()))
}

/// The message on one line.
fn one_line(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Why a fleet file was refused: one line that names the field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetError(String);

impl fmt::Display for FleetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for FleetError {}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: &str = r#"
duration: 10
levels:
  - name: root
    config: {resources: [{identifier_glob: "*", capacity: 10, algorithm: {kind: FAIR_SHARE, lease_length: 20, refresh_interval: 5}}]}
  - name: dc
    jobs: 2
    config: {resources: [{identifier_glob: "*", capacity: 0, algorithm: {kind: FAIR_SHARE, lease_length: 20, refresh_interval: 5}}]}
clients: {per_leaf: 2, wants: 3}
"#;

    fn err(extra: &str) -> String {
        Fleet::from_yaml(&format!("{SMALL}{extra}"))
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn jobs_are_named_by_level_and_place() {
        let fleet = Fleet::from_yaml(SMALL).unwrap();
        let names: Vec<_> = fleet.jobs().into_iter().map(|j| j.0).collect();
        assert_eq!(names, ["root", "dc0", "dc1"]);
        assert_eq!(fleet.warmup, 60);
        assert_eq!(fleet.resource, "r");
    }

    #[test]
    fn a_malformed_fleet_gets_one_line_naming_the_field() {
        let cases = [
            (
                "timeline: [{at: 1, lose_master: dc7}]",
                "timeline[0].lose_master: no job \"dc7\" in the tree",
            ),
            (
                "timeline: [{at: 1, partition: {job: root, for: 5}}]",
                "timeline[0].partition.job: the root has no parent",
            ),
            (
                "timeline: [{at: 1, kill: {job: dc0, task: 3}}]",
                "timeline[0].kill.task: no such task in the job",
            ),
            (
                "timeline: [{at: 5, elect: dc0}, {at: 1, elect: dc1}]",
                "timeline[1].at: events must be in time order",
            ),
            (
                "timeline: [{at: 5, elect: dc0, kill: {job: dc1}}]",
                "timeline: the event at 5 s has 2 actions: an event has one at line 10 column 11",
            ),
            (
                "timeline: [{elect: dc0}]",
                "timeline: missing field `at` at line 10 column 11",
            ),
        ];
        for (extra, want) in cases {
            assert_eq!(err(extra), want);
        }
        let unknown = err("colour: blue");
        assert!(unknown.starts_with("unknown field `colour`"), "{unknown}");
        let bad_config = Fleet::from_yaml(&SMALL.replace("capacity: 10", "capacity: -1"))
            .unwrap_err()
            .to_string();
        assert!(
            bad_config.starts_with("levels[0].config: resources[0]"),
            "{bad_config}"
        );
        let missing = Fleet::from_yaml(&SMALL.replace("duration: 10", ""))
            .unwrap_err()
            .to_string();
        assert!(missing.contains("missing field `duration`"), "{missing}");
        let config = r#"{resources: [{identifier_glob: "*", capacity: 0, algorithm: {kind: FAIR_SHARE, lease_length: 20, refresh_interval: 5}}]}"#;
        let level = |jobs| format!("\n  - {{name: x, jobs: {jobs}, config: {config}}}");
        let huge = Fleet::from_yaml(&SMALL.replace(
            "\nclients:",
            &format!("{}{}\nclients:", level(1000), level(1000)),
        ))
        .unwrap_err()
        .to_string();
        assert_eq!(huge, "levels[3].jobs: more than 100000 jobs");
        let long = Fleet::from_yaml(&SMALL.replace("duration: 10", "duration: 99999999999"))
            .unwrap_err()
            .to_string();
        assert_eq!(long, "duration: more than 604800 s (a week)");
        let wants = Fleet::from_yaml(&SMALL.replace("wants: 3", "wants: -3"))
            .unwrap_err()
            .to_string();
        assert!(wants.starts_with("clients.wants: "), "{wants}");
        for e in [unknown, bad_config, missing, wants] {
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn wants_are_constant_or_drawn() {
        assert_eq!(Wants::Constant(4.0).draw(|| unreachable!()), 4.0);
        let around = Wants::Around {
            around: 100.0,
            spread: 0.1,
        };
        assert_eq!(around.draw(|| 0.0), 95.0);
        assert_eq!(around.draw(|| 0.5), 100.0);
        let uniform = Wants::Uniform {
            uniform: [2.0, 4.0],
        };
        assert_eq!(uniform.draw(|| 0.25), 2.5);
    }
}
