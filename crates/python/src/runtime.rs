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
//! When it completes, the worker puts the result in its event loop's
//! inbox ([`Inbox`]) without taking the GIL, and wakes the loop through a
//! socket the loop watches when the inbox was empty; the loop sets each
//! result on its asyncio future unless that was cancelled meanwhile. (A
//! loop that takes no attributes gets each result through
//! `call_soon_threadsafe` instead.) Cancelling the
//! asyncio future aborts the task, dropping the Rust future, which every
//! future awaited here allows (the limiter's and the lease client's are
//! cancel-safe).
//!
//! A blocking wait polls its future on the calling thread with the GIL
//! released, in slices of [`CHECK_EVERY`]; between slices it takes the GIL
//! and runs `PyErr_CheckSignals`, so Ctrl-C raises `KeyboardInterrupt`
//! within a slice, and the dropped future gives back what it held.
//!
//! A fork keeps only the thread that called it: the runtime's worker
//! does not survive into the child, and whatever was spawned on it (a
//! lease client's task, a channel's connection) stops there. So the
//! runtime is per process ([`runtime`] builds a new one in a forked child,
//! leaving the parent's copy unused), and every object whose work runs on
//! the runtime records the process it was made in ([`Born`]) and refuses,
//! at once, to be used in another one.
//!
//! The `*_async` methods return real coroutines ([`coroutine`]): an
//! `async def` (compiled once) that calls the object's private start
//! method when it first runs, and awaits what that returns, so
//! `asyncio.create_task` and `ensure_future` take them, and a coroutine
//! that is never awaited takes nothing.

use std::cell::Cell;
use std::future::Future;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use tokio::runtime::Runtime;

/// How often a blocked call looks for Ctrl-C.
pub(crate) const CHECK_EVERY: Duration = Duration::from_millis(50);

/// One process's runtime.
struct ProcessRuntime {
    pid: u32,
    runtime: Runtime,
}

/// The runtime of the process that made it last: null until first use.
/// Each one is leaked, never freed: a forked child's copy of the parent's
/// runtime has no worker to shut down, and objects made before the fork
/// may still point into it.
static CURRENT: AtomicPtr<ProcessRuntime> = AtomicPtr::new(std::ptr::null_mut());

/// The shared runtime of this process: made on first use, and made anew
/// in a forked child (see the module notes).
pub(crate) fn runtime() -> &'static Runtime {
    let pid = std::process::id();
    // Acquire: pairs with the AcqRel exchange below, so the runtime behind
    // the pointer is seen whole.
    let mut seen = CURRENT.load(Ordering::Acquire);
    loop {
        // SAFETY: a non-null pointer in CURRENT comes from `Box::leak`
        // below and is never freed, and the object behind it is never
        // mutated; Acquire made its writes visible.
        if let Some(current) = unsafe { seen.as_ref() } {
            if current.pid == pid {
                return &current.runtime;
            }
        }
        let fresh: &'static mut ProcessRuntime = Box::leak(Box::new(ProcessRuntime {
            pid,
            runtime: tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("tollgate-runtime")
                .enable_all()
                .build()
                .expect("tollgate: cannot start the runtime thread"),
        }));
        let fresh: *mut ProcessRuntime = fresh;
        // AcqRel: publishes the new runtime (pairs with the Acquire loads)
        // and, on failure, reads the one another thread published.
        match CURRENT.compare_exchange(seen, fresh, Ordering::AcqRel, Ordering::Acquire) {
            // SAFETY: `fresh` was leaked above and is never freed.
            Ok(_) => return unsafe { &(*fresh).runtime },
            // Another thread made one first: use it (ours stays idle).
            Err(other) => seen = other,
        }
    }
}

/// The process an object was made in. Objects whose work runs on the
/// runtime (lease clients and their resources, quota clients) check it
/// on every use: in a forked child their tasks are gone, and a wait on
/// them would never end.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Born {
    pid: u32,
    /// The class of the object.
    what: &'static str,
    /// The class to make anew in a child (the client it belongs to).
    maker: &'static str,
}

impl Born {
    /// A `what` (a class name) made now, in this process.
    pub(crate) fn here(what: &'static str) -> Born {
        Born {
            pid: std::process::id(),
            what,
            maker: what,
        }
    }

    /// A `what` made by the object born here (a client's resource).
    pub(crate) fn with(self, what: &'static str) -> Born {
        Born { what, ..self }
    }

