//! tollgate for Python: the extension module `tollgate._tollgate`, which the
//! package `tollgate` (crates/python/python/tollgate) re-exports.
//!
//! Bindings only: every behaviour is the Rust crates' own. The limiter and
//! the token bucket come from `tollgate`, the lease client from
//! `tollgate-doorman`, the quota client from `tollgate-quota`; this crate
//! converts arguments, releases the GIL while anything waits, turns Rust
//! errors into Python exceptions and bridges futures to asyncio
//! (runtime.rs). The Python tests in `crates/python/tests` exercise it
//! against the real `tollgate serve` and `tollgate quota`.

mod errors;
mod lease;
mod limiter;
mod quota;
mod repr;
mod runtime;
mod waiters;

use pyo3::prelude::*;

/// The extension module.
#[pymodule]
fn _tollgate(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<limiter::PyRateLimiter>()?;
    m.add_class::<limiter::PyStats>()?;
    m.add_class::<limiter::PyTokenBucket>()?;
    m.add_class::<lease::PyLeaseClient>()?;
    m.add_class::<lease::PyTls>()?;
    m.add_class::<lease::PyResource>()?;
    m.add_class::<lease::PyLeasedRateLimiter>()?;
    m.add_class::<lease::PyCapacity>()?;
    m.add_class::<lease::PyCapacityUpdates>()?;
    m.add_class::<quota::PyQuotaClient>()?;
    m.add_class::<quota::PyGranted>()?;
    m.add("TollgateError", py.get_type::<errors::TollgateError>())?;
    m.add("LeaseError", py.get_type::<errors::LeaseError>())?;
    m.add("QuotaDenied", py.get_type::<errors::QuotaDenied>())?;
    m.add("BucketRefused", py.get_type::<errors::BucketRefused>())?;
    Ok(())
}
