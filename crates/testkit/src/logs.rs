//! Log output captured for a test to read: a `tracing_subscriber` writer.

use std::sync::{Arc, Mutex};

/// Everything written to it, shared by its clones: pass a clone to
/// `tracing_subscriber::fmt().with_writer(move || logs.clone())`, or set
/// [`Logs::subscriber`] as the default.
#[derive(Clone, Debug, Default)]
pub struct Logs(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    /// What was written so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    /// A subscriber writing plain lines (no colours) here; set it as the
    /// default for the code whose logs a test reads.
    pub fn subscriber(&self) -> impl tracing::Subscriber + Send + Sync + 'static {
        let logs = self.clone();
        tracing_subscriber::fmt()
            .with_writer(move || logs.clone())
            .with_ansi(false)
            .finish()
    }

    /// How often `what` was written so far.
    pub fn count(&self, what: &str) -> usize {
        self.text().matches(what).count()
    }
}
