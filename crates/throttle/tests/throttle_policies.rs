//! Every throttle policy against a naive reference model, on explicit
//! nanosecond times, plus the survey's worked examples.

use std::time::Duration;

use proptest::prelude::*;
use tollgate_throttle::{FixedWindow, Policy, SlidingLog, SlidingWindowCounter, Verdict};

const SEC: u64 = 1_000_000_000;

/// Seconds after 1:00:00.
fn at(min: u64, sec: u64) -> u64 {
    (min * 60 + sec) * SEC
}

#[test]
fn survey_sliding_log_example_with_rejections_logged() {
    // Two requests per minute; the rejected 1:00:50 stays in the log.
    let p = SlidingLog::new(2, Duration::from_secs(60))
        .unwrap()
        .log_rejected(true);
    let mut s = p.new_state(0);
    assert_eq!(
        p.check(&mut s, at(0, 1), 1),
        Verdict::Admit { remaining: 1 }
    );
    assert_eq!(
        p.check(&mut s, at(0, 30), 1),
        Verdict::Admit { remaining: 0 }
    );
    // Log size 3 > 2: rejected; a retry fits once 1:00:30 leaves (1:01:30).
    assert_eq!(
        p.check(&mut s, at(0, 50), 1),
        Verdict::Reject {
            retry_after_ns: 40 * SEC
        }
    );
    // 1:01:40: 1:00:01 and 1:00:30 are outdated; 1:00:50 and 1:01:40 remain.
    assert_eq!(
        p.check(&mut s, at(1, 40), 1),
        Verdict::Admit { remaining: 0 }
    );
    // 1:01:45 is rejected and logged: once 1:00:50 leaves, its own knock
    // and 1:01:40 still fill the log, so a retry fits only at 1:02:40.
    assert_eq!(
        p.check(&mut s, at(1, 45), 1),
        Verdict::Reject {
            retry_after_ns: 55 * SEC
        }
    );
    assert!(!p.check(&mut s, at(1, 50), 1).is_admitted());
}

#[test]
fn survey_sliding_log_example_without_logging_rejections() {
    let p = SlidingLog::new(2, Duration::from_secs(60)).unwrap();
    let mut s = p.new_state(0);
    assert!(p.check(&mut s, at(0, 1), 1).is_admitted());
    assert!(p.check(&mut s, at(0, 30), 1).is_admitted());
    assert_eq!(
        p.check(&mut s, at(0, 50), 1),
        Verdict::Reject {
            retry_after_ns: 11 * SEC
        }
    );
    // Only the 1:01:40 entry is left after it: one more fits.
    assert_eq!(
        p.check(&mut s, at(1, 40), 1),
        Verdict::Admit { remaining: 1 }
    );
}

#[test]
fn sliding_log_window_is_half_open() {
    // An entry leaves the window exactly W after it was logged.
    let p = SlidingLog::new(1, Duration::from_secs(60)).unwrap();
    let mut s = p.new_state(0);
    assert!(p.check(&mut s, at(0, 0), 1).is_admitted());
    assert!(!p.check(&mut s, at(0, 60) - 1, 1).is_admitted());
    assert!(p.check(&mut s, at(0, 60), 1).is_admitted());
}

#[test]
fn survey_sliding_window_counter_example() {
    // 7 per minute, 5 in the previous minute, 3 in this one, a request 30%
    // into it: 3 + 5 x 0.7 = 6.5, rounded down 6; admitted.
    let p = SlidingWindowCounter::new(7, Duration::from_secs(60)).unwrap();
    let mut s = p.new_state(0);
    for i in 0..5 {
        assert!(p.check(&mut s, at(0, 10 + i), 1).is_admitted());
    }
    for i in 0..3 {
        assert!(p.check(&mut s, at(1, i), 1).is_admitted());
    }
    assert_eq!(
        p.check(&mut s, at(1, 18), 1),
        Verdict::Admit { remaining: 0 }
    );
    // Now 4 + floor(5 x 0.7) = 7: the next is rejected until the previous
    // minute's weighted count falls to 2, just after 5 x (60 - r) / 60 = 3,
    // i.e. one nanosecond after 1:01:24.
    assert_eq!(
        p.check(&mut s, at(1, 18), 1),
        Verdict::Reject {
            retry_after_ns: 6 * SEC + 1
        }
    );
    assert!(!p.check(&mut s, at(1, 24), 1).is_admitted());
    assert!(p.check(&mut s, at(1, 24) + 1, 1).is_admitted());
}

