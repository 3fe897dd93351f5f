//! Cost prediction: the expected cost of a request from the measured cost
//! of recent requests of the same class.
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
