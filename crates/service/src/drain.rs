//! Graceful shutdown of a server that runs its own HTTP/2 connections (the
//! lean gRPC server): stop accepting, ask every connection to
//! finish its calls and close, wait for them for at most the drain
//! deadline, then close those still open. A tonic server drains through
//! tonic instead ([`ServerLimits::serve`]), and both end with the same
//! kill switch and the same log line.
//!
//! # Implementation notes
//!
//! Each accepted connection holds one of the [`Permits`] until it closes,
//! so "every permit is back" is "every connection has closed". Connections
//! watch [`Drain::stopping`] to start their own graceful close (HTTP/2
//! GOAWAY); their guards watch the [`KillSwitch`], thrown when the
//! deadline passes or the `Drain` is dropped.

use std::time::Duration;

use tokio::sync::watch;

use super::conn::{deadline_passed, KillSwitch, Permits};
use super::limits::ServerLimits;

/// What a server needs to close its connections gracefully.
#[derive(Debug)]
pub(crate) struct Drain {
    permits: Permits,
    stop: watch::Sender<bool>,
    kill: KillSwitch,
    timeout: Duration,
}

impl Drain {
    /// For connections under `limits`: its cap and its drain deadline.
    pub(crate) fn new(limits: &ServerLimits) -> Drain {
        Drain {
            permits: Permits::new(limits.max_connections),
            stop: watch::channel(false).0,
            kill: KillSwitch::new(),
            timeout: limits.drain_timeout,
        }
    }

    /// Counts the connections refused over the cap in `refused`.
    pub(crate) fn counting(mut self, refused: &crate::conn::RefusedConnections) -> Drain {
        self.permits = self.permits.counting(refused);
        self
    }

    /// The connections' permits, for the accept loop.
    pub(crate) fn permits(&self) -> &Permits {
        &self.permits
    }

    /// Turns true when connections are to finish their calls and close.
    pub(crate) fn stopping(&self) -> watch::Receiver<bool> {
        self.stop.subscribe()
    }

    /// Turns true when connections are to close at once, for
    /// [`Guarded`](super::conn::Guarded).
    pub(crate) fn killed(&self) -> watch::Receiver<bool> {
        self.kill.subscribe()
    }

    /// Asks every connection to finish its calls and close, and closes
    /// those still open after the drain deadline. Returns once every
    /// connection has closed or been told to.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the connections have been asked to close either way,
    /// and dropping the `Drain` closes them at once.
    pub(crate) async fn run(&self) {
        self.stop.send_replace(true);
        if tokio::time::timeout(self.timeout, self.permits.all_returned())
            .await
            .is_err()
        {
            deadline_passed(self.timeout);
            self.kill.kill();
        }
    }
}
