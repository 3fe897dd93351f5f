//! The Python exceptions, and the one place Rust errors become them.
//!
//! Argument errors (a bad spec, a bad address, a negative or too large
//! number, negative wants) are `ValueError`, raised where the argument is
//! given; a file that cannot be read is the `OSError` subclass Python
//! raises for it (`FileNotFoundError`); a wait that ran out is
//! `TimeoutError`; what the servers and buckets answer is a
//! [`TollgateError`] subclass. Each message is the Rust error with its
//! causes (`tollgate_service::error_chain`).

use std::time::Duration;

use pyo3::exceptions::{
    PyException, PyFileNotFoundError, PyOSError, PyOverflowError, PyPermissionError, PyTypeError,
    PyValueError,
};
use pyo3::prelude::*;
use pyo3::types::PyInt;
use tollgate_service::{error_chain, TlsError};

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
    error_chain(e)
}

/// `ValueError` with the error's chain.
pub(crate) fn value_error(e: &(dyn std::error::Error + 'static)) -> PyErr {
    PyValueError::new_err(chain(e))
}

/// A whole number from Python, from `least` to `u64::MAX`, or the default
/// when not given. A negative or too large one is a `ValueError` that
/// names the argument (not the `OverflowError` a plain conversion gives);
/// anything but an int is a `TypeError`.
pub(crate) fn whole(
    what: &str,
    value: Option<&Bound<'_, PyAny>>,
    default: u64,
    least: u64,
) -> PyResult<u64> {
    let Some(value) = value else {
        return Ok(default);
    };
    if !value.is_instance_of::<PyInt>() {
        return Err(PyTypeError::new_err(format!(
            "{what} must be an int, not {}",
            value.get_type().name()?
        )));
    }
    match value.extract::<u64>() {
        Ok(n) if n >= least => Ok(n),
        Ok(_) => Err(PyValueError::new_err(format!(
            "{what} must be at least {least}, not {n}",
            n = value.repr()?
        ))),
        Err(e) if e.is_instance_of::<PyOverflowError>(value.py()) => {
            let why = if value.lt(0)? {
                format!("{what} must be at least {least}")
            } else {
                format!("{what} must be at most {}", u64::MAX)
            };
            Err(PyValueError::new_err(format!(
                "{why}, not {}",
                value.repr()?
            )))
        }
        Err(e) => Err(e),
    }
}

/// A signed 64-bit int from Python (a priority); out of range is a
/// `ValueError` that names the argument.
pub(crate) fn signed(what: &str, value: &Bound<'_, PyAny>) -> PyResult<i64> {
    if !value.is_instance_of::<PyInt>() {
        return Err(PyTypeError::new_err(format!(
            "{what} must be an int, not {}",
            value.get_type().name()?
        )));
    }
    value.extract::<i64>().map_err(|_| {
        let repr = value.repr().map(|r| r.to_string()).unwrap_or_default();
        PyValueError::new_err(format!(
            "{what} must be from {} to {}, not {repr}",
            i64::MIN,
            i64::MAX
        ))
    })
}

/// Seconds from Python as a `Duration`: finite and `> 0` (a deadline or
/// an interval, which 0 would make meaningless).
pub(crate) fn positive_seconds(what: &str, secs: f64) -> PyResult<Duration> {
    match Duration::try_from_secs_f64(secs) {
        Ok(d) if !d.is_zero() => Ok(d),
        _ => Err(PyValueError::new_err(format!(
            "{what} must be a finite number of seconds > 0, not {secs}"
        ))),
    }
}

/// A server address as `host:port` (or `http://host:port`,
/// `https://host:port`), checked before any connection: a port from 1 to
/// 65535, a host without spaces, an IPv6 host in brackets.
pub(crate) fn check_address(address: &str) -> PyResult<()> {
    let bad = |why: &str| {
        PyValueError::new_err(format!(
            "invalid server address {address:?}: {why} (expected host:port, such as \
             \"doorman:15000\" or \"127.0.0.1:15000\")"
        ))
    };
    let rest = match address.split_once("://") {
        Some(("http" | "https", rest)) => rest,
        Some((scheme, _)) => return Err(bad(&format!("unknown scheme {scheme:?}"))),
        None => address,
    };
    let authority = rest.strip_suffix('/').unwrap_or(rest);
    if authority.contains('/') {
        return Err(bad("a server address has no path"));
    }
    let Some((host, port)) = authority.rsplit_once(':') else {
        return Err(bad("no port"));
    };
    if host.is_empty() {
        return Err(bad("no host"));
    }
    if host.contains(':') && !(host.starts_with('[') && host.ends_with(']')) {
        return Err(bad("an IPv6 address goes in brackets, as [::1]:15000"));
    }
    if host
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || c == '@')
    {
        return Err(bad(
            "the host has a space or another character a host cannot hold",
        ));
    }
    match port.parse::<u16>() {
        Ok(p) if p > 0 => Ok(()),
        _ => Err(bad(&format!(
            "the port must be a number from 1 to 65535, not {port:?}"
        ))),
    }
}

/// A TLS file error as Python raises one: `FileNotFoundError` (or
/// `PermissionError`, `OSError`) with the path for a file that cannot be
/// read, `ValueError` for one that holds nothing usable.
pub(crate) fn tls_error(e: &TlsError) -> PyErr {
    match e {
        TlsError::Read { path, source } => {
            let args = (
                source.raw_os_error().unwrap_or(0),
                chain(e),
                path.display().to_string(),
            );
            match source.kind() {
                std::io::ErrorKind::NotFound => PyFileNotFoundError::new_err(args),
                std::io::ErrorKind::PermissionDenied => PyPermissionError::new_err(args),
                _ => PyOSError::new_err(args),
            }
        }
        other => value_error(other),
    }
}

/// Seconds from Python as a `Duration`: finite and `>= 0`.
pub(crate) fn seconds(what: &str, secs: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(secs).map_err(|_| {
        PyValueError::new_err(format!(
            "{what} must be a finite number of seconds >= 0, not {secs}"
        ))
    })
}
