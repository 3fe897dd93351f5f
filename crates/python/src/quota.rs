//! `QuotaClient`: "may I take N tokens, and how long must I wait?" from a
//! quota service (`tollgate quota`, or square's quotaservice).

use std::sync::Arc;

use pyo3::prelude::*;
use tollgate_quota::{AdmitSource, Denied, Granted, NaiveClient, NaiveOptions};

use crate::errors::{seconds, value_error, QuotaDenied};
use crate::limiter::spec_from;
use crate::runtime::{into_asyncio, runtime, wait_on};

/// Tokens granted: use them once `wait` seconds have passed.
#[pyclass(frozen, get_all, name = "Granted", module = "tollgate")]
pub(crate) struct PyGranted {
    /// "service" (the quota service granted them) or "fallback" (the local
    /// fallback bucket did: the service was slow, down or without the
    /// bucket).
    source: String,
    /// Seconds to wait before using the tokens (already waited, for
    /// `admit`).
    wait: f64,
}

#[pymethods]
impl PyGranted {
    fn __repr__(&self) -> String {
        format!("Granted(source={:?}, wait={})", self.source, self.wait)
    }
}

fn granted(g: Granted) -> PyGranted {
    PyGranted {
        source: match g.source {
            AdmitSource::Service => "service",
            AdmitSource::Fallback => "fallback",
            AdmitSource::Local => "local",
        }
        .to_owned(),
        wait: g.wait.as_secs_f64(),
    }
}

fn denied(py: Python<'_>, d: &Denied) -> PyErr {
    let err = QuotaDenied::new_err(d.to_string());
    let status = d.status().map(|s| s.name());
    if let Err(e) = err.value(py).setattr("status", status) {
        return e;
    }
    err
}

fn answer(py: Python<'_>, got: Result<Granted, Denied>) -> PyResult<PyGranted> {
    got.map(granted).map_err(|d| denied(py, &d))
}

/// A client of one bucket of a quota service: each call asks the service
/// (Allow) under a deadline, and falls back to a local token bucket at
/// `fallback_rate` when the service is slow, down or has no such bucket.
///
/// `allow(n)` takes the tokens and returns the wait to honour before using
/// them; `admit(n)` also waits it. A refusal raises QuotaDenied.
#[pyclass(frozen, name = "QuotaClient", module = "tollgate")]
pub(crate) struct PyQuotaClient {
    inner: Arc<NaiveClient>,
    server: String,
    namespace: String,
    bucket: String,
}

#[pymethods]
impl PyQuotaClient {
    #[new]
    #[pyo3(signature = (server, namespace, bucket, *, fallback_rate = None, deadline = 0.02))]
    fn new(
        server: String,
        namespace: String,
        bucket: String,
        fallback_rate: Option<&Bound<'_, PyAny>>,
        deadline: f64,
    ) -> PyResult<PyQuotaClient> {
        let rate = match fallback_rate {
            Some(r) => spec_from(r)?,
            None => "100".parse().map_err(|e| value_error(&e))?,
        };
        let options = NaiveOptions::new(rate).deadline(seconds("deadline", deadline)?);
        let inner = {
            let _runtime = runtime().enter();
            NaiveClient::new(&server, &namespace, &bucket, options).map_err(|e| value_error(&e))?
        };
        Ok(PyQuotaClient {
            inner: Arc::new(inner),
            server,
            namespace,
            bucket,
        })
    }

    /// Takes `tokens` and returns a Granted with the seconds to wait
    /// before using them; does not wait them. Raises QuotaDenied.
    #[pyo3(signature = (tokens = 1))]
    fn allow(&self, py: Python<'_>, tokens: u64) -> PyResult<PyGranted> {
        let inner = &self.inner;
        let got = wait_on(py, inner.allow(tokens))?;
        answer(py, got)
    }

    /// As `allow`, then waits the wait (the GIL released; Ctrl-C raises
    /// KeyboardInterrupt). Raises QuotaDenied.
    #[pyo3(signature = (tokens = 1))]
    fn admit(&self, py: Python<'_>, tokens: u64) -> PyResult<PyGranted> {
        let g = self.allow(py, tokens)?;
        if g.wait > 0.0 {
            let wait = seconds("wait", g.wait)?;
            wait_on(py, async move { tokio::time::sleep(wait).await })?;
        }
        Ok(g)
    }

    /// `allow` for asyncio.
    #[pyo3(signature = (tokens = 1))]
    fn allow_async<'py>(&self, py: Python<'py>, tokens: u64) -> PyResult<Bound<'py, PyAny>> {
        let inner = Arc::clone(&self.inner);
        into_asyncio(py, async move { inner.allow(tokens).await }, |py, got| {
            Ok(Py::new(py, answer(py, got)?)?.into_any())
        })
    }

    /// `admit` for asyncio: resolves once the wait has passed.
    #[pyo3(signature = (tokens = 1))]
    fn admit_async<'py>(&self, py: Python<'py>, tokens: u64) -> PyResult<Bound<'py, PyAny>> {
        let inner = Arc::clone(&self.inner);
        into_asyncio(
            py,
            async move {
                let got = inner.allow(tokens).await;
                if let Ok(g) = &got {
                    tokio::time::sleep(g.wait).await;
                }
                got
            },
            |py, got| Ok(Py::new(py, answer(py, got)?)?.into_any()),
        )
    }

    /// Calls that could not reach the service within the deadline.
    #[getter]
    fn timeouts(&self) -> u64 {
        self.inner.timeouts()
    }

    /// Calls the local fallback bucket answered.
    #[getter]
    fn fallbacks(&self) -> u64 {
        self.inner.fallbacks()
    }

    fn __repr__(&self) -> String {
        format!(
            "QuotaClient({:?}, {:?}, {:?})",
            self.server, self.namespace, self.bucket
        )
    }
}
