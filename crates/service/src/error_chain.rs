//! An error with its causes, for log lines: `tracing`'s `%e` writes only
//! the outermost message, and the errors here keep the detail (which YAML
//! key, which I/O failure) in their [`source`](std::error::Error::source).

use std::error::Error;
use std::fmt;

/// Displays an error and each of its sources, joined by `": "`.
#[derive(Debug, Clone, Copy)]
pub struct ErrorChain<'a>(pub &'a (dyn Error + 'static));

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
