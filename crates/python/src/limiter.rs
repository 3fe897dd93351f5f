//! `RateLimiter`, its `Stats`, and `TokenBucket`.

use std::sync::Arc;
use std::time::Duration;

use pyo3::exceptions::{PyTimeoutError, PyValueError};
use pyo3::prelude::*;
use tollgate::{BucketSettings, RateLimiter, RateSpec, Refusal, TokenBucket};

use crate::errors::{chain, positive_seconds, seconds, whole, BucketRefused};
use crate::repr::Repr;
use crate::runtime::{coroutine, is_main_thread, CHECK_EVERY};
use crate::waiters::AsyncWaiters;

/// A spec from Python: a spec string (`"10K,1.1"`, `"0.5"`,
/// `"1M;1.5;restart"`) or a number of ops per second.
pub(crate) fn spec_from(value: &Bound<'_, PyAny>) -> PyResult<RateSpec> {
    if let Ok(text) = value.extract::<String>() {
        return text.parse::<RateSpec>().map_err(|e| {
            PyValueError::new_err(format!("invalid rate spec {text:?}: {}", chain(&e)))
        });
    }
    if let Ok(rate) = value.extract::<f64>() {
        return RateSpec::new(rate)
            .map_err(|e| PyValueError::new_err(format!("invalid rate {rate}: {}", chain(&e))));
    }
    Err(PyValueError::new_err(format!(
        "a rate spec is a string such as \"10K,1.1\" or a number of ops per second, not {}",
        value.repr()?
    )))
}

/// A weight the limiter accepts (default 1), or `ValueError`.
fn weight(n: Option<&Bound<'_, PyAny>>) -> PyResult<u64> {
    let n = whole("n", n, 1, 0)?;
    if n > RateLimiter::MAX_WEIGHT {
        return Err(PyValueError::new_err(format!(
            "weight {n} exceeds the largest, {}",
            RateLimiter::MAX_WEIGHT
        )));
    }
    Ok(n)
}

/// Waits for `n` ops with the GIL released; in Python's main thread, in
/// slices that look for Ctrl-C. Returns the lateness.
pub(crate) fn acquire_blocking(py: Python<'_>, limiter: &RateLimiter, n: u64) -> PyResult<f64> {
    if !is_main_thread(py)? {
        // Signals reach only the main thread: nothing to look for here.
        return Ok(py.detach(|| limiter.acquire_n(n)).as_secs_f64());
    }
    let mut raised = None;
    let got = py.detach(|| {
        limiter.acquire_n_interruptible(n, CHECK_EVERY, || {
            Python::attach(|py| match py.check_signals() {
                Ok(()) => false,
                Err(e) => {
                    raised = Some(e);
                    true
                }
            })
        })
    });
    match (raised, got) {
        // A grant that raced the signal is spent: the handler's error wins.
        (Some(e), _) => Err(e),
        (None, Ok(late)) => Ok(late.as_secs_f64()),
        (None, Err(e)) => Err(PyValueError::new_err(e.to_string())),
    }
}

/// The longest default fill interval: the switch interval CPython starts
/// with.
const MAX_DEFAULT_FILL: Duration = Duration::from_millis(5);

/// The fill interval when none is given: CPython's switch interval
/// (`sys.getswitchinterval()`, 5 ms unless changed), at most 5 ms. A
/// thread that waits for the GIL waits up to that long for a thread
/// running Python to let go of it, so finer fills do not start ops more
/// evenly; they only wake the waiting threads more often, and each wake
/// costs a GIL hand-off.
fn default_fill_interval(py: Python<'_>) -> PyResult<Duration> {
    let switch: f64 = py
        .import("sys")?
        .getattr("getswitchinterval")?
        .call0()?
        .extract()?;
    Ok(Duration::try_from_secs_f64(switch)
        .unwrap_or(MAX_DEFAULT_FILL)
        .min(MAX_DEFAULT_FILL))
}

/// A rate limiter that holds an op rate exactly and reports how late each
/// op starts versus its schedule.
///
/// `RateLimiter("10K,1.1")`: 10,000 ops/s, catching up at up to 1.1x the
/// rate after falling behind. The spec is `<rate>[,<burst_ratio>][,<verb>]`
/// as `tollgate pace` reads it, or a number of ops/s. Share one limiter
/// between threads and tasks; every method is thread-safe.
///
/// `max_backlog` (seconds) caps how late ops may fall behind (time beyond
/// it is dropped); `fill_interval` (seconds) is how often time is added
/// while callers wait: a longer one wakes waiting threads less often, each
/// for more ops, so it costs less CPU per op, while ops start in larger
/// bursts. It defaults to CPython's switch interval
/// (`sys.getswitchinterval()`, 0.005 unless changed; at most 0.005), the
/// granularity at which threads take turns with the GIL anyway; 0.0005 is
/// the Rust limiter's default.
#[pyclass(frozen, name = "RateLimiter", module = "tollgate")]
pub(crate) struct PyRateLimiter {
    inner: Arc<RateLimiter>,
    waiters: Arc<AsyncWaiters>,
    fill_interval: Duration,
}

