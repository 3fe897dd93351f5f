//! What `tollgate pace` prints: a line per interval and a summary, as text,
//! CSV or JSON lines.

use std::io::Write;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

mod shortfall;
pub(super) use self::shortfall::{shortfall, Admitted};

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Format {
    /// Aligned lines for people.
    Text,
    /// A header, a row per interval, the summary as a `#` comment line.
    Csv,
    /// One JSON object per line: `"type"` is `interval`, `summary` or `idle`.
    Json,
}

/// Lateness of the ops the callers ran and reported: how long after its
/// place in the schedule each started (what `acquire` returned), in
/// nanoseconds. Percentiles and mean come from the same histogram.
#[derive(Debug, Clone, Copy, Serialize)]
pub(super) struct Lateness {
    #[serde(rename = "lateness_p50_ns")]
    pub(super) p50: u64,
    #[serde(rename = "lateness_p99_ns")]
    pub(super) p99: u64,
    #[serde(rename = "lateness_max_ns")]
    pub(super) max: u64,
    #[serde(rename = "lateness_mean_ns")]
    pub(super) mean: u64,
}

impl Lateness {
    pub(super) fn of(histogram: &Histogram<u64>) -> Lateness {
        Lateness {
            p50: histogram.value_at_quantile(0.5),
            p99: histogram.value_at_quantile(0.99),
            max: histogram.max(),
            mean: histogram.mean().round() as u64,
        }
    }
}

fn seconds_f64<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// What a run is about to do, printed before it starts.
#[derive(Debug, Serialize)]
pub(super) struct Start {
    pub(super) spec: String,
    /// What the rate as written means, where that may surprise (`10m =
    /// 10M ops/s`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) note: Option<String>,
    pub(super) mode: &'static str,
    pub(super) threads: usize,
    #[serde(rename = "duration_s", serialize_with = "seconds_f64")]
    pub(super) duration: Duration,
    #[serde(rename = "interval_s", serialize_with = "seconds_f64")]
    pub(super) interval: Duration,
    /// Where the picture goes (`--plot`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) plot: Option<String>,
}

/// One interval.
#[derive(Debug, Serialize)]
pub(super) struct Line {
    /// End of the interval, seconds since the start.
    pub(super) elapsed_s: f64,
    pub(super) target_ops_per_s: f64,
    /// Ops completed in the interval over its measured length.
    pub(super) achieved_ops_per_s: f64,
    /// achieved / target.
    pub(super) ratio: f64,
    pub(super) ops: u64,
    /// The limiter's backlog at the end of the interval.
    pub(super) backlog_ns: u64,
    #[serde(flatten)]
    pub(super) lateness: Lateness,
    /// Whether the callers were stalled during some of the interval.
    pub(super) stalled: bool,
}

/// The whole run.
#[derive(Debug, Serialize)]
pub(super) struct Summary {
    pub(super) spec: String,
    pub(super) mode: &'static str,
    pub(super) threads: usize,
    pub(super) elapsed_s: f64,
    /// Whether Ctrl-C (SIGINT) ended the run before its --duration.
    pub(super) interrupted: bool,
    pub(super) total_ops: u64,
    pub(super) target_ops_per_s: f64,
    pub(super) achieved_ops_per_s: f64,
    /// achieved / target over the whole run: the accuracy figure.
    pub(super) ratio: f64,
    /// Over every op the callers reported (`lateness_ops` of them).
    #[serde(flatten)]
    pub(super) lateness: Lateness,
    /// Ops whose lateness the callers reported: every op run by tasks
    /// (`--async`); with threads, those run by threads not blocked in
    /// `acquire` at the end (their last ops are not reported).
    pub(super) lateness_ops: u64,
    /// `stats().admitted` at the end of the run.
    pub(super) admitted: u64,
    /// `stats().total_wait` at the end of the run: the limiter's own
    /// account of lateness, the backlog at each fill times the ops admitted
    /// after it, summed over every admitted op (those taken into budgets
    /// and not run included).
    pub(super) total_wait_ns: u64,
    /// `total_wait_ns / admitted`: the limiter's mean lateness per admitted
    /// op.
    pub(super) limiter_mean_wait_ns: u64,
    /// The limiter's backlog at the end of the run: schedule time due that
    /// no op has taken yet.
    pub(super) backlog_ns: u64,
    pub(super) cpu_user_s: f64,
    pub(super) cpu_system_s: f64,
    /// Process CPU time (callers, filler, this tool) per op counted.
    pub(super) cpu_ns_per_op: f64,
    /// Process CPU time over wall time: cores kept busy.
    pub(super) cpu_cores: f64,
    /// Cores the whole machine kept busy meanwhile (this process
    /// included), where `/proc/stat` tells: a noise gauge.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) host_busy_cores: Option<f64>,
    /// Why the achieved rate fell short of the target, when it did (see
    /// [`shortfall`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) warning: Option<String>,
}

