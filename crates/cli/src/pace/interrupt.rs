//! Ctrl-C during a run: the run ends early and is reported like any other.
//!
//! The handler only sets a flag (an atomic store is all a signal handler
//! may safely do here); the coordinator looks at it at least every
//! [`POLL`]. The handler is installed with `SA_RESETHAND`, so a second
//! Ctrl-C ends the process at once.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::Duration;

/// How often the coordinator looks for a Ctrl-C.
pub(super) const POLL: Duration = Duration::from_millis(100);

/// Set by the first SIGINT. Relaxed: a flag, read by one thread, carrying
/// no other data.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigint(_: libc::c_int) {
    INTERRUPTED.store(true, Relaxed);
}

/// Catches the next SIGINT (default handling after it).
pub(super) fn catch() {
    // SAFETY: a zeroed sigaction is a valid value to fill in: no handler,
    // an empty mask, no flags.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = on_sigint as extern "C" fn(libc::c_int) as libc::sighandler_t;
    action.sa_flags = libc::SA_RESETHAND | libc::SA_RESTART;
    // SAFETY: the handler only stores to an atomic (async-signal-safe), and
    // `action` is a valid sigaction; a failure leaves SIGINT's default.
    unsafe {
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGINT, &action, std::ptr::null_mut());
    }
}

/// Whether a SIGINT came since [`catch`].
pub(super) fn interrupted() -> bool {
    INTERRUPTED.load(Relaxed)
}