    /// `RuntimeError` when used in another process than its own.
    pub(crate) fn check(self) -> PyResult<()> {
        let now = std::process::id();
        if now == self.pid {
            return Ok(());
        }
        Err(PyRuntimeError::new_err(format!(
            "this {} was created in process {} and this is a forked child of it ({now}): \
             its background work did not survive the fork; create a new {} in the child, \
             after the fork",
            self.what, self.pid, self.maker
        )))
    }
}

/// The coroutines the `*_async` methods return: each calls the object's
/// private start method when it first runs, on the event loop's thread,
/// and awaits what that returns unless it is the result already (an op
/// taken at once: a float).
const COROUTINES: &std::ffi::CStr = c"
async def acquire(limiter, n):
    late = limiter._acquire_start(n)
    return late if late.__class__ is float else await late

async def acquire_leased(limiter):
    late = limiter._acquire_start()
    return late if late.__class__ is float else await late

async def allow(client, tokens):
    return await client._allow_start(tokens)

async def admit(client, tokens):
    return await client._admit_start(tokens)
";

/// A coroutine (`types.CoroutineType`) of the `async def` named `name` in
/// [`COROUTINES`], called with `args`. Nothing happens until it first
/// runs: a coroutine never awaited takes nothing.
pub(crate) fn coroutine<'py>(
    py: Python<'py>,
    name: &str,
    args: impl pyo3::call::PyCallArgs<'py>,
) -> PyResult<Bound<'py, PyAny>> {
    static MODULE: PyOnceLock<Py<pyo3::types::PyModule>> = PyOnceLock::new();
    let module = MODULE.get_or_try_init(py, || {
        let module = pyo3::types::PyModule::from_code(
            py,
            COROUTINES,
            c"tollgate/_coroutines.py",
            c"tollgate._coroutines",
        )?;
        PyResult::Ok(module.unbind())
    })?;
    module.bind(py).getattr(name)?.call1(args)
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
/// (cancelled).
fn settle(fut: &Bound<'_, PyAny>, value: PyResult<Py<PyAny>>) -> PyResult<()> {
    if fut.call_method0("done")?.is_truthy()? {
        return Ok(());
    }
    match value {
        Ok(value) => fut.call_method1("set_result", (value,))?,
        Err(e) => fut.call_method1("set_exception", (e.into_value(fut.py()),))?,
    };
    Ok(())
}