/// An idle limiter's cost.
#[derive(Debug, Serialize)]
pub(super) struct IdleSummary {
    pub(super) spec: String,
    /// Ops acquired in the 50 ms before the idle period.
    pub(super) warm_ops: u64,
    pub(super) elapsed_s: f64,
    pub(super) cpu_user_s: f64,
    pub(super) cpu_system_s: f64,
    /// Process CPU time over wall time, in percent of one core.
    pub(super) cpu_core_pct: f64,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Record<'a> {
    Start(&'a Start),
    Interval(&'a Line),
    Summary(&'a Summary),
    Idle(&'a IdleSummary),
}

/// Prints lines and summaries in one format.
#[derive(Debug)]
pub(super) struct Printer {
    format: Format,
    header_done: bool,
}

const CSV_HEADER: &str = "elapsed_s,target_ops_per_s,achieved_ops_per_s,ratio,ops,\
    backlog_ns,lateness_p50_ns,lateness_p99_ns,lateness_max_ns,lateness_mean_ns,stalled";

impl Printer {
    pub(super) fn new(format: Format) -> Printer {
        Printer {
            format,
            header_done: false,
        }
    }

    pub(super) fn line(&mut self, line: &Line) {
        let text = self.line_text(line);
        self.header_done = true;
        emit(&text);
    }

    fn line_text(&self, line: &Line) -> String {
        match self.format {
            Format::Text => format!(
                "{:>8.2}s  target {:>RATE_WIDTH$}  achieved {:>RATE_WIDTH$}  x{:.4}  backlog {:>TIME_WIDTH$}  lateness p50 {:>TIME_WIDTH$} p99 {:>TIME_WIDTH$}{}",
                line.elapsed_s,
                rate(line.target_ops_per_s),
                rate(line.achieved_ops_per_s),
                line.ratio,
                nanos(line.backlog_ns),
                nanos(line.lateness.p50),
                nanos(line.lateness.p99),
                if line.stalled { "  (stalled)" } else { "" },
            ),
            Format::Csv => {
                let mut text = String::new();
                if !self.header_done {
                    text.push_str(CSV_HEADER);
                    text.push('\n');
                }
                text.push_str(&format!(
                    "{:.6},{},{:.1},{:.6},{},{},{},{},{},{},{}",
                    line.elapsed_s,
                    line.target_ops_per_s,
                    line.achieved_ops_per_s,
                    line.ratio,
                    line.ops,
                    line.backlog_ns,
                    line.lateness.p50,
                    line.lateness.p99,
                    line.lateness.max,
                    line.lateness.mean,
                    line.stalled,
                ));
                text
            }
            Format::Json => json(&Record::Interval(line)),
        }
    }

    /// The line printed before the run: what it runs and for how long.
    pub(super) fn start(&mut self, s: &Start) {
        emit(&self.start_text(s));
    }

    fn start_text(&self, s: &Start) -> String {
        match self.format {
            Format::Text => format!(
                "tollgate pace {}{}: {} {} for {}, a line every {}{}",
                s.spec,
                s.note.as_ref().map_or(String::new(), |n| format!(" ({n})")),
                s.threads,
                mode_word(s.mode, s.threads),
                humantime::format_duration(s.duration),
                humantime::format_duration(s.interval),
                s.plot
                    .as_ref()
                    .map_or(String::new(), |p| format!(", picture to {p}")),
            ),
            Format::Csv => format!("# start {}", key_values(&Record::Start(s))),
            Format::Json => json(&Record::Start(s)),
        }
    }

    pub(super) fn summary(&mut self, s: &Summary) {
        emit(&self.summary_text(s));
    }

    fn summary_text(&self, s: &Summary) -> String {
        match self.format {
            Format::Text => format!(
                "tollgate pace {spec}: {threads} {mode}, {elapsed:.3}s{interrupted}\n\
                 \x20 ops         {ops} (limiter admitted {admitted})\n\
                 \x20 rate        {achieved} achieved of {target} target: ratio {ratio:.5}\n\
                 \x20 lateness    p50 {p50}  p99 {p99}  max {max}  mean {mean}, over the {reported} ops the callers reported\n\
                 \x20 limiter     mean wait {limiter_mean} over its {admitted} admitted ops (the backlog at each fill times the ops admitted after it)\n\
                 \x20 backlog     {backlog} due and not taken at the end\n\
                 \x20 cpu         {user:.3}s user + {sys:.3}s system ({cores:.2} cores), {per_op} per op{host}{note}{warning}",
                spec = s.spec,
                threads = s.threads,
                mode = callers(s),
                elapsed = s.elapsed_s,
                interrupted = if s.interrupted {
                    " (interrupted by Ctrl-C)"
                } else {
                    ""
                },
                ops = s.total_ops,
                admitted = s.admitted,
                achieved = rate(s.achieved_ops_per_s),
                target = rate(s.target_ops_per_s),
                ratio = s.ratio,
                p50 = nanos(s.lateness.p50),
                p99 = nanos(s.lateness.p99),
                max = nanos(s.lateness.max),
                mean = nanos(s.lateness.mean),
                reported = s.lateness_ops,
                limiter_mean = nanos(s.limiter_mean_wait_ns),
                backlog = nanos(s.backlog_ns),
                user = s.cpu_user_s,
                sys = s.cpu_system_s,
                cores = s.cpu_cores,
                per_op = fractional_nanos(s.cpu_ns_per_op),
                host = s.host_busy_cores.map_or(String::new(), |h| format!(
                    "\n  machine     {h:.2} cores busy in all (other processes: {:.2})",
                    (h - s.cpu_cores).max(0.0)
                )),
                note = unreported(s).map_or(String::new(), |n| format!("\n  note        {n}")),
                warning = s
                    .warning
                    .as_ref()
                    .map_or(String::new(), |w| format!("\n  warning     {w}")),
            ),
            Format::Csv => format!("# summary {}", key_values(&Record::Summary(s))),
            Format::Json => json(&Record::Summary(s)),
        }
    }

    pub(super) fn idle(&mut self, s: &IdleSummary) {
        let text = match self.format {
            Format::Text => format!(
                "tollgate pace {spec} --idle: no callers for {elapsed:.3}s (after {warm} ops)\n\
                 \x20 cpu  {user:.6}s user + {sys:.6}s system = {pct:.4}% of a core",
                spec = s.spec,
                elapsed = s.elapsed_s,
                warm = s.warm_ops,
                user = s.cpu_user_s,
                sys = s.cpu_system_s,
                pct = s.cpu_core_pct,
            ),
            Format::Csv => format!("# idle {}", key_values(&Record::Idle(s))),
            Format::Json => json(&Record::Idle(s)),
        };
        emit(&text);
    }
}

/// Why the lateness percentiles may disagree with the limiter's mean:
/// said when the callers reported fewer than half the ops they ran.
fn unreported(s: &Summary) -> Option<String> {
    (s.lateness_ops.saturating_mul(2) < s.total_ops).then(|| {
        format!(
            "the lateness figures cover {} of the {} ops run: a caller thread reports its ops \
             when it returns from acquire after an interval ends, and most were still waiting \
             at the end; the limiter's mean wait covers every op",
            s.lateness_ops, s.total_ops
        )
    })
}

/// What ran the ops, as a word for `threads` of them: `thread`, `tasks`.
pub(super) fn callers(s: &Summary) -> &'static str {
    mode_word(s.mode, s.threads)
}

/// `thread`, `threads`, `task` or `tasks`, for `n` callers in `mode`.
fn mode_word(mode: &str, n: usize) -> &'static str {
    match (mode == "async", n == 1) {
        (true, true) => "task",
        (true, false) => "tasks",
        (false, true) => "thread",
        (false, false) => "threads",
    }
}

fn json(record: &Record<'_>) -> String {
    serde_json::to_string(record).expect("plain numbers and strings serialise")
}

/// `key=value` pairs of a record's fields, for a CSV comment line.
fn key_values(record: &Record<'_>) -> String {
    let value = serde_json::to_value(record).expect("plain numbers and strings serialise");
    let Some(fields) = value.as_object() else {
        return String::new();
    };
    fields
        .iter()
        .filter(|(key, _)| *key != "type")
        .map(|(key, value)| match value {
            serde_json::Value::String(s) => format!("{key}={s}"),
            other => format!("{key}={other}"),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn emit(text: &str) {
    let mut out = std::io::stdout().lock();
    // A closed pipe (`| head`) is not an error worth reporting.
    let _ = writeln!(out, "{text}");
    let _ = out.flush();
}

/// The width of a [`rate`] column: `1000.000G/s` at most (1e12 ops/s).
const RATE_WIDTH: usize = 11;
/// The width of a [`nanos`] column: `9999.999s` at most, beyond which a
/// column is not kept.
const TIME_WIDTH: usize = 9;

/// `12.3M/s`.
fn rate(per_s: f64) -> String {
    let (value, unit) = match per_s {
        r if r >= 1e9 => (r / 1e9, "G"),
        r if r >= 1e6 => (r / 1e6, "M"),
        r if r >= 1e3 => (r / 1e3, "K"),
        r => (r, ""),
    };
    format!("{value:.3}{unit}/s")
}

/// A mean that may fall between nanoseconds: `98.3ns`, then as [`nanos`]
/// (`60.4µs`).
fn fractional_nanos(ns: f64) -> String {
    if ns < 999.95 {
        format!("{ns:.1}ns")
    } else {
        nanos(ns.round() as u64)
    }
}

/// `12.3µs`.
fn nanos(ns: u64) -> String {
    let ns_f = ns as f64;
    match ns {
        0..=999 => format!("{ns}ns"),
        1_000..=999_999 => format!("{:.1}µs", ns_f / 1e3),
        1_000_000..=999_999_999 => format!("{:.1}ms", ns_f / 1e6),
        _ => format!("{:.3}s", ns_f / 1e9),
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    #[test]
    fn human_units() {
        assert_eq!(rate(10e6), "10.000M/s");
        assert_eq!(rate(999.0), "999.000/s");
        assert_eq!(nanos(999), "999ns");
        assert_eq!(nanos(12_340), "12.3µs");
        assert_eq!(nanos(2_500_000_000), "2.500s");
        assert_eq!(fractional_nanos(98.3), "98.3ns");
        assert_eq!(fractional_nanos(60_379.0), "60.4µs");
        assert_eq!(fractional_nanos(999.96), "1.0µs");
    }

    pub(in crate::pace) fn summary() -> Summary {
        let mut histogram = crate::pace::worker::new_histogram();
        // 1000 ops reported: 990 on time, 10 at 2 µs (a value the
        // histogram holds exactly).
        histogram.record_n(0, 990).unwrap();
        histogram.record_n(2_000, 10).unwrap();
        Summary {
            spec: "100K,1.1".into(),
            mode: "async",
            threads: 100_000,
            elapsed_s: 3.0,
            interrupted: false,
            total_ops: 299_956,
            target_ops_per_s: 1e5,
            achieved_ops_per_s: 99_985.3,
            ratio: 0.999_853,
            lateness: Lateness::of(&histogram),
            lateness_ops: histogram.len(),
            admitted: 300_107,
            total_wait_ns: 77_277_552_500,
            limiter_mean_wait_ns: 257_500,
            backlog_ns: 0,
            cpu_user_s: 0.636,
            cpu_system_s: 0.168,
            cpu_ns_per_op: 60_379.0,
            cpu_cores: 0.27,
            host_busy_cores: Some(0.5),
            warning: None,
        }
    }

    #[test]
    fn the_summary_says_what_each_lateness_figure_counts() {
        let text = Printer::new(Format::Text).summary_text(&summary());
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "tollgate pace 100K,1.1: 100000 tasks, 3.000s");
        // The percentiles and the mean come from one histogram: p50 and
        // p99 on time, the mean 10 * 2 µs / 1000.
        assert_eq!(
            lines[3],
            "  lateness    p50 0ns  p99 0ns  max 2.0µs  mean 20ns, \
             over the 1000 ops the callers reported"
        );
        assert_eq!(
            lines[4],
            "  limiter     mean wait 257.5µs over its 300107 admitted ops \
             (the backlog at each fill times the ops admitted after it)"
        );
        assert_eq!(
            lines[6],
            "  cpu         0.636s user + 0.168s system (0.27 cores), 60.4µs per op"
        );
        assert_eq!(
            lines[8],
            "  note        the lateness figures cover 1000 of the 299956 ops run: a caller \
             thread reports its ops when it returns from acquire after an interval ends, and \
             most were still waiting at the end; the limiter's mean wait covers every op"
        );
        // Half the ops reported, or more: nothing to explain.
        let mut most = summary();
        most.lateness_ops = most.total_ops / 2;
        let text = Printer::new(Format::Text).summary_text(&most);
        assert!(!text.contains("note"), "{text}");
        let json: serde_json::Value =
            serde_json::from_str(&Printer::new(Format::Json).summary_text(&summary())).unwrap();
        assert_eq!(json["lateness_mean_ns"], 20);
        assert_eq!(json["lateness_ops"], 1000);
        assert_eq!(json["limiter_mean_wait_ns"], 257_500);
    }

    #[test]
    fn the_start_line_names_the_run_and_where_its_picture_goes() {
        let start = Start {
            spec: "100K,1.5".into(),
            note: None,
            mode: "threads",
            threads: 2,
            duration: Duration::from_secs(3),
            interval: Duration::from_millis(100),
            plot: Some("pace.svg".into()),
        };
        let mut printer = Printer::new(Format::Text);
        assert_eq!(
            printer.start_text(&start),
            "tollgate pace 100K,1.5: 2 threads for 3s, a line every 100ms, picture to pace.svg"
        );
        printer = Printer::new(Format::Csv);
        assert_eq!(
            printer.start_text(&start),
            "# start duration_s=3.0 interval_s=0.1 mode=threads plot=pace.svg spec=100K,1.5 \
             threads=2"
        );
        let json: serde_json::Value =
            serde_json::from_str(&Printer::new(Format::Json).start_text(&start)).unwrap();
        assert_eq!(json["type"], "start");
        assert_eq!(json["interval_s"], 0.1);
    }

    #[test]
    fn a_run_ended_by_ctrl_c_says_so() {
        let mut s = summary();
        s.interrupted = true;
        let text = Printer::new(Format::Text).summary_text(&s);
        assert_eq!(
            text.lines().next(),
            Some("tollgate pace 100K,1.1: 100000 tasks, 3.000s (interrupted by Ctrl-C)")
        );
        let json: serde_json::Value =
            serde_json::from_str(&Printer::new(Format::Json).summary_text(&s)).unwrap();
        assert_eq!(json["interrupted"], true);
    }

    #[test]
    fn the_start_line_says_what_a_lowercase_m_means() {
        let start = Start {
            spec: "10M,1.1".into(),
            note: Some("10m = 10M ops/s".into()),
            mode: "threads",
            threads: 2,
            duration: Duration::from_secs(1),
            interval: Duration::from_secs(1),
            plot: None,
        };
        assert_eq!(
            Printer::new(Format::Text).start_text(&start),
            "tollgate pace 10M,1.1 (10m = 10M ops/s): 2 threads for 1s, a line every 1s"
        );
        let json: serde_json::Value =
            serde_json::from_str(&Printer::new(Format::Json).start_text(&start)).unwrap();
        assert_eq!(json["note"], "10m = 10M ops/s");
    }

    /// Where each column starts in a text line, in characters.
    fn columns(text: &str) -> Vec<usize> {
        ["target", "achieved", " x", "backlog", "p50", "p99"]
            .iter()
            .map(|word| text[..text.find(word).unwrap()].chars().count())
            .collect()
    }

    #[test]
    fn interval_columns_keep_their_place_at_every_rate() {
        let line = |rate: f64, backlog_ns: u64, late_ns: u64| Line {
            elapsed_s: 1.0,
            target_ops_per_s: rate,
            achieved_ops_per_s: rate * 0.999,
            ratio: 0.999,
            ops: rate as u64,
            backlog_ns,
            lateness: Lateness {
                p50: late_ns,
                p99: late_ns,
                max: late_ns,
                mean: late_ns,
            },
            stalled: false,
        };
        let text = |l: &Line| Printer::new(Format::Text).line_text(l);
        let first = columns(&text(&line(999.0, 0, 0)));
        for l in [
            line(99_999.0, 999_999, 999),
            line(100_000.0, 1_000_000, 999_999),
            line(999_999.0, 999_999_999, 999_999_999),
            line(1e12, 1_234_567_000_000, 1_234_567_000_000),
        ] {
            assert_eq!(columns(&text(&l)), first, "{}", text(&l));
        }
    }

    #[test]
    fn json_lines_are_tagged_and_flat() {
        let line = Line {
            elapsed_s: 1.0,
            target_ops_per_s: 100.0,
            achieved_ops_per_s: 99.0,
            ratio: 0.99,
            ops: 99,
            backlog_ns: 0,
            lateness: Lateness {
                p50: 1,
                p99: 2,
                max: 3,
                mean: 2,
            },
            stalled: false,
        };
        let v: serde_json::Value = serde_json::from_str(&json(&Record::Interval(&line))).unwrap();
        assert_eq!(v["type"], "interval");
        assert_eq!(v["lateness_p99_ns"], 2);
        assert_eq!(v["lateness_mean_ns"], 2);
        assert_eq!(v["ops"], 99);
    }
}