#[pymethods]
impl PyRateLimiter {
    #[new]
    #[pyo3(signature = (spec, *, max_backlog = None, fill_interval = None))]
    fn new(
        spec: &Bound<'_, PyAny>,
        max_backlog: Option<f64>,
        fill_interval: Option<f64>,
    ) -> PyResult<PyRateLimiter> {
        let fill_interval = match fill_interval {
            Some(interval) => positive_seconds("fill_interval", interval)?,
            None => default_fill_interval(spec.py())?,
        };
        let mut builder = RateLimiter::builder(spec_from(spec)?).fill_interval(fill_interval);
        if let Some(cap) = max_backlog {
            builder = builder.max_backlog(seconds("max_backlog", cap)?);
        }
        let inner = builder
            .try_build()
            .map_err(|e| pyo3::exceptions::PyOSError::new_err(e.to_string()))?;
        Ok(PyRateLimiter {
            inner: Arc::new(inner),
            waiters: Arc::default(),
            fill_interval,
        })
    }

    /// Blocks until `n` ops may start, the GIL released; returns how late
    /// they start versus their schedule, in seconds. Ctrl-C raises
    /// KeyboardInterrupt (in the main thread) and takes nothing.
    #[pyo3(signature = (n = None))]
    fn acquire(&self, py: Python<'_>, n: Option<&Bound<'_, PyAny>>) -> PyResult<f64> {
        let n = weight(n)?;
        if self.inner.try_acquire_n(n) {
            return Ok(self.inner.lateness().as_secs_f64());
        }
        acquire_blocking(py, &self.inner, n)
    }

    /// Takes `n` ops if they are there now; never waits.
    #[pyo3(signature = (n = None))]
    fn try_acquire(&self, n: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
        Ok(self.inner.try_acquire_n(weight(n)?))
    }

    /// Like `acquire`, waiting at most `timeout` seconds; raises
    /// TimeoutError (taking nothing) when the ops cannot start in time, at
    /// once when even the burst rate could not deliver them. Ctrl-C is
    /// noticed when it returns.
    #[pyo3(signature = (timeout, n = None))]
    fn acquire_timeout(
        &self,
        py: Python<'_>,
        timeout: f64,
        n: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<f64> {
        let n = weight(n)?;
        let max_wait = seconds("timeout", timeout)?;
        let limiter = &*self.inner;
        py.detach(|| limiter.acquire_timeout(n, max_wait))
            .map(|late| late.as_secs_f64())
            .map_err(|e| PyTimeoutError::new_err(e.to_string()))
    }

    /// A coroutine that waits for `n` ops without blocking the event loop
    /// and returns the lateness in seconds. It starts when first awaited
    /// (or run as a task); cancelling it takes nothing. A bad `n` raises
    /// at the call.
    #[pyo3(signature = (n = None))]
    fn acquire_async<'py>(
        slf: &Bound<'py, Self>,
        py: Python<'py>,
        n: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let n = weight(n)?;
        coroutine(py, "acquire", (slf, n))
    }

    /// What `acquire_async`'s coroutine runs first: the lateness when the
    /// ops are there, else an asyncio future of it.
    fn _acquire_start<'py>(&self, py: Python<'py>, n: u64) -> PyResult<Bound<'py, PyAny>> {
        if self.inner.try_acquire_n(n) {
            return Ok(self
                .inner
                .lateness()
                .as_secs_f64()
                .into_pyobject(py)?
                .into_any());
        }
        self.waiters.wait(py, &self.inner, n)
    }

    /// Applies a spec live: `configure` sets the rate and burst ratio,
    /// `start` (the default verb) also starts an idle limiter, `restart`
    /// clears the pools and the backlog.
    fn apply(&self, spec: &Bound<'_, PyAny>) -> PyResult<()> {
        self.inner.apply(spec_from(spec)?);
        Ok(())
    }

    /// The spec in force, as a spec string.
    #[getter]
    fn spec(&self) -> String {
        self.inner.spec().to_string()
    }

    /// The rate in force, ops per second.
    #[getter]
    fn rate(&self) -> f64 {
        self.inner.spec().ops_per_sec()
    }

    /// The burst ratio in force.
    #[getter]
    fn burst_ratio(&self) -> f64 {
        self.inner.spec().burst_ratio()
    }

    /// How often time is added while callers wait, in seconds.
    #[getter]
    fn fill_interval(&self) -> f64 {
        self.fill_interval.as_secs_f64()
    }

    /// The backlog now, in seconds: how late an op admitted now starts.
    #[getter]
    fn backlog(&self) -> f64 {
        self.inner.backlog().as_secs_f64()
    }

    /// The cap on the backlog in seconds, or None.
    #[getter]
    fn get_max_backlog(&self) -> Option<f64> {
        self.inner.max_backlog().map(|d| d.as_secs_f64())
    }

    #[setter]
    fn set_max_backlog(&self, cap: Option<f64>) -> PyResult<()> {
        let cap = cap.map(|c| seconds("max_backlog", c)).transpose()?;
        self.inner.set_max_backlog(cap);
        Ok(())
    }

    /// Ops admitted, the cumulative wait and the backlog.
    fn stats(&self) -> PyStats {
        PyStats::new(self.inner.stats())
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Repr::new(py, "RateLimiter")
            .arg(self.inner.spec().to_string())?
            .field("fill_interval", self.fill_interval.as_secs_f64())?
            .field(
                "max_backlog",
                self.inner.max_backlog().map(|d| d.as_secs_f64()),
            )?
            .done()
    }
}

