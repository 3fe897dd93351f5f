//! An error with its causes, for log lines: `tracing`'s `%e` writes only
//! the outermost message, and the errors here keep the detail (which YAML
//! key, which I/O failure) in their [`source`](std::error::Error::source).

use std::error::Error;
use std::fmt;

/// An error and each of its sources, joined by `": "`, in one line.
///
/// # Examples
///
/// ```
/// let io = std::io::Error::other("disk full");
/// assert_eq!(tollgate_service::error_chain(&io), "disk full");
/// ```
pub fn error_chain(error: &(dyn Error + 'static)) -> String {
    ErrorChain(error).to_string()
}

/// Displays an error and each of its sources, joined by `": "` (for
/// `tracing`'s `%`, without a `String`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ErrorChain<'a>(pub(crate) &'a (dyn Error + 'static));

impl fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut cause = self.0.source();
        while let Some(e) = cause {
            write!(f, ": {e}")?;
            cause = e.source();
        }
        Ok(())
    }
}

/// A failed gRPC call in one line: the code, the message and the
/// innermost cause (e.g. `Unavailable: tcp connect error: Connection
/// refused (os error 111)`), without tonic's dump of metadata and
/// sources; a TLS failure in words, with its likely fix
/// ([`tls_failure`](crate::tls_failure)).
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
///
/// let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
/// let mut status = tonic::Status::unavailable("tcp connect error");
/// status.set_source(Arc::new(refused));
/// assert_eq!(
///     tollgate_service::status_line(&status),
///     "Unavailable: tcp connect error: connection refused"
/// );
/// ```
pub fn status_line(status: &tonic::Status) -> String {
    let mut line = format!("{:?}", status.code());
    if let Some(tls) = crate::tls_failure(status) {
        line.push_str(": ");
        line.push_str(&tls);
        return line;
    }
    if !status.message().is_empty() {
        line.push_str(": ");
        line.push_str(status.message());
    }
    let mut cause = Error::source(status);
    let mut innermost = None;
    while let Some(c) = cause {
        innermost = Some(c);
        cause = c.source();
    }
    if let Some(c) = innermost {
        let c = c.to_string();
        if !line.ends_with(c.as_str()) {
            line.push_str(": ");
            line.push_str(&c);
        }
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Outer(std::io::Error);

    impl fmt::Display for Outer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("cannot read rules.yaml")
        }
    }

    impl Error for Outer {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn every_cause_is_written_after_the_message() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let e = Outer(io);
        assert_eq!(
            ErrorChain(&e).to_string(),
            "cannot read rules.yaml: no such file"
        );
        let lone = std::io::Error::other("disk full");
        assert_eq!(ErrorChain(&lone).to_string(), "disk full");
    }
}
