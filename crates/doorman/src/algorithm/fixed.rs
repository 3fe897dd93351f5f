//! `STATIC`: every client gets what it wants up to the capacity, which is a
//! per-client cap here, not a total.

use super::{non_negative, Algorithm, Request, ResourceView};

/// Grants `min(capacity, wants)`, ignoring every other client.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Static;

impl Algorithm for Static {
    fn grant(&self, _res: &dyn ResourceView, capacity: f64, req: &Request<'_>) -> f64 {
        non_negative(req.wants.min(capacity))
    }
}
