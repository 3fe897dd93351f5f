//! Reaching the master of a Doorman server group, shared by the lease
//! client and an intermediate server's parent poller.
//!
//! # Implementation notes
//!
//! A [`MasterSession`] knows the configured addresses of one server group,
//! which of them to try next, and the master when it is known. Every call
//! carries a deadline. When the master is unknown, the session asks the
//! configured address in use: with Discovery if the session discovers (a
//! server that does not implement Discovery is taken as the master), or
//! straight away otherwise. A response naming another master redirects the
//! call there, up to a limit; a redirect with no master address (or an
//! empty one) means the server does not know the master and fails the
//! call. A failed call (an error status or the deadline) forgets the
//! master, drops the transport's connection to the address, and, if the
//! address was the configured one in use, moves on to the next configured
//! address, so an outage of one server costs one call.
//!
//! The state sits behind a lock held only between awaits, so a session can
//! be shared (`&self` everywhere); calls on one session are meant to be
//! made one at a time.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tracing::{debug, info};

use super::pb;
use super::transport::{Call, Transport};
use tollgate_service::LockUnpoisoned;

/// Why the master of a server group could not be reached.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum SessionError {
    /// The server at `address` answered with an error status (a transport
    /// failure such as a refused connection is `Unavailable`, its cause in
    /// the status's source).
    Rpc {
        /// The server called.
        address: String,
        /// Its answer.
        status: tonic::Status,
    },
    /// The server at `address` did not answer within `deadline`.
    Deadline {
        /// The server called.
        address: String,
        /// The per-call deadline.
        deadline: Duration,
    },
    /// The server at `address` is not the master and does not know who is.
    NoMaster {
        /// The server called.
        address: String,
    },
    /// The servers redirected the call more than `limit` times.
    Redirects {
        /// How many redirects one call follows.
        limit: u32,
    },
    /// No server address is configured.
    NoServers,
}

impl SessionError {
    /// The server whose failure this is, if one was called.
    pub fn address(&self) -> Option<&str> {
        match self {
            SessionError::Rpc { address, .. }
            | SessionError::Deadline { address, .. }
            | SessionError::NoMaster { address } => Some(address),
            SessionError::Redirects { .. } | SessionError::NoServers => None,
        }
    }
}

impl SessionError {
    /// Whether trying again cannot succeed: the server understood the
    /// call and refused it for what it is, or the connection's TLS was
    /// refused for a reason that stays. These are `Unimplemented` (not a
    /// Doorman server: a quota server, say), `InvalidArgument` (an empty
    /// or over-long id, too many resources), `OutOfRange` and
    /// `ResourceExhausted` (a request larger than the server accepts),
    /// `PermissionDenied` and `Unauthenticated`, and a certificate
    /// refused by either side, expired or untrusted
    /// ([`tls_failure_is_permanent`](tollgate_service::tls_failure_is_permanent)).
    /// Everything else (a refused connection, a deadline, a server that
    /// does not know the master, `Unavailable`, `NotFound` for a
    /// resource the server's configuration may yet name) may pass.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate_doorman::SessionError;
    ///
    /// let wrong_server = SessionError::Rpc {
    ///     address: "127.0.0.1:6000".into(),
    ///     status: tonic::Status::unimplemented("unknown method /doorman.Capacity/GetCapacity"),
    /// };
    /// assert!(wrong_server.is_permanent());
    /// assert!(wrong_server.to_string().ends_with("the server does not serve Doorman's Capacity API"));
    /// let down = SessionError::Rpc {
    ///     address: "127.0.0.1:6000".into(),
    ///     status: tonic::Status::unavailable("tcp connect error"),
    /// };
    /// assert!(!down.is_permanent());
    /// ```
    pub fn is_permanent(&self) -> bool {
        self.permanent().is_some()
    }

    /// What a permanent failure means, for its message; `None` for one
    /// that may pass.
    fn permanent(&self) -> Option<&'static str> {
        let SessionError::Rpc { status, .. } = self else {
            return None;
        };
        use tonic::Code;
        match status.code() {
            Code::Unimplemented => Some("the server does not serve Doorman's Capacity API"),
            Code::InvalidArgument => Some("the server refuses the request as it stands"),
            Code::OutOfRange | Code::ResourceExhausted => Some(
                "the server accepts no request this large (a lease client splits its \
                     requests at ClientBuilder::max_request_bytes, 64 KiB by default; the \
                     server's limit is its --max-message-bytes)",
            ),
            Code::PermissionDenied | Code::Unauthenticated => {
                Some("the server refuses this client")
            }
            // Described in words by `describe`.
            _ if tollgate_service::tls_failure_is_permanent(status) => Some(""),
            _ => None,
        }
    }
}

