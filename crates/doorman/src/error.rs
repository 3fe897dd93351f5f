//! Why the server refuses a request, and the one place those reasons become
//! gRPC statuses.

use std::fmt;

/// A request the server refuses as a whole; nothing in it was applied.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum RequestError {
    /// `client_id` (or `server_id`) is empty.
    EmptyClientId,
    /// A `resource_id` is empty.
    EmptyResourceId,
    /// An id is longer than the server accepts.
    IdTooLong {
        /// Which id: `client_id`, `resource_id`, ...
        field: &'static str,
        /// Its length in bytes.
        len: usize,
        /// The limit in bytes.
        max: usize,
    },
    /// More resources in one request than the server accepts.
    TooManyResources {
        /// How many the request names.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// The same resource appears twice in one request.
    DuplicateResource(String),
    /// A wants value that is negative, NaN or infinite.
    InvalidWants {
        /// The resource.
        resource: String,
        /// The value sent.
        wants: f64,
    },
    /// A `has` lease whose capacity is negative, NaN or infinite.
    InvalidHas {
        /// The resource.
        resource: String,
        /// The value sent.
        has: f64,
    },
    /// A priority band with `num_clients < 1`.
    InvalidNumClients {
        /// The resource.
        resource: String,
        /// The value sent.
        num_clients: i64,
    },
    /// No template matches the resource id.
    UnknownResource(String),
    /// A proto2 `required` field is missing from the request.
    MissingField {
        /// The resource it belongs to (empty when unnamed).
        resource: String,
        /// The field, e.g. `wants`.
        field: &'static str,
    },
}

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestError::EmptyClientId => f.write_str("client id is empty"),
            RequestError::EmptyResourceId => f.write_str("resource id is empty"),
            RequestError::IdTooLong { field, len, max } => {
                write!(
                    f,
                    "{field} is {len} bytes long, more than the limit of {max}"
                )
            }
            RequestError::TooManyResources { count, max } => {
                write!(
                    f,
                    "request names {count} resources, more than the limit of {max}"
                )
            }
            RequestError::DuplicateResource(id) => {
                write!(f, "resource {id:?} appears more than once in the request")
            }
            RequestError::InvalidWants { resource, wants } => write!(
                f,
                "resource {resource:?}: wants {wants} is not a finite number >= 0"
            ),
            RequestError::InvalidHas { resource, has } => write!(
                f,
                "resource {resource:?}: has.capacity {has} is not a finite number >= 0"
            ),
            RequestError::InvalidNumClients {
                resource,
                num_clients,
            } => write!(
                f,
                "resource {resource:?}: num_clients {num_clients} is less than 1"
            ),
            RequestError::UnknownResource(id) => {
                write!(f, "no resource template matches resource id {id:?}")
            }
            RequestError::MissingField { resource, field } => {
                write!(
                    f,
                    "resource {resource:?}: required field {field} is missing"
                )
            }
        }
    }
}

impl std::error::Error for RequestError {}

impl From<RequestError> for tonic::Status {
    fn from(e: RequestError) -> Self {
        let code = match e {
            RequestError::UnknownResource(_) => tonic::Code::NotFound,
            _ => tonic::Code::InvalidArgument,
        };
        tonic::Status::new(code, e.to_string())
    }
}
