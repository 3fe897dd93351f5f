//! `NO_ALGORITHM`: every client gets exactly what it wants, capacity ignored.

use super::{non_negative, Algorithm, Request, ResourceView};

/// Grants `wants`, ignoring the capacity and every other client.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct NoAlgorithm;

impl Algorithm for NoAlgorithm {
    fn grant(&self, _res: &dyn ResourceView, _capacity: f64, req: &Request<'_>) -> f64 {
        non_negative(req.wants)
    }
}