impl fmt::Display for SessionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SessionError::Rpc { address, status } => {
                write!(f, "{address}: {}", describe(status))?;
                match self.permanent() {
                    Some(meaning) if !meaning.is_empty() => write!(f, ": {meaning}"),
                    _ => Ok(()),
                }
            }
            SessionError::Deadline { address, .. } => write!(f, "{address}: deadline exceeded"),
            SessionError::NoMaster { address } => write!(f, "{address} does not know the master"),
            SessionError::Redirects { .. } => f.write_str("too many mastership redirects"),
            SessionError::NoServers => f.write_str("no server address configured"),
        }
    }
}

impl std::error::Error for SessionError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SessionError::Rpc { status, .. } => Some(status),
            _ => None,
        }
    }
}

/// Equal when the same kind of failure happened at the same address; two
/// statuses are equal when their codes and messages are.
impl PartialEq for SessionError {
    fn eq(&self, other: &SessionError) -> bool {
        use SessionError::*;
        match (self, other) {
            (
                Rpc { address, status },
                Rpc {
                    address: a,
                    status: s,
                },
            ) => address == a && status.code() == s.code() && status.message() == s.message(),
            (
                Deadline { address, deadline },
                Deadline {
                    address: a,
                    deadline: d,
                },
            ) => address == a && deadline == d,
            (NoMaster { address }, NoMaster { address: a }) => address == a,
            (Redirects { limit }, Redirects { limit: l }) => limit == l,
            (NoServers, NoServers) => true,
            _ => false,
        }
    }
}

impl Eq for SessionError {}

/// A failed RPC in one line: the code, the message and the innermost
/// cause (e.g. `Unavailable: tcp connect error: Connection refused (os
/// error 111)`), without tonic's Debug dump of metadata and sources; a
/// TLS failure in words, with its likely fix.
pub(crate) fn describe(status: &tonic::Status) -> String {
    tollgate_service::status_line(status)
}

/// A response that may redirect to the master.
pub(crate) trait Redirect {
    /// The mastership field: present when the server is not the master.
    fn mastership(&self) -> Option<&pb::Mastership>;
}

impl Redirect for pb::GetCapacityResponse {
    fn mastership(&self) -> Option<&pb::Mastership> {
        self.mastership.as_ref()
    }
}

impl Redirect for pb::GetServerCapacityResponse {
    fn mastership(&self) -> Option<&pb::Mastership> {
        self.mastership.as_ref()
    }
}

/// Where the session stands.
#[derive(Debug)]
struct State {
    /// The configured address to try next when the master is unknown.
    next: usize,
    master: Option<String>,
}

/// The way to the master of one server group: configured addresses, a
/// per-call deadline, redirects and failover.
#[derive(Debug)]
pub(crate) struct MasterSession {
    servers: Vec<String>,
    transport: Arc<dyn Transport>,
    deadline: Duration,
    max_redirects: u32,
    discover: bool,
    state: Mutex<State>,
}

impl MasterSession {
    /// A session over `servers` (tried in order), each call bounded by
    /// `deadline`; it discovers the master and follows one redirect per
    /// call until told otherwise.
    pub(crate) fn new(
        servers: Vec<String>,
        transport: Arc<dyn Transport>,
        deadline: Duration,
    ) -> MasterSession {
        MasterSession {
            servers,
            transport,
            deadline,
            max_redirects: 1,
            discover: true,
            state: Mutex::new(State {
                next: 0,
                master: None,
            }),
        }
    }

    /// Follows up to `n` mastership redirects in one call.
    pub(crate) fn max_redirects(mut self, n: u32) -> MasterSession {
        self.max_redirects = n;
        self
    }

    /// Whether an unknown master is found with Discovery (`true`) or by
    /// calling the configured address and following its redirect.
    // Only an intermediate server's parent poller turns Discovery off.
    #[cfg_attr(not(feature = "server"), allow(dead_code))]
    pub(crate) fn discover(mut self, discover: bool) -> MasterSession {
        self.discover = discover;
        self
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock_unpoisoned()
    }

    /// The master's address, if known.
    #[cfg(test)]
    fn known_master(&self) -> Option<String> {
        self.state().master.clone()
    }

    /// Forgets the master and the connection to `address` and, if
    /// `address` is the configured address in use, moves on to the next
    /// one. (A master learnt from a redirect is forgotten, and found again
    /// through the configured address.)
    pub(crate) fn fail(&self, address: &str) {
        self.transport.forget(address);
        let mut state = self.state();
        state.master = None;
        if self.servers.get(state.next).map(String::as_str) == Some(address) {
            state.next = (state.next + 1) % self.servers.len();
        }
    }

