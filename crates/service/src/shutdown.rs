//! Shutdown on a signal, one way for every server: SIGTERM is treated
//! exactly as SIGINT (Ctrl-C). The first of either starts a graceful
//! shutdown (stop accepting, drain); a second one of either exits the
//! process at once with status 1, cutting the drain short.
//!
//! # Examples
//!
//! ```no_run
//! use tollgate_service::ShutdownSignals;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> std::io::Result<()> {
//! // First thing, so that neither signal kills the process with its
//! // default action once the server runs.
//! let signals = ShutdownSignals::install()?;
//! // ... start serving, with this as the shutdown future:
//! let shutdown = async move {
//!     let which = signals.recv().await;
//!     assert!(which == "SIGTERM" || which == "SIGINT");
//! };
//! # shutdown.await;
//! # Ok(())
//! # }
//! ```

use std::io;

#[cfg(unix)]
use tokio::signal::unix::{signal, Signal, SignalKind};
use tracing::{info, warn};

/// The handlers for SIGTERM and SIGINT, installed together.
#[derive(Debug)]
pub struct ShutdownSignals {
    #[cfg(unix)]
    term: Signal,
    #[cfg(unix)]
    int: Signal,
}

impl ShutdownSignals {
    /// Installs the handlers for SIGTERM and SIGINT (off Unix, Ctrl-C
    /// alone). Call it before anything else, so that no signal can kill the
    /// process with its default action once it serves.
    ///
    /// # Errors
    ///
    /// The operating system refused a handler.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn install() -> io::Result<ShutdownSignals> {
        Ok(ShutdownSignals {
            #[cfg(unix)]
            term: signal(SignalKind::terminate())?,
            #[cfg(unix)]
            int: signal(SignalKind::interrupt())?,
        })
    }

    /// Completes at the first SIGTERM or SIGINT, which it logs ("shutting
    /// down") and names. From then on a second one of either exits the
    /// process at once with status 1.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe until a signal arrives: dropping the future before then
    /// drops the handlers, and the signals' default actions apply again.
    pub async fn recv(mut self) -> &'static str {
        let which = self.next().await;
        info!(signal = which, "shutting down");
        tokio::spawn(async move {
            self.next().await;
            warn!("second signal: exiting without draining");
            std::process::exit(1);
        });
        which
    }

    /// The next signal of the two.
    #[cfg(unix)]
    async fn next(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }

    /// The next Ctrl-C.
    #[cfg(not(unix))]
    async fn next(&mut self) -> &'static str {
        let _ = tokio::signal::ctrl_c().await;
        "SIGINT"
    }
}
