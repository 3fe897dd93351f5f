//! The one tokio runtime the bindings share, and the two ways Python waits
//! on it: a blocking wait that releases the GIL and notices Ctrl-C, and an
//! asyncio future completed by the runtime.
//!
//! # Implementation notes
//!
//! The runtime has one worker thread, started on first use; the lease
//! clients' background tasks and every pending `*_async` call run on it.
//! A pending async call is one task there, parked on its Rust future (the
//! limiter's queue node, a watch channel, an RPC): no thread per waiter.
//! When it completes, the worker takes the GIL once and hands the result to
//! the event loop with `call_soon_threadsafe`; the loop sets it on the
//! asyncio future unless that was cancelled meanwhile. Cancelling the
//! asyncio future aborts the task, dropping the Rust future, which every
//! future awaited here allows (the limiter's and the lease client's are
//! cancel-safe).
//!
//! A blocking wait polls its future on the calling thread with the GIL
//! released, in slices of [`CHECK_EVERY`]; between slices it takes the GIL
//! and runs `PyErr_CheckSignals`, so Ctrl-C raises `KeyboardInterrupt`
//! within a slice, and the dropped future gives back what it held.
//!
//! A process that forks after using the runtime must not use it in the
//! child (its worker thread does not survive the fork).

use std::cell::Cell;
use std::future::Future;
use std::sync::OnceLock;
use std::time::Duration;

use pyo3::exceptions::PyStopIteration;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::BoundObject;
use tokio::runtime::Runtime;

/// How often a blocked call looks for Ctrl-C.
pub(crate) const CHECK_EVERY: Duration = Duration::from_millis(50);

/// The shared runtime.
pub(crate) fn runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("tollgate-runtime")
            .enable_all()
            .build()
            .expect("tollgate: cannot start the runtime thread")
    })
}

/// Runs `fut` to completion on the calling thread, the GIL released,
/// checking for signals every [`CHECK_EVERY`].
///
/// # Errors
///
/// What a signal handler raised (`KeyboardInterrupt` for Ctrl-C); the
/// future is dropped.
pub(crate) fn wait_on<F>(py: Python<'_>, fut: F) -> PyResult<F::Output>
where
    F: Future + Send,
    F::Output: Send,
{
    let mut fut = std::pin::pin!(fut);
    loop {
        let step = py.detach(|| {
            runtime().block_on(async { tokio::time::timeout(CHECK_EVERY, fut.as_mut()).await })
        });
        match step {
            Ok(out) => return Ok(out),
            Err(_slice_over) => py.check_signals()?,
        }
    }
}

thread_local! {
    /// Whether this is Python's main thread, the one signal handlers run
    /// in: 0 not known yet, 1 yes, 2 no.
    static MAIN: Cell<u8> = const { Cell::new(0) };
}

/// Whether the calling thread is Python's main thread (asked once per
/// thread). Only there can a blocked call see Ctrl-C.
pub(crate) fn is_main_thread(py: Python<'_>) -> PyResult<bool> {
    match MAIN.with(Cell::get) {
        1 => Ok(true),
        2 => Ok(false),
        _ => {
            let threading = py.import("threading")?;
            let main = threading.call_method0("main_thread")?.getattr("ident")?;
            let me = threading.call_method0("get_ident")?;
            let yes = main.eq(me)?;
            MAIN.with(|m| m.set(if yes { 1 } else { 2 }));
            Ok(yes)
        }
    }
}

/// Sets a result or an exception on an asyncio future, unless it is done
/// (cancelled): what the event loop runs for a completed task.
#[pyfunction]
fn complete(fut: &Bound<'_, PyAny>, ok: bool, value: &Bound<'_, PyAny>) -> PyResult<()> {
    if fut.call_method0("done")?.is_truthy()? {
        return Ok(());
    }
    if ok {
        fut.call_method1("set_result", (value,))?;
    } else {
        fut.call_method1("set_exception", (value,))?;
    }
    Ok(())
}

/// Aborts a task when its asyncio future is done (a no-op when the task
/// completed it).
#[pyclass(frozen)]
struct AbortOnDone(tokio::task::AbortHandle);

#[pymethods]
impl AbortOnDone {
    fn __call__(&self, _fut: &Bound<'_, PyAny>) {
        self.0.abort();
    }
}

/// An asyncio future, bound to the running event loop, that `fut` completes
/// on the runtime; `convert` turns its output into the result (or the
/// exception) with the GIL held.
///
/// # Errors
///
/// `RuntimeError` when no event loop is running in this thread.
pub(crate) fn into_asyncio<'py, F, C>(
    py: Python<'py>,
    fut: F,
    convert: C,
) -> PyResult<Bound<'py, PyAny>>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
    C: FnOnce(Python<'_>, F::Output) -> PyResult<Py<PyAny>> + Send + 'static,
{
    static COMPLETE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let complete = COMPLETE
        .get_or_try_init(py, || {
            PyResult::Ok(wrap_pyfunction!(complete, py)?.into_any().unbind())
        })?
        .clone_ref(py);
    let event_loop = py.import("asyncio")?.call_method0("get_running_loop")?;
    let py_fut = event_loop.call_method0("create_future")?;
    let task = {
        let event_loop = event_loop.clone().unbind();
        let target = py_fut.clone().unbind();
        async move {
            let out = fut.await;
            Python::attach(|py| {
                let (ok, value) = match convert(py, out) {
                    Ok(value) => (true, value),
                    Err(e) => (false, e.into_value(py).into_any()),
                };
                // A closed loop has nobody left to tell.
                let _ = event_loop.call_method1(
                    py,
                    "call_soon_threadsafe",
                    (complete, target, ok, value),
                );
            });
        }
    };
    let handle = runtime().spawn(task);
    py_fut.call_method1("add_done_callback", (AbortOnDone(handle.abort_handle()),))?;
    Ok(py_fut)
}

/// An awaitable that is already done: what an async call that needs no
/// wait returns, without a trip through the event loop.
#[pyclass(frozen, module = "tollgate")]
pub(crate) struct Ready(Py<PyAny>);

impl Ready {
    /// An awaitable resolving to `value` at once.
    pub(crate) fn new<'py>(py: Python<'py>, value: impl IntoPyObject<'py>) -> PyResult<Ready> {
        let value = value.into_pyobject(py).map_err(Into::into)?;
        Ok(Ready(value.into_any().unbind()))
    }
}

#[pymethods]
impl Ready {
    fn __await__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<()> {
        Err(PyStopIteration::new_err((self.0.clone_ref(py),)))
    }
}