    /// Records `master` as the master.
    fn follow(&self, master: String) {
        self.state().master = Some(master);
    }

    /// The master's address, found (with Discovery when the session
    /// discovers) if it is not known.
    ///
    /// # Errors
    ///
    /// [`SessionError`] when the configured address in use failed or does
    /// not know the master; the next call tries the next address.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a cancelled discovery leaves the master unknown.
    pub(crate) async fn master(&self) -> Result<String, SessionError> {
        let address = {
            let state = self.state();
            if let Some(m) = &state.master {
                return Ok(m.clone());
            }
            match self.servers.get(state.next) {
                Some(a) => a.clone(),
                None => return Err(SessionError::NoServers),
            }
        };
        if !self.discover {
            return Ok(address);
        }
        let answer = self
            .deadlined(&address, self.transport.discovery(&address))
            .await;
        match answer {
            Ok(r) if r.is_master => {
                // The server we reached is the master; its advertised
                // address may not be reachable from here, so keep ours.
                self.follow(address.clone());
                Ok(address)
            }
            Ok(r) => match r.mastership.master_address.filter(|a| !a.is_empty()) {
                Some(m) => {
                    debug!(
                        via = address.as_str(),
                        master = m.as_str(),
                        "discovered master"
                    );
                    self.follow(m.clone());
                    Ok(m)
                }
                None => {
                    self.fail(&address);
                    Err(SessionError::NoMaster { address })
                }
            },
            // A server without Discovery answers capacity RPCs or redirects.
            Err(SessionError::Rpc { status, .. })
                if status.code() == tonic::Code::Unimplemented =>
            {
                self.follow(address.clone());
                Ok(address)
            }
            Err(e) => {
                self.fail(&address);
                Err(e)
            }
        }
    }

    /// `call` at `address` within the deadline.
    async fn deadlined<T>(&self, address: &str, call: Call<T>) -> Result<T, SessionError> {
        match tokio::time::timeout(self.deadline, call).await {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(status)) => Err(SessionError::Rpc {
                address: address.to_owned(),
                status,
            }),
            Err(_) => Err(SessionError::Deadline {
                address: address.to_owned(),
                deadline: self.deadline,
            }),
        }
    }

    /// Makes `rpc` at the master, following mastership redirects.
    ///
    /// # Errors
    ///
    /// [`SessionError`] when the call failed, a server did not know the
    /// master, or the redirects went past the limit.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a cancelled call changes nothing but, possibly, which
    /// master is known.
    pub(crate) async fn call<T, F>(&self, rpc: F) -> Result<T, SessionError>
    where
        T: Redirect,
        F: Fn(&dyn Transport, &str) -> Call<T>,
    {
        for _ in 0..=self.max_redirects {
            let address = self.master().await?;
            let response = self.once(&address, &rpc).await?;
            let Some(mastership) = response.mastership() else {
                // The server answered as the master (needed when the
                // session does not discover).
                self.follow(address);
                return Ok(response);
            };
            match mastership
                .master_address
                .as_deref()
                .filter(|a| !a.is_empty())
            {
                Some(master) => {
                    info!(from = address.as_str(), to = master, "mastership redirect");
                    self.follow(master.to_owned());
                }
                None => {
                    self.fail(&address);
                    return Err(SessionError::NoMaster { address });
                }
            }
        }
        self.state().master = None;
        Err(SessionError::Redirects {
            limit: self.max_redirects,
        })
    }

    /// Makes `rpc` at the master once, whatever the answer says about
    /// mastership.
    ///
    /// # Errors
    ///
    /// [`SessionError`] when the master could not be found or the call
    /// failed.
    ///
    /// # Cancel safety
    ///
    /// As [`MasterSession::call`].
    pub(crate) async fn send<T, F>(&self, rpc: F) -> Result<T, SessionError>
    where
        F: Fn(&dyn Transport, &str) -> Call<T>,
    {
        let address = self.master().await?;
        self.once(&address, &rpc).await
    }

    /// One call at `address`; a failure fails the address.
    async fn once<T, F>(&self, address: &str, rpc: &F) -> Result<T, SessionError>
    where
        F: Fn(&dyn Transport, &str) -> Call<T>,
    {
        let answer = self
            .deadlined(address, rpc(self.transport.as_ref(), address))
            .await;
        if answer.is_err() {
            self.fail(address);
        }
        answer
    }
}

#[cfg(test)]
mod tests;
