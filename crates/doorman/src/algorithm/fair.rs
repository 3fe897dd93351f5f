//! `FAIR_SHARE`: the exact weighted max-min fair ("water filling") share.
//!
//! # Implementation notes
//!
//! If every client's wants fit in the capacity, everyone gets what it wants.
//! Otherwise there is one *water level* `L` per subclient such that
//! `sum_i min(wants_i, L * sub_i) = capacity`: clients that want less than
//! their level get their wants, the others get `L` per subclient. That is the
//! unique max-min fair allocation weighted by subclients, the limit of the
//! "equal share, then divide what under-askers leave, repeatedly" rounds of
//! protocol §3. Go runs only two such rounds, which is exact when all clients
//! have the same subclient count; there the two agree.
//!
//! The store finds `L` in `O(log n)` from its index of clients ordered by
//! wants per subclient ([`ResourceView::water_level`]). The grant is then capped
//! by `available`, so a client may get less than its fair share until the
//! others refresh and shrink.

use super::{available, non_negative, Algorithm, Request, ResourceView};

/// Weighted max-min fair shares.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct FairShare;

impl Algorithm for FairShare {
    fn grant(&self, res: &dyn ResourceView, capacity: f64, req: &Request<'_>) -> f64 {
        let level = res.water_level(capacity);
        let fair = req.wants.min(level * req.subclients as f64);
        non_negative(fair.min(available(res, capacity, req.client)))
    }
}

#[cfg(test)]
mod tests {
    use crate::algorithm::tests::{assert_grants, run_vector};
    use crate::algorithm::Kind;

    fn fair(capacity: f64, clients: &[(f64, u64)]) -> Vec<f64> {
        run_vector(Kind::FairShare, capacity, clients, true)
    }

    // The acceptance vectors of protocol §3, all preloaded.

    #[test]
    fn vector_1000_60_10() {
        let grants = fair(120.0, &[(1000.0, 1), (60.0, 1), (10.0, 1)]);
        assert_grants(&grants, &[55.0, 55.0, 10.0], 1e-9);
    }

    #[test]
    fn vector_1000_50_10() {
        let grants = fair(120.0, &[(1000.0, 1), (50.0, 1), (10.0, 1)]);
        assert_grants(&grants, &[60.0, 50.0, 10.0], 1e-9);
    }

    #[test]
    fn vector_weighted_6_4_2() {
        let grants = fair(120.0, &[(1000.0, 6), (500.0, 4), (200.0, 2)]);
        assert_grants(&grants, &[60.0, 40.0, 20.0], 1e-9);
    }

    #[test]
    fn vector_weighted_10_10_30() {
        let grants = fair(1000.0, &[(2000.0, 10), (500.0, 10), (700.0, 30)]);
        assert_grants(&grants, &[200.0, 200.0, 600.0], 1e-9);
    }

    #[test]
    fn everyone_gets_their_wants_when_they_fit() {
        assert_grants(
            &fair(120.0, &[(50.0, 1), (60.0, 3), (10.0, 1)]),
            &[50.0, 60.0, 10.0],
            0.0,
        );
    }

    /// Redistribution that takes three rounds: the equal share 25 saturates
    /// the first client, the new share 33.3 the second, the new share 35 the
    /// third, and the last gets what is left.
    #[test]
    fn exact_after_many_rounds() {
        let grants = fair(100.0, &[(0.0, 1), (30.0, 1), (34.0, 1), (100.0, 1)]);
        assert_grants(&grants, &[0.0, 30.0, 34.0, 36.0], 1e-9);
    }

    /// Weighted: the level is per subclient. Out of 20, "a" (1 subclient)
    /// wants 1 and is saturated; "b" (1) and "c" (2) share 19 at 19/3 per
    /// subclient, below b's 6.5.
    #[test]
    fn weighted_by_subclients() {
        let grants = fair(20.0, &[(1.0, 1), (6.5, 1), (100.0, 2)]);
        assert_grants(&grants, &[1.0, 19.0 / 3.0, 38.0 / 3.0], 1e-9);
    }
}
