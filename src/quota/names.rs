//! Namespace and bucket names: `[a-zA-Z0-9_]+`, case-sensitive, at most
//! [`MAX_NAME_LEN`] bytes.
//!
//! The length cap is this server's addition: a name is kept as the key of a
//! dynamic bucket, so an unbounded name would make the memory bound of
//! `max_dynamic_buckets` meaningless.

use std::fmt;

/// The longest name accepted, in bytes.
pub const MAX_NAME_LEN: usize = 128;

/// Why a name is invalid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameError {
    /// The name is empty.
    Empty,
    /// The name is longer than [`MAX_NAME_LEN`].
    TooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// A character outside `[a-zA-Z0-9_]`.
    BadChar {
        /// The character.
        ch: char,
        /// Its byte offset.
        at: usize,
    },
}

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NameError::Empty => f.write_str("empty; names match [a-zA-Z0-9_]+"),
            NameError::TooLong { len } => {
                write!(f, "{len} bytes long, longer than {MAX_NAME_LEN}")
            }
            NameError::BadChar { ch, at } => write!(
                f,
                "invalid character {ch:?} at byte {at}; names match [a-zA-Z0-9_]+"
            ),
        }
    }
}

impl std::error::Error for NameError {}

/// Checks a namespace or bucket name.
///
/// # Examples
///
/// ```
/// use tollgate::quota::names::{check_name, NameError};
///
/// assert_eq!(check_name("TheBrain_userLogins"), Ok(()));
/// assert_eq!(check_name("a:b"), Err(NameError::BadChar { ch: ':', at: 1 }));
/// assert_eq!(check_name(""), Err(NameError::Empty));
/// ```
///
/// # Errors
///
/// A [`NameError`] saying what is wrong.
pub fn check_name(name: &str) -> Result<(), NameError> {
    if name.is_empty() {
        return Err(NameError::Empty);
    }
    if name.len() > MAX_NAME_LEN {
        return Err(NameError::TooLong { len: name.len() });
    }
    match name
        .char_indices()
        .find(|&(_, c)| !(c.is_ascii_alphanumeric() || c == '_'))
    {
        Some((at, ch)) => Err(NameError::BadChar { ch, at }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(check_name("aZ09_"), Ok(()));
        assert_eq!(check_name(&"x".repeat(MAX_NAME_LEN)), Ok(()));
        assert_eq!(
            check_name(&"x".repeat(MAX_NAME_LEN + 1)),
            Err(NameError::TooLong { len: 129 })
        );
        assert_eq!(
            check_name("ab\u{e9}"),
            Err(NameError::BadChar {
                ch: '\u{e9}',
                at: 2
            })
        );
        assert_eq!(
            check_name("a-b"),
            Err(NameError::BadChar { ch: '-', at: 1 })
        );
        assert_eq!(
            NameError::TooLong { len: 200 }.to_string(),
            "200 bytes long, longer than 128"
        );
    }
}
