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

#[cfg(test)]
mod tests {
    use crate::algorithm::tests::{assert_grants, run_vector};
    use crate::algorithm::Kind;

    #[test]
    fn vector() {
        let grants = run_vector(
            Kind::Static,
            100.0,
            &[(100.0, 1), (10.0, 1), (120.0, 1)],
            false,
        );
        assert_grants(&grants, &[100.0, 10.0, 100.0], 0.0);
    }
}
