//! What a request costs: the [`CostModel`], and cost prediction, the
//! expected cost of a request from the measured cost of recent requests
//! of the same class.
//!
//! # Implementation notes
//!
//! Each class (a key the rules choose, e.g. method and path) keeps an
//! exponentially weighted moving average of measured costs with weight
//! 1/8 for the newest sample, in fixed point (the average times 256, so
//! small costs keep their fraction). The first sample of a class sets its
//! average. Prediction rounds the average up and is at least 1. Classes
//! are capped in number; once full, unseen classes are predicted at the
//! default and not tracked, so memory stays bounded.

use std::collections::HashMap;
use std::sync::Mutex;

use tollgate_service::LockUnpoisoned;

use super::rules::{Extract, RequestHead};

/// How much a request costs, in the units the rules' limits count.
#[derive(Debug, Clone)]
pub enum CostModel {
    /// Every request costs the same.
    Fixed(u64),
    /// The cost is a header's integer value (or `default`).
    Header {
        /// The header (or gRPC metadata) name.
        name: String,
        /// The cost when the header is absent or not an integer.
        default: u64,
    },
    /// Predicted from recent requests of the same class, measured when
    /// they finish ([`Permit::finish`](crate::Permit::finish)); the difference is charged after.
    Predicted {
        /// The class of a request (e.g. [`Extract::method_and_path`]).
        class: Extract,
        /// The cost of a class not seen yet.
        default: u64,
    },
}

impl CostModel {
    /// A request's cost and, when predicted, its class. A prediction is
    /// at most what every enforced rule and the queue can admit (`most`):
    /// a class whose measured costs grew beyond that is admitted at that
    /// cost and post-accounted the rest, rather than refused for ever.
    pub(crate) fn cost_of(
        &self,
        predictor: Option<&CostPredictor>,
        head: &RequestHead<'_>,
        most: impl Fn() -> u64,
    ) -> (u64, Option<String>) {
        match self {
            CostModel::Fixed(c) => (*c, None),
            CostModel::Header { name, default } => (
                head.headers
                    .get(name.as_str())
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(*default),
                None,
            ),
            CostModel::Predicted { class, default } => match class.key(head) {
                Some(c) => {
                    let predicted = predictor.map_or(*default, |p| p.predict(&c));
                    (predicted.min(most()), Some(c))
                }
                None => (*default, None),
            },
        }
    }
}

/// Fixed-point scale of the averages.
const SCALE: u64 = 256;

/// Predicts the cost of a request of some class.
#[derive(Debug)]
pub(crate) struct CostPredictor {
    classes: Mutex<HashMap<Box<str>, u64, foldhash::fast::RandomState>>,
    default: u64,
    max_classes: usize,
}

impl CostPredictor {
    pub(crate) fn new(default: u64, max_classes: usize) -> CostPredictor {
        CostPredictor {
            classes: Mutex::new(HashMap::default()),
            default: default.max(1),
            max_classes,
        }
    }

    /// The predicted cost of a request of `class`.
    pub(crate) fn predict(&self, class: &str) -> u64 {
        let classes = self.classes.lock_unpoisoned();
        match classes.get(class) {
            Some(avg) => avg.div_ceil(SCALE).max(1),
            None => self.default,
        }
    }

    /// Records the measured cost of a finished request of `class`.
    pub(crate) fn record(&self, class: &str, cost: u64) {
        let sample = cost.saturating_mul(SCALE);
        let mut classes = self.classes.lock_unpoisoned();
        if let Some(avg) = classes.get_mut(class) {
            // avg += (sample - avg) / 8, in signed arithmetic.
            let a = *avg as i128;
            *avg = (a + (sample as i128 - a) / 8) as u64;
        } else if classes.len() < self.max_classes {
            classes.insert(class.into(), sample);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn predictions_follow_recent_costs() {
        let p = CostPredictor::new(5, 2);
        assert_eq!(p.predict("GET /a"), 5);
        p.record("GET /a", 100);
        assert_eq!(p.predict("GET /a"), 100);
        // 100 + (20 - 100) / 8 = 90.
        p.record("GET /a", 20);
        assert_eq!(p.predict("GET /a"), 90);
        p.record("GET /b", 1);
        // Full: a third class is not tracked.
        p.record("GET /c", 50);
        assert_eq!(p.predict("GET /c"), 5);
    }
}
