//! Why no answer comes: the error of the client's last refresh round, for
//! callers that wait on a lease and want to say why it does not arrive
//! (the Python bindings' `Resource.wait`, `last_error`).
//!
//! The task records each round's outcome ([`Shared::note_refresh`]): a
//! failure replaces the error (and notifies, even when it repeats), a
//! success clears it.

use std::time::Duration;

use tokio::sync::watch;

use super::{Client, SessionError, Shared};

/// The channel a client's last refresh error is published on.
pub(crate) fn channel() -> watch::Sender<Option<SessionError>> {
    watch::channel(None).0
}

impl Shared {
    /// Records the outcome of a refresh round.
    pub(crate) fn note_refresh(&self, outcome: Result<&Duration, &SessionError>) {
        match outcome {
            Ok(_) => {
                self.refresh_error.send_if_modified(|e| e.take().is_some());
            }
            Err(e) => {
                self.refresh_error.send_replace(Some(e.clone()));
            }
        }
    }
}

impl Client {
    /// The error of this client's last refresh round (the bulk
    /// GetCapacity for all its resources), or `None` when that round
    /// succeeded or none has ended yet.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate_doorman::{Client, ResourceOptions};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // Nothing listens on port 1 here: the first round fails.
    /// let client = Client::builder().server("127.0.0.1:1").build()?;
    /// let _r = client.resource("r", ResourceOptions::new(1.0))?;
    /// let mut errors = client.refresh_errors();
    /// let e = errors.wait_for(Option::is_some).await?.clone().unwrap();
    /// assert_eq!(e.address(), Some("127.0.0.1:1"));
    /// assert!(client.last_refresh_error().is_some());
    /// # Ok(())
    /// # }
    /// ```
    pub fn last_refresh_error(&self) -> Option<SessionError> {
        self.inner.shared.refresh_error.borrow().clone()
    }

    /// A receiver of [`last_refresh_error`](Client::last_refresh_error),
    /// notified after every failed round and when a round succeeds again.
    pub fn refresh_errors(&self) -> watch::Receiver<Option<SessionError>> {
        self.inner.shared.refresh_error.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use tonic::{Code, Status};

    use crate::pb;
    use crate::transport::{Call, Transport};
    use crate::{CapacitySource, Client, ResourceOptions};

    /// Answers GetCapacity with `failures` errors of `code`, then grants.
    #[derive(Debug)]
    struct FailsThenGrants {
        code: Code,
        failures: usize,
        calls: AtomicUsize,
    }

    impl Transport for FailsThenGrants {
        fn discovery(&self, _: &str) -> Call<pb::DiscoveryResponse> {
            Box::pin(async {
                Ok(pb::DiscoveryResponse {
                    mastership: pb::Mastership::default(),
                    is_master: true,
                })
            })
        }

        fn get_capacity(
            &self,
            _: &str,
            request: pb::GetCapacityRequest,
        ) -> Call<pb::GetCapacityResponse> {
            if self.calls.fetch_add(1, Ordering::Relaxed) < self.failures {
                let status = Status::new(self.code, "unknown service");
                return Box::pin(async move { Err(status) });
            }
            let response = request
                .resource
                .iter()
                .map(|r| pb::ResourceResponse {
                    resource_id: r.resource_id.clone(),
                    gets: pb::Lease {
                        expiry_time: i64::MAX,
                        refresh_interval: 3_600,
                        capacity: r.wants,
                    },
                    safe_capacity: None,
                })
                .collect();
            Box::pin(async move {
                Ok(pb::GetCapacityResponse {
                    response,
                    mastership: None,
                })
            })
        }

        fn get_server_capacity(
            &self,
            _: &str,
            _: pb::GetServerCapacityRequest,
        ) -> Call<pb::GetServerCapacityResponse> {
            Box::pin(std::future::pending())
        }

        fn release_capacity(
            &self,
            _: &str,
            _: pb::ReleaseCapacityRequest,
        ) -> Call<pb::ReleaseCapacityResponse> {
            Box::pin(async { Ok(pb::ReleaseCapacityResponse::default()) })
        }

        fn forget(&self, _: &str) {}
    }

    /// A guard against hanging; never part of what is asserted.
    const HANG: Duration = Duration::from_secs(3_600);

    #[tokio::test(start_paused = true)]
    async fn a_failed_round_is_kept_until_a_round_succeeds() {
        let transport = Arc::new(FailsThenGrants {
            code: Code::Unimplemented,
            failures: 2,
            calls: AtomicUsize::new(0),
        });
        let client = Client::builder()
            .server("a:1")
            .transport(transport.clone())
            .seed(1)
            .build()
            .unwrap();
        assert_eq!(client.last_refresh_error(), None, "no round yet");
        let mut errors = client.refresh_errors();
        let resource = client.resource("r", ResourceOptions::new(5.0)).unwrap();

        let first = tokio::time::timeout(HANG, errors.wait_for(Option::is_some))
            .await
            .unwrap()
            .unwrap()
            .clone()
            .unwrap();
        let crate::SessionError::Rpc { address, status } = &first else {
            panic!("not an RPC error: {first:?}");
        };
        assert_eq!(
            (address.as_str(), status.code()),
            ("a:1", Code::Unimplemented)
        );
        assert_eq!(client.last_refresh_error(), Some(first.clone()));

        // The second failure notifies again, though it is the same error.
        errors.borrow_and_update();
        tokio::time::timeout(HANG, errors.changed())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(transport.calls.load(Ordering::Relaxed), 2);
        assert_eq!(*errors.borrow_and_update(), Some(first));

        // The third round is granted: the error is cleared.
        tokio::time::timeout(HANG, errors.wait_for(Option::is_none))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(client.last_refresh_error(), None);
        assert_eq!(resource.current().source, CapacitySource::Lease);
        assert_eq!(resource.capacity(), 5.0);
    }
}
