//! [`Status`]: the outcome of an Allow, which the service decides, the
//! metrics count and the clients read. Its own file so that those modules
//! each import it without importing one another.

/// The outcome of an Allow request, as in the reference's `AllowResponse`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    /// Tokens granted; wait `wait` before using them.
    Ok,
    /// The tokens could not be granted within the max wait (or max debt).
    RejectedTimeout,
    /// No bucket serves the namespace and name.
    RejectedNoBucket,
    /// The namespace's dynamic-bucket cap is reached.
    RejectedTooManyBuckets,
    /// More tokens than the bucket's `max_tokens_per_request`.
    RejectedTooManyTokensRequested,
    /// An empty or over-long name, or negative tokens.
    RejectedInvalidRequest,
    /// The server failed.
    RejectedServerError,
}

impl Status {
    /// The status's name on the wire, as in the reference's enum.
    pub fn name(self) -> &'static str {
        match self {
            Status::Ok => "OK",
            Status::RejectedTimeout => "REJECTED_TIMEOUT",
            Status::RejectedNoBucket => "REJECTED_NO_BUCKET",
            Status::RejectedTooManyBuckets => "REJECTED_TOO_MANY_BUCKETS",
            Status::RejectedTooManyTokensRequested => "REJECTED_TOO_MANY_TOKENS_REQUESTED",
            Status::RejectedInvalidRequest => "REJECTED_INVALID_REQUEST",
            Status::RejectedServerError => "REJECTED_SERVER_ERROR",
        }
    }
}