#[test]
fn fixed_window_admits_twice_the_limit_across_a_boundary() {
    let p = FixedWindow::new(3, Duration::from_secs(60)).unwrap();
    let mut s = p.new_state(0);
    assert_eq!(
        p.check(&mut s, at(0, 59), 3),
        Verdict::Admit { remaining: 0 }
    );
    assert_eq!(
        p.check(&mut s, at(0, 59), 1),
        Verdict::Reject {
            retry_after_ns: SEC
        }
    );
    assert_eq!(
        p.check(&mut s, at(1, 0), 3),
        Verdict::Admit { remaining: 0 }
    );
}

#[test]
fn fixed_window_limits_above_half_of_u64_do_not_overflow() {
    let p = FixedWindow::new(u64::MAX, Duration::from_secs(1)).unwrap();
    let mut s = p.new_state(0);
    let half = u64::MAX / 2 + 1;
    assert_eq!(
        p.check(&mut s, 0, half),
        Verdict::Admit {
            remaining: half - 1
        }
    );
    // count + cost would be 2^64: over the limit, refused, count unchanged.
    assert_eq!(
        p.check(&mut s, 1, half),
        Verdict::Reject {
            retry_after_ns: 999_999_999
        }
    );
    assert_eq!(
        p.check(&mut s, 2, half - 1),
        Verdict::Admit { remaining: 0 }
    );
    assert_eq!(p.check(&mut s, 3, 0), Verdict::Admit { remaining: 0 });
}

#[test]
fn fixed_window_at_the_end_of_the_timeline_does_not_overflow() {
    let p = FixedWindow::new(2, Duration::from_nanos(1)).unwrap();
    let mut s = p.new_state(u64::MAX);
    assert_eq!(
        p.check(&mut s, u64::MAX, 2),
        Verdict::Admit { remaining: 0 }
    );
    // The last window never ends: no retry time before the clock runs out.
    assert_eq!(
        p.check(&mut s, u64::MAX, 1),
        Verdict::Reject { retry_after_ns: 0 }
    );
    let standing = p.standing(&s, u64::MAX);
    assert_eq!((standing.remaining, standing.reset_ns), (0, 0));
}

#[test]
fn sliding_window_counter_at_the_end_of_the_timeline_does_not_overflow() {
    let p = SlidingWindowCounter::new(2, Duration::from_nanos(1)).unwrap();
    let mut s = p.new_state(u64::MAX);
    assert_eq!(
        p.check(&mut s, u64::MAX, 2),
        Verdict::Admit { remaining: 0 }
    );
    assert!(matches!(
        p.check(&mut s, u64::MAX, 1),
        Verdict::Reject { .. }
    ));
}

#[test]
fn bad_limits_are_errors() {
    assert!(FixedWindow::new(0, Duration::from_secs(1)).is_err());
    assert!(FixedWindow::new(1, Duration::ZERO).is_err());
    assert!(SlidingLog::new(0, Duration::from_secs(1)).is_err());
    assert!(SlidingWindowCounter::new(1, Duration::MAX).is_err());
    let err = FixedWindow::new(0, Duration::from_secs(1)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid limit: a limit of zero admits nothing"
    );
}

/// Steps: (nanoseconds since the previous request, cost).
fn steps() -> impl Strategy<Value = Vec<(u64, u64)>> {
    proptest::collection::vec((0u64..40, 1u64..5), 1..120)
}

/// Checks a rejection's retry time by brute force: the same cost is
/// admitted at `now + retry` and not one nanosecond earlier.
fn check_retry<P: Policy>(p: &P, s: &P::State, now: u64, cost: u64, retry: u64)
where
    P::State: Clone,
{
    if retry == u64::MAX {
        return;
    }
    assert!(retry > 0);
    let mut later = s.clone();
    assert!(
        p.check(&mut later, now + retry, cost).is_admitted(),
        "not admitted at retry"
    );
    let mut earlier = s.clone();
    assert!(
        !p.check(&mut earlier, now + retry - 1, cost).is_admitted(),
        "admitted before retry"
    );
}

