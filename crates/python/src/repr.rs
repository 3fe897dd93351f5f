//! Python-like reprs: `Name('text', field=1.0, other=None)`, each value
//! written by Python's own `repr` (quoted strings, `None`, `500.0`), never
//! by Rust's `Debug`.

use pyo3::prelude::*;
use pyo3::BoundObject;

/// A repr being built: the class name, then positional values, then
/// `name=value` fields.
pub(crate) struct Repr<'py> {
    py: Python<'py>,
    text: String,
    first: bool,
}

impl<'py> Repr<'py> {
    /// `Name(`.
    pub(crate) fn new(py: Python<'py>, name: &str) -> Repr<'py> {
        Repr {
            py,
            text: format!("{name}("),
            first: true,
        }
    }

    fn separate(&mut self) {
        if !self.first {
            self.text.push_str(", ");
        }
        self.first = false;
    }

    /// A positional value, as Python writes it.
    pub(crate) fn arg(mut self, value: impl IntoPyObject<'py>) -> PyResult<Repr<'py>> {
        self.separate();
        let value = value.into_pyobject(self.py).map_err(Into::into)?;
        self.text
            .push_str(&value.into_bound().into_any().repr()?.to_cow()?);
        Ok(self)
    }

    /// `name=value`, the value as Python writes it.
    pub(crate) fn field(
        mut self,
        name: &str,
        value: impl IntoPyObject<'py>,
    ) -> PyResult<Repr<'py>> {
        self.separate();
        self.text.push_str(name);
        self.text.push('=');
        let value = value.into_pyobject(self.py).map_err(Into::into)?;
        self.text
            .push_str(&value.into_bound().into_any().repr()?.to_cow()?);
        Ok(self)
    }

    /// The repr, closed.
    pub(crate) fn done(mut self) -> PyResult<String> {
        self.text.push(')');
        Ok(self.text)
    }
}
