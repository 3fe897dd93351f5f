//! `Tls`: the CA, and for mutual TLS the certificate and key, a
//! `LeaseClient` speaks TLS with.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use tollgate_doorman::ClientTls;

use crate::errors::tls_error;
use crate::repr::Repr;

/// TLS for a `LeaseClient`: the CA that signed the servers' certificates
/// (PEM), and for mutual TLS the client's certificate and key.
///
/// The files are read and checked when the `Tls` is made: a missing one
/// raises FileNotFoundError, one without a usable PEM certificate or key
/// ValueError.
#[pyclass(frozen, name = "Tls", module = "tollgate")]
pub(crate) struct PyTls {
    pub(super) tls: ClientTls,
    ca: std::path::PathBuf,
    identity: Option<(std::path::PathBuf, std::path::PathBuf)>,
    domain: Option<String>,
}

#[pymethods]
impl PyTls {
    #[new]
    #[pyo3(signature = (ca, *, cert = None, key = None, domain = None))]
    fn new(
        ca: std::path::PathBuf,
        cert: Option<std::path::PathBuf>,
        key: Option<std::path::PathBuf>,
        domain: Option<String>,
    ) -> PyResult<PyTls> {
        let mut tls = ClientTls::new(ca.clone());
        let identity = match (cert, key) {
            (Some(cert), Some(key)) => {
                tls = tls.identity(cert.clone(), key.clone());
                Some((cert, key))
            }
            (None, None) => None,
            _ => return Err(PyValueError::new_err("cert and key go together")),
        };
        if let Some(domain) = &domain {
            if domain.is_empty() {
                return Err(PyValueError::new_err("domain must not be empty"));
            }
            tls = tls.domain(domain.clone());
        }
        tls.load().map_err(|e| tls_error(&e))?;
        Ok(PyTls {
            tls,
            ca,
            identity,
            domain,
        })
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let path = |p: &std::path::Path| p.display().to_string();
        let mut repr = Repr::new(py, "Tls").arg(path(&self.ca))?;
        if let Some((cert, key)) = &self.identity {
            repr = repr.field("cert", path(cert))?.field("key", path(key))?;
        }
        if let Some(domain) = &self.domain {
            repr = repr.field("domain", domain)?;
        }
        repr.done()
    }
}