/// A completed task's result, to be set on its asyncio future by the
/// event loop's thread.
type Done = Box<dyn FnOnce(Python<'_>) -> PyResult<()> + Send>;

/// One event loop's inbox of completed tasks.
///
/// The runtime's worker pushes a [`Done`] and, when the inbox was empty,
/// writes a byte to a socket the loop watches (`loop.add_reader`); the
/// loop's reader drains the socket, then the inbox, and settles every
/// future. The worker never takes the GIL, and a burst of completions
/// costs the loop one wake-up. A byte written while the reader runs
/// (between its read and its swap) only causes one empty drain later.
struct Inbox {
    done: Mutex<Vec<Done>>,
    wake: UnixStream,
    woken: UnixStream,
}

impl Inbox {
    fn push(&self, done: Done) {
        let first = {
            let mut inbox = self.done.lock().unwrap_or_else(|p| p.into_inner());
            inbox.push(done);
            inbox.len() == 1
        };
        if first {
            // A full socket already holds a wake-up: WouldBlock is fine.
            let _ = (&self.wake).write(&[1]);
        }
    }
}

/// The Python face of an [`Inbox`]: kept on its event loop as an attribute
/// and called by the loop when the socket is readable.
#[pyclass(frozen, module = "tollgate")]
struct LoopInbox(Arc<Inbox>);

#[pymethods]
impl LoopInbox {
    fn __call__(&self, py: Python<'_>) -> PyResult<()> {
        let mut buf = [0u8; 64];
        while matches!((&self.0.woken).read(&mut buf), Ok(n) if n > 0) {}
        let done = std::mem::take(&mut *self.0.done.lock().unwrap_or_else(|p| p.into_inner()));
        for d in done {
            // One failure must not strand the others' futures.
            if let Err(e) = d(py) {
                e.write_unraisable(py, None);
            }
        }
        Ok(())
    }
}

/// The attribute an event loop keeps its inbox under.
const INBOX_ATTR: &str = "_tollgate_inbox";

/// The inbox of `event_loop`, made on first use; `None` for a loop that
/// takes no attributes (then each completion goes through
/// `call_soon_threadsafe`).
fn inbox(event_loop: &Bound<'_, PyAny>) -> PyResult<Option<Arc<Inbox>>> {
    if let Ok(existing) = event_loop.getattr(INBOX_ATTR) {
        if let Ok(inbox) = existing.cast::<LoopInbox>() {
            return Ok(Some(Arc::clone(&inbox.get().0)));
        }
    }
    let (wake, woken) = UnixStream::pair()?;
    wake.set_nonblocking(true)?;
    woken.set_nonblocking(true)?;
    let fd = woken.as_raw_fd();
    let inbox = Arc::new(Inbox {
        done: Mutex::new(Vec::new()),
        wake,
        woken,
    });
    let face = Bound::new(event_loop.py(), LoopInbox(Arc::clone(&inbox)))?;
    if event_loop.setattr(INBOX_ATTR, &face).is_err() {
        return Ok(None);
    }
    event_loop.call_method1("add_reader", (fd, face))?;
    Ok(Some(inbox))
}

/// Sets a result or an exception on an asyncio future unless it is done:
/// what `call_soon_threadsafe` runs for a loop without an inbox.
#[pyfunction]
fn complete(fut: &Bound<'_, PyAny>, ok: bool, value: Py<PyAny>) -> PyResult<()> {
    let value = if ok {
        Ok(value)
    } else {
        Err(PyErr::from_value(value.into_bound(fut.py())))
    };
    settle(fut, value)
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

/// How a result reaches its event loop.
enum Route {
    /// The loop's inbox.
    Inbox(Arc<Inbox>),
    /// `loop.call_soon_threadsafe`, for a loop that takes no attributes.
    Threadsafe(Py<PyAny>),
}

/// An asyncio future on the running event loop, to be completed from the
/// runtime.
pub(crate) struct Completion {
    target: Py<PyAny>,
    route: Route,
}

impl Completion {
    /// A new asyncio future on the running loop, and its completion.
    ///
    /// # Errors
    ///
    /// `RuntimeError` when no event loop is running in this thread.
    pub(crate) fn new(py: Python<'_>) -> PyResult<(Completion, Bound<'_, PyAny>)> {
        let event_loop = py.import("asyncio")?.call_method0("get_running_loop")?;
        let py_fut = event_loop.call_method0("create_future")?;
        let route = match inbox(&event_loop)? {
            Some(inbox) => Route::Inbox(inbox),
            None => Route::Threadsafe(event_loop.unbind()),
        };
        let completion = Completion {
            target: py_fut.clone().unbind(),
            route,
        };
        Ok((completion, py_fut))
    }

    /// Sets `convert(out)` on the future, from any thread, unless the
    /// future is done (cancelled) by then.
    pub(crate) fn complete<T, C>(self, out: T, convert: C)
    where
        T: Send + 'static,
        C: FnOnce(Python<'_>, T) -> PyResult<Py<PyAny>> + Send + 'static,
    {
        let target = self.target;
        match self.route {
            Route::Inbox(inbox) => inbox.push(Box::new(move |py| {
                let value = convert(py, out);
                settle(target.bind(py), value)
            })),
            Route::Threadsafe(event_loop) => Python::attach(|py| {
                static COMPLETE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
                let Ok(complete) = COMPLETE.get_or_try_init(py, || {
                    PyResult::Ok(wrap_pyfunction!(complete, py)?.into_any().unbind())
                }) else {
                    return;
                };
                let (ok, value) = match convert(py, out) {
                    Ok(value) => (true, value),
                    Err(e) => (false, e.into_value(py).into_any()),
                };
                // A closed loop has nobody left to tell.
                let _ = event_loop.call_method1(
                    py,
                    "call_soon_threadsafe",
                    (complete.clone_ref(py), target, ok, value),
                );
            }),
        }
    }
}

/// An asyncio future, bound to the running event loop, that `fut` completes
/// on the runtime; `convert` turns its output into the result (or the
/// exception) on the loop's thread. Cancelling the asyncio future drops
/// `fut`.
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
    let (completion, py_fut) = Completion::new(py)?;
    let handle = runtime().spawn(async move {
        let out = fut.await;
        completion.complete(out, convert);
    });
    py_fut.call_method1("add_done_callback", (AbortOnDone(handle.abort_handle()),))?;
    Ok(py_fut)
}
