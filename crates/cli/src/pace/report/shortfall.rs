//! Why a run fell short of its target rate: the summary's warning, read
//! from the limiter's pools at the end of the run.

use super::nanos;

/// What the limiter had admitted when a run ended, beside the ops run.
#[derive(Debug, Clone, Copy)]
pub(in crate::pace) struct Admitted {
    /// `stats().admitted` when the ops were counted.
    pub(in crate::pace) ops: u64,
    /// The ops the callers had run by then.
    pub(in crate::pace) run: u64,
    /// One op's schedule time, in ns (`1e9 / rate`).
    pub(in crate::pace) op_ns: f64,
}

impl Admitted {
    /// Admitted ops no caller ran.
    fn unrun(&self) -> u64 {
        self.ops.saturating_sub(self.run)
    }
}

/// Why a run achieved less than 99 % of its target rate, or `None` if it
/// did not or if the shortfall fits in the active pool (`pool_ns`, its
/// most: `max(1 ms, 2 ops) * burst_ratio`), as at very low rates where a
/// run ends between two ops.
///
/// The limiter's pools conserve schedule time: the active and waiting
/// pools grow only by elapsed time and shrink only by what ops take. So
/// the schedule the run missed, `elapsed * (1 - ratio)`, is still in the
/// pools at the end, and beyond what the active pool holds it is backlog,
/// unless the limiter fell behind the clock or admitted ops that no caller
/// ran. A backlog of at least half the missed schedule therefore means that
/// ops were due and no caller came to take them: the callers, not the
/// limiter, were the bottleneck (too few threads, a slow op, a busy
/// machine, or the stalls asked for).
///
/// Otherwise, admitted ops not run that make up at least half the missed
/// schedule mean that most of what the run missed was admitted and did not
/// reach the callers by the end: it waits in the callers' thread-local
/// budgets. A caller served from the wait queue keeps there
/// the whole ops it is handed beyond its own, for its next acquires: a
/// caller that stops, or acquires seldom, holds them until it acquires
/// again or exits.
///
/// Otherwise, with a fill interval set (`fill_interval_ns`) and a missed
/// schedule of at most one and a quarter intervals (a waiting caller fills
/// a quarter interval after the filler was due), the schedule since the
/// last fill is missing: it reaches the pool at the next fill, so a run
/// ends with up to one interval of it still to come.
///
/// Anything else points at the limiter falling behind the clock or at the
/// measurement.
pub(in crate::pace) fn shortfall(
    ratio: f64,
    elapsed_s: f64,
    backlog_ns: u64,
    pool_ns: f64,
    fill_interval_ns: Option<f64>,
    admitted: Admitted,
    stalled: bool,
) -> Option<String> {
    // NaN in either (an empty run) names no shortfall either.
    if ratio.is_nan() || ratio >= 0.99 || elapsed_s.is_nan() || elapsed_s <= 0.0 {
        return None;
    }
    let missed_ns = elapsed_s * (1.0 - ratio).min(1.0) * 1e9;
    if missed_ns <= pool_ns {
        return None;
    }
    let percent = 100.0 * (1.0 - ratio);
    Some(if backlog_ns as f64 >= 0.5 * missed_ns {
        let why = if stalled {
            "the stalls left a backlog the burst ratio had not cleared by the end"
        } else {
            "more threads (--threads), a shorter --op-time or a less busy machine would help"
        };
        format!(
            "achieved {percent:.1}% below target because the callers were the bottleneck, \
             not the limiter: {} of ops were due and not taken at the end; {why}",
            nanos(backlog_ns)
        )
    } else if admitted.unrun() as f64 * admitted.op_ns >= 0.5 * missed_ns {
        let unrun = admitted.unrun();
        format!(
            "achieved {percent:.1}% below target, most of it in ops the limiter admitted and \
             no caller ran: {unrun} of the {} ops it admitted ({} of schedule; the run missed {}) \
             were not run by the end, held in the callers' thread-local budgets (a caller served from the \
             wait queue keeps the ops it is handed beyond its own for its next acquires) or \
             granted to callers not yet running",
            admitted.ops,
            nanos((unrun as f64 * admitted.op_ns) as u64),
            nanos(missed_ns as u64)
        )
    } else if let Some(interval) = fill_interval_ns.filter(|&i| missed_ns <= 1.25 * i) {
        format!(
            "achieved {percent:.1}% below target, the schedule since the last fill: with a {} \
             fill interval the pool takes in each interval's time when it has passed, so a run \
             ends with up to an interval of it still to come (the run missed {}); a run of many \
             intervals, or a shorter --fill-interval, makes that a smaller share",
            nanos(interval as u64),
            nanos(missed_ns as u64)
        )
    } else {
        format!(
            "achieved {percent:.1}% below target although the limiter held only {} of backlog \
             at the end (the run missed {}): the limiter or the measurement fell behind the clock",
            nanos(backlog_ns),
            nanos(missed_ns as u64)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shortfall_with_a_backlog_is_the_callers() {
        // On target, or within 1 %: nothing to say.
        const POOL: f64 = 1.1e6;
        // 5 s at 1K ops/s, every admitted op run.
        let all_run = |run| Admitted {
            ops: run,
            run,
            op_ns: 1e6,
        };
        assert_eq!(
            shortfall(1.0, 5.0, 0, POOL, None, all_run(5000), false),
            None
        );
        assert_eq!(
            shortfall(0.991, 5.0, 45_000_000, POOL, None, all_run(4955), false),
            None
        );
        // 2 ops in 2.5 s at 1 op/s: the missed 0.5 s is in the active pool
        // (2 ops of time, 2.2 s with burst 1.1), not a bottleneck.
        let slow = Admitted {
            ops: 2,
            run: 2,
            op_ns: 1e9,
        };
        assert_eq!(shortfall(0.8, 2.5, 0, 2.2e9, None, slow, false), None);
        // 10 % short over 5 s misses 500 ms of schedule; 250 ms or more of
        // it still due at the end means no caller came for it.
        let w = shortfall(0.9, 5.0, 250_000_000, POOL, None, all_run(4500), false).unwrap();
        assert_eq!(
            w,
            "achieved 10.0% below target because the callers were the bottleneck, \
             not the limiter: 250.0ms of ops were due and not taken at the end; \
             more threads (--threads), a shorter --op-time or a less busy machine would help"
        );
        let w = shortfall(0.9, 5.0, 400_000_000, POOL, None, all_run(4500), true).unwrap();
        assert!(w.ends_with("the stalls left a backlog the burst ratio had not cleared by the end"));
        // Less than half of it due, and every admitted op run: the limiter
        // fell behind.
        let w = shortfall(0.9, 5.0, 249_000_000, POOL, None, all_run(4500), false).unwrap();
        assert_eq!(
            w,
            "achieved 10.0% below target although the limiter held only 249.0ms of backlog \
             at the end (the run missed 500.0ms): the limiter or the measurement fell behind \
             the clock"
        );
    }

    #[test]
    fn a_shortfall_of_the_schedule_since_the_last_fill_is_named() {
        // `max(1 ms, 2 ops) * 1.1`, as `pace` passes it.
        const POOL: f64 = 2.2e6;
        // 1K ops/s for 3 s with a 1 s interval: fills at 1 s and 2 s, the
        // one at 3 s after the end; 2001 ops (with the start's op).
        let admitted = Admitted {
            ops: 2001,
            run: 2001,
            op_ns: 1e6,
        };
        let w = shortfall(0.667, 3.0, 0, POOL, Some(1e9), admitted, false).unwrap();
        assert_eq!(
            w,
            "achieved 33.3% below target, the schedule since the last fill: with a 1.000s \
             fill interval the pool takes in each interval's time when it has passed, so a run \
             ends with up to an interval of it still to come (the run missed 999.0ms); a run \
             of many intervals, or a shorter --fill-interval, makes that a smaller share"
        );
        // Up to an interval and a quarter; beyond it, or with no interval
        // set, the limiter or the measurement fell behind.
        let at = |ratio| shortfall(ratio, 3.0, 0, POOL, Some(1e9), admitted, false).unwrap();
        assert!(at(0.5834).contains("since the last fill"));
        assert!(at(0.5832).contains("fell behind the clock"));
        let w = shortfall(0.667, 3.0, 0, POOL, None, admitted, false).unwrap();
        assert!(w.contains("fell behind the clock"), "{w}");
    }

    #[test]
    fn a_shortfall_of_admitted_ops_not_run_is_named() {
        const POOL: f64 = 2.2e6;
        // 1K ops/s for 2 s: the limiter admitted its 2004 ops (the target
        // and the active pool's first ops), the callers ran 1666 of them.
        // The run missed 334 ms; 338 ops not run are 338 ms, more than half.
        let admitted = Admitted {
            ops: 2004,
            run: 1666,
            op_ns: 1e6,
        };
        let w = shortfall(0.833, 2.0, 0, POOL, None, admitted, false).unwrap();
        assert_eq!(
            w,
            "achieved 16.7% below target, most of it in ops the limiter admitted and no \
             caller ran: 338 of the 2004 ops it admitted (338.0ms of schedule; the run missed \
             334.0ms) were not run by the end, held in the callers' thread-local budgets (a \
             caller served from the wait queue keeps the ops it is handed beyond its own for \
             its next acquires) or granted to callers not yet running"
        );
        // A backlog of half the missed schedule (or more) still names the
        // callers, whatever else is unrun.
        let w = shortfall(0.833, 2.0, 168_000_000, POOL, None, admitted, false).unwrap();
        assert!(w.contains("the callers were the bottleneck"), "{w}");
        // 20 % short over 2 s misses 400 ms: 200 unrun ops (200 ms) are
        // half of it and name the budgets; 199 do not, and leave the
        // limiter or the measurement.
        let run_1600 = |ops| Admitted {
            ops,
            run: 1600,
            op_ns: 1e6,
        };
        let w = shortfall(0.8, 2.0, 0, POOL, None, run_1600(1800), false).unwrap();
        assert!(w.contains("200 of the 1800 ops it admitted"), "{w}");
        let w = shortfall(0.8, 2.0, 0, POOL, None, run_1600(1799), false).unwrap();
        assert!(
            w.ends_with("the limiter or the measurement fell behind the clock"),
            "{w}"
        );
    }
}