proptest! {
    #[test]
    fn fixed_window_matches_a_list_of_admissions(limit in 1u64..8, w in 1u64..30, steps in steps()) {
        let p = FixedWindow::new(limit, Duration::from_nanos(w)).unwrap();
        let mut s = p.new_state(0);
        let mut admitted: Vec<(u64, u64)> = Vec::new();
        let mut now = 0;
        for (dt, cost) in steps {
            now += dt;
            let used: u64 = admitted.iter().filter(|(t, _)| t / w == now / w).map(|(_, c)| c).sum();
            let ok = used + cost <= limit;
            let before = s;
            let v = p.check(&mut s, now, cost);
            prop_assert_eq!(v.is_admitted(), ok);
            if ok {
                admitted.push((now, cost));
                prop_assert_eq!(v, Verdict::Admit { remaining: limit - used - cost });
            } else if let Verdict::Reject { retry_after_ns } = v {
                check_retry(&p, &before, now, cost, retry_after_ns);
            }
        }
    }

    #[test]
    fn sliding_log_matches_an_unbounded_log(
        limit in 1u64..8, w in 1u64..60, log_rejected: bool, steps in steps(),
    ) {
        let p = SlidingLog::new(limit, Duration::from_nanos(w)).unwrap().log_rejected(log_rejected);
        let mut s = p.new_state(0);
        let mut log: Vec<u64> = Vec::new();
        let mut now = 0;
        for (dt, cost) in steps {
            now += dt;
            let live = log.iter().filter(|&&e| now - e < w).count() as u64;
            let ok = live + cost <= limit;
            let before = s.clone();
            let v = p.check(&mut s, now, cost);
            prop_assert_eq!(v.is_admitted(), ok, "live {} cost {}", live, cost);
            if ok || (log_rejected && cost <= limit) {
                log.extend(std::iter::repeat_n(now, cost as usize));
            }
            if ok {
                prop_assert_eq!(v, Verdict::Admit { remaining: limit - live - cost });
            } else if let Verdict::Reject { retry_after_ns } = v {
                // The retry is checked on the log as the rejection left it.
                let after = s.clone();
                if retry_after_ns != u64::MAX {
                    let mut later = after.clone();
                    prop_assert!(p.check(&mut later, now + retry_after_ns, cost).is_admitted());
                    let mut earlier = after;
                    prop_assert!(!p.check(&mut earlier, now + retry_after_ns - 1, cost).is_admitted());
                }
                let _ = before;
            }
        }
    }

    #[test]
    fn sliding_counter_matches_the_formula_on_a_list(limit in 1u64..10, w in 1u64..30, steps in steps()) {
        let p = SlidingWindowCounter::new(limit, Duration::from_nanos(w)).unwrap();
        let mut s = p.new_state(0);
        let mut admitted: Vec<(u64, u64)> = Vec::new();
        let mut now = 0;
        for (dt, cost) in steps {
            now += dt;
            let k = now / w;
            let in_window = |idx: u64| -> u64 {
                admitted.iter().filter(|(t, _)| t / w == idx).map(|(_, c)| c).sum()
            };
            let cur = in_window(k);
            let prev = if k == 0 { 0 } else { in_window(k - 1) };
            let r = now - k * w;
            // The survey's formula with the overlap as an exact fraction.
            let estimate = cur + prev * (w - r) / w;
            let ok = estimate + cost <= limit;
            let before = s;
            let v = p.check(&mut s, now, cost);
            prop_assert_eq!(v.is_admitted(), ok);
            if ok {
                admitted.push((now, cost));
                prop_assert_eq!(v, Verdict::Admit { remaining: limit - estimate - cost });
            } else if let Verdict::Reject { retry_after_ns } = v {
                check_retry(&p, &before, now, cost, retry_after_ns);
            }
        }
    }
}
