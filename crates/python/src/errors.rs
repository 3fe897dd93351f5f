//! The Python exceptions, and the one place Rust errors become them.
//!
//! Argument errors (a bad spec, a bad address, negative wants) are
//! `ValueError`; a wait that ran out is `TimeoutError`; what the servers
//! and buckets answer is a [`TollgateError`] subclass. Each message is the
//! Rust error with its causes (`tollgate_service::ErrorChain`).

use std::time::Duration;

use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;
use tollgate_service::ErrorChain;

pyo3::create_exception!(
    tollgate,
    TollgateError,
    PyException,
    "The base of the errors tollgate raises about servers and buckets."
);
pyo3::create_exception!(
    tollgate,
    LeaseError,
    TollgateError,
    "A lease server could not be reached, or a client or resource is closed."
);
pyo3::create_exception!(
    tollgate,
    QuotaDenied,
    TollgateError,
    "The quota service (or the local fallback) refused the tokens; `status` \
     is the service's status name, or None for a local refusal."
);
pyo3::create_exception!(
    tollgate,
    BucketRefused,
    TollgateError,
    "A TokenBucket refused a reservation; nothing was taken. `refusal` is \
     'max_wait', 'max_debt' or 'too_large'; `wait` and `limit` are seconds."
);

/// An error and each of its sources, joined by `": "`.
pub(crate) fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    ErrorChain(e).to_string()
}

/// `ValueError` with the error's chain.
pub(crate) fn value_error(e: &(dyn std::error::Error + 'static)) -> PyErr {
    PyValueError::new_err(chain(e))
}

/// Seconds from Python as a `Duration`: finite and `>= 0`.
pub(crate) fn seconds(what: &str, secs: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(secs).map_err(|_| {
        PyValueError::new_err(format!(
            "{what} must be a finite number of seconds >= 0, not {secs}"
        ))
    })
}
