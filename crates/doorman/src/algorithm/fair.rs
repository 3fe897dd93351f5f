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
//! `docs/design/doorman-protocol.md` §3. Go runs only two such rounds, which
//! is exact when all clients have the same subclient count; there the two
//! agree.
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
