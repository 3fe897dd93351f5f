//! `QuotaClient`: "may I take N tokens, and how long must I wait?" from a
//! quota service (`tollgate quota`, or square's quotaservice).

use std::sync::Arc;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use tollgate_quota::{AdmitSource, Denied, Granted, NaiveClient, NaiveOptions};

use crate::errors::{check_address, positive_seconds, seconds, value_error, whole, QuotaDenied};
use crate::limiter::spec_from;
use crate::repr::Repr;
use crate::runtime::{coroutine, into_asyncio, runtime, wait_on, Born};

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
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Repr::new(py, "Granted")
            .field("source", &self.source)?
            .field("wait", self.wait)?
            .done()
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
/// `fallback_rate` is required: it is what the client admits on its own
/// while the service cannot answer, and no default suits every bucket (a
/// guess above the bucket's rate lets an outage overload what the bucket
/// protects; one below it refuses callers the service would admit). A
/// tiny rate such as "0.001" all but fails closed.
///
/// `allow(n)` takes the tokens and returns the wait to honour before using
/// them; `admit(n)` also waits it. A refusal raises QuotaDenied.
///
/// A client belongs to the process that made it: in a forked child every
/// call raises RuntimeError; make a new client there.
#[pyclass(frozen, name = "QuotaClient", module = "tollgate")]
pub(crate) struct PyQuotaClient {
    inner: Arc<NaiveClient>,
    server: String,
    namespace: String,
    bucket: String,
    fallback_rate: String,
    deadline: f64,
    born: Born,
}

impl PyQuotaClient {
    /// The client, unless this is a forked child of its process.
    fn inner(&self) -> PyResult<&Arc<NaiveClient>> {
        self.born.check()?;
        Ok(&self.inner)
    }
}

#[pymethods]
impl PyQuotaClient {
    #[new]
    #[pyo3(signature = (server, namespace, bucket, *, fallback_rate, deadline = 0.02))]
    fn new(
        server: String,
        namespace: String,
        bucket: String,
        fallback_rate: &Bound<'_, PyAny>,
        deadline: f64,
    ) -> PyResult<PyQuotaClient> {
        check_address(&server)?;
        if namespace.is_empty() {
            return Err(PyValueError::new_err("namespace must not be empty"));
        }
        if bucket.is_empty() {
            return Err(PyValueError::new_err("bucket must not be empty"));
        }
        let rate = spec_from(fallback_rate)?;
        let options = NaiveOptions::new(rate).deadline(positive_seconds("deadline", deadline)?);
        let inner = {
            let _runtime = runtime().enter();
            NaiveClient::new(&server, &namespace, &bucket, options).map_err(|e| value_error(&e))?
        };
        Ok(PyQuotaClient {
            inner: Arc::new(inner),
            server,
            namespace,
            bucket,
            fallback_rate: rate.to_string(),
            deadline,
            born: Born::here("QuotaClient"),
        })
    }

    /// Takes `tokens` and returns a Granted with the seconds to wait
    /// before using them; does not wait them. Raises QuotaDenied.
    #[pyo3(signature = (tokens = None))]
    fn allow(&self, py: Python<'_>, tokens: Option<&Bound<'_, PyAny>>) -> PyResult<PyGranted> {
        let tokens = whole("tokens", tokens, 1, 0)?;
        let inner = self.inner()?;
        let got = wait_on(py, inner.allow(tokens))?;
        answer(py, got)
    }

    /// As `allow`, then waits the wait (the GIL released; Ctrl-C raises
    /// KeyboardInterrupt). Raises QuotaDenied.
    #[pyo3(signature = (tokens = None))]
    fn admit(&self, py: Python<'_>, tokens: Option<&Bound<'_, PyAny>>) -> PyResult<PyGranted> {
        let g = self.allow(py, tokens)?;
        if g.wait > 0.0 {
            let wait = seconds("wait", g.wait)?;
            wait_on(py, async move { tokio::time::sleep(wait).await })?;
        }
        Ok(g)
    }

    /// `allow` for asyncio: a coroutine, started when first awaited (or
    /// run as a task). A bad `tokens` raises at the call.
    #[pyo3(signature = (tokens = None))]
    fn allow_async<'py>(
        slf: &Bound<'py, Self>,
        tokens: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let tokens = whole("tokens", tokens, 1, 0)?;
        slf.get().inner()?;
        coroutine(slf.py(), "allow", (slf, tokens))
    }

    /// What `allow_async`'s coroutine awaits.
    fn _allow_start<'py>(&self, py: Python<'py>, tokens: u64) -> PyResult<Bound<'py, PyAny>> {
        let inner = Arc::clone(self.inner()?);
        into_asyncio(py, async move { inner.allow(tokens).await }, |py, got| {
            Ok(Py::new(py, answer(py, got)?)?.into_any())
        })
    }

    /// `admit` for asyncio: a coroutine that returns once the wait has
    /// passed.
    #[pyo3(signature = (tokens = None))]
    fn admit_async<'py>(
        slf: &Bound<'py, Self>,
        tokens: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let tokens = whole("tokens", tokens, 1, 0)?;
        slf.get().inner()?;
        coroutine(slf.py(), "admit", (slf, tokens))
    }

    /// What `admit_async`'s coroutine awaits.
    fn _admit_start<'py>(&self, py: Python<'py>, tokens: u64) -> PyResult<Bound<'py, PyAny>> {
        let inner = Arc::clone(self.inner()?);
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

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Repr::new(py, "QuotaClient")
            .arg(&self.server)?
            .arg(&self.namespace)?
            .arg(&self.bucket)?
            .field("fallback_rate", &self.fallback_rate)?
            .field("deadline", self.deadline)?
            .done()
    }
}
