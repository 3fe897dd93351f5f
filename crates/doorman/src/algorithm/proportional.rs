//! `PROPORTIONAL_SHARE`: every subclient is entitled to an equal share; when
//! the resource is oversubscribed, what under-askers leave is spread over the
//! over-askers in proportion to how much more than their share they want.
//!
//! # Implementation notes
//!
//! Protocol §3, with `count` and every sum including the requester with its
//! new wants and subclients:
//!
//! ```text
//! eq = capacity / count                  (share per subclient)
//! eqC = eq * subclients                  (the requester's share)
//! if sum_wants <= capacity or wants <= eqC:  grant = wants
//! else:
//!   extra_capacity = sum over under-askers (wants_i/sub_i <= eq) of eq*sub_i - wants_i
//!   extra_need     = sum over over-askers of wants_i - eq*sub_i
//!   grant = eqC + (wants - eqC) * extra_capacity / extra_need
//! ```
//!
//! capped by `available`. The Go code loops over every client for the two
//! sums. Here the store's ordered index gives the under-askers' total wants
//! `W` and subclients `S` in `O(log n)` ([`ResourceView::demand_up_to`]), so
//! `extra_capacity = eq*S - W`; and since the sum over *all* clients of
//! `eq*sub_i - wants_i` is `capacity - sum_wants`,
//! `extra_need = extra_capacity + (sum_wants - capacity)`, which is positive
//! on this path: no division by zero, and the ratio is at most 1, so the
//! grant lies between `eqC` and `wants` (the ratio is clamped to `[0, 1]`
//! against rounding).
//!
//! Go tests `sum_wants <= capacity` on the stored wants, before recording the
//! request's new ones; with consistent sums the early exit is exactly the case
//! where the formula would give at least `wants`, so this is the same
//! algorithm without the stale read.

use super::{available, non_negative, Algorithm, Request, ResourceView};

/// Equal shares per subclient, topped up in proportion to need.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ProportionalShare;

impl Algorithm for ProportionalShare {
    fn grant(&self, res: &dyn ResourceView, capacity: f64, req: &Request<'_>) -> f64 {
        let sum_wants = res.sum_wants();
        let eq = capacity / res.count() as f64;
        let eq_c = eq * req.subclients as f64;
        let gets = if sum_wants <= capacity || req.wants <= eq_c {
            req.wants
        } else {
            let (under_wants, under_subclients) = res.demand_up_to(eq);
            let extra_capacity = (eq * under_subclients as f64 - under_wants).max(0.0);
            let extra_need = extra_capacity + (sum_wants - capacity);
            let top_up = (extra_capacity / extra_need).clamp(0.0, 1.0);
            eq_c + (req.wants - eq_c) * top_up
        };
        non_negative(gets.min(available(res, capacity, req.client)))
    }
}
