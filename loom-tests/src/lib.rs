//! Loom models of tollgate's limiter live in `tests/`; build them with
//! `--cfg tollgate_loom` so the limiter uses loom's atomics, locks and
//! futex model.