/// A limiter's counters, taken at one moment.
#[pyclass(frozen, get_all, name = "Stats", module = "tollgate")]
pub(crate) struct PyStats {
    /// Ops admitted since the limiter was made (weighted).
    admitted: u64,
    /// Sum over admitted ops of how late each started, in seconds.
    total_wait: f64,
    /// The backlog at the last fill, in seconds.
    backlog: f64,
}

impl PyStats {
    pub(crate) fn new(s: tollgate::Stats) -> PyStats {
        PyStats {
            admitted: s.admitted,
            total_wait: s.total_wait.as_secs_f64(),
            backlog: s.backlog.as_secs_f64(),
        }
    }
}

#[pymethods]
impl PyStats {
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Repr::new(py, "Stats")
            .field("admitted", self.admitted)?
            .field("total_wait", self.total_wait)?
            .field("backlog", self.backlog)?
            .done()
    }
}

/// A token bucket that answers "may I, and how long must I wait?" without
/// blocking: `reserve(n)` takes `n` tokens and returns the seconds to wait
/// before using them, or raises BucketRefused and takes nothing.
///
/// `TokenBucket("100", size=200, max_debt=1.0, max_wait=0.5)`: refills at
/// 100 tokens/s up to 200; a reservation beyond what is on hand borrows
/// (later callers wait for the debt) up to `max_debt` seconds of debt, and
/// is refused when its own wait would exceed `max_wait`.
#[pyclass(frozen, name = "TokenBucket", module = "tollgate")]
pub(crate) struct PyTokenBucket {
    inner: TokenBucket,
}

#[pymethods]
impl PyTokenBucket {
    #[new]
    #[pyo3(signature = (rate, *, size = None, max_debt = 10.0, max_wait = 10.0))]
    fn new(
        rate: &Bound<'_, PyAny>,
        size: Option<&Bound<'_, PyAny>>,
        max_debt: f64,
        max_wait: f64,
    ) -> PyResult<PyTokenBucket> {
        let mut settings = BucketSettings::new(spec_from(rate)?)
            .max_debt(seconds("max_debt", max_debt)?)
            .max_wait(seconds("max_wait", max_wait)?);
        if size.is_some() {
            settings = settings.size(whole("size", size, 1, 1)?);
        }
        Ok(PyTokenBucket {
            inner: TokenBucket::new(settings),
        })
    }

    /// Takes `n` tokens; returns the seconds to wait before using them.
    /// `max_wait` (seconds) lowers the bucket's own for this call. Raises
    /// BucketRefused, taking nothing, when the wait or the debt would be
    /// too long.
    #[pyo3(signature = (n = None, max_wait = None))]
    fn reserve(
        &self,
        py: Python<'_>,
        n: Option<&Bound<'_, PyAny>>,
        max_wait: Option<f64>,
    ) -> PyResult<f64> {
        let n = whole("n", n, 1, 0)?;
        let got = match max_wait {
            Some(w) => self.inner.reserve_within(n, seconds("max_wait", w)?),
            None => self.inner.reserve(n),
        };
        match got {
            Ok(wait) => Ok(wait.as_secs_f64()),
            Err(e) => {
                let err = BucketRefused::new_err(e.to_string());
                let value = err.value(py);
                let refusal = match e.refusal() {
                    Refusal::MaxWait => "max_wait",
                    Refusal::MaxDebt => "max_debt",
                    Refusal::TooLarge => "too_large",
                };
                value.setattr("refusal", refusal)?;
                value.setattr("wait", e.wait().as_secs_f64())?;
                value.setattr("limit", e.limit().as_secs_f64())?;
                Err(err)
            }
        }
    }

    /// Tokens on hand now (negative: owed), in whole tokens.
    #[getter]
    fn available(&self) -> i64 {
        self.inner.available()
    }

    /// Seconds since the last reservation (or since the bucket was made).
    #[getter]
    fn idle(&self) -> f64 {
        self.inner.idle().as_secs_f64()
    }

    /// The refill rate, tokens per second.
    #[getter]
    fn rate(&self) -> f64 {
        self.inner.settings().rate().ops_per_sec()
    }

    /// The most tokens the bucket holds.
    #[getter]
    fn size(&self) -> u64 {
        self.inner.settings().size_ops()
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let s = self.inner.settings();
        Repr::new(py, "TokenBucket")
            .arg(s.rate().to_string())?
            .field("size", s.size_ops())?
            .field("max_debt", s.max_debt_duration().as_secs_f64())?
            .field("max_wait", s.max_wait_duration().as_secs_f64())?
            .done()
    }
}
