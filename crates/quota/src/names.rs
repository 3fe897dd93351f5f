//! Namespace and bucket names: any non-empty string of at most
//! [`MAX_NAME_LEN`] bytes, case-sensitive, as in the reference quotaservice
//! (whose own example configuration names a namespace `test.namespace`).
//!
//! The length cap is this server's addition: a name is kept as the key of a
//! dynamic bucket, so an unbounded name would make the memory bound of the
//! dynamic-bucket caps meaningless. 256 bytes is far beyond the names the
//! design's examples use (`Pinky_TheBrain:UserService_getUser`, a user id,
//! an IP address).

use std::fmt;

/// The longest name accepted, in bytes.
pub(crate) const MAX_NAME_LEN: usize = 256;

/// Why a name is invalid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NameError {
    /// The name is empty.
    Empty,
    /// The name is longer than [`MAX_NAME_LEN`].
    TooLong {
        /// Its length in bytes.
        len: usize,
    },
}

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NameError::Empty => f.write_str("empty; a name needs at least one character"),
            NameError::TooLong { len } => {
                write!(f, "{len} bytes long, longer than {MAX_NAME_LEN}")
            }
        }
    }
}

impl std::error::Error for NameError {}

/// Checks a namespace or bucket name.
///
/// # Errors
///
/// A [`NameError`] saying what is wrong.
pub(crate) fn check_name(name: &str) -> Result<(), NameError> {
    if name.is_empty() {
        return Err(NameError::Empty);
    }
    if name.len() > MAX_NAME_LEN {
        return Err(NameError::TooLong { len: name.len() });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reference_names_pass() {
        assert_eq!(check_name("TheBrain_userLogins"), Ok(()));
        assert_eq!(check_name("test.namespace"), Ok(()));
        assert_eq!(check_name("10.0.0.1:443"), Ok(()));
        assert_eq!(check_name(""), Err(NameError::Empty));
        assert_eq!(
            check_name(&"x".repeat(MAX_NAME_LEN + 1)),
            Err(NameError::TooLong {
                len: MAX_NAME_LEN + 1
            })
        );
    }

    #[test]
    fn names() {
        for ok in [
            "aZ09_",
            "test.namespace",
            "bad-name",
            "a:b",
            "caf\u{e9}",
            " ",
        ] {
            assert_eq!(check_name(ok), Ok(()), "{ok:?}");
        }
        assert_eq!(check_name(&"x".repeat(MAX_NAME_LEN)), Ok(()));
        assert_eq!(
            check_name(&"x".repeat(MAX_NAME_LEN + 1)),
            Err(NameError::TooLong { len: 257 })
        );
        assert_eq!(check_name(""), Err(NameError::Empty));
        assert_eq!(
            NameError::TooLong { len: 300 }.to_string(),
            "300 bytes long, longer than 256"
        );
    }
}
