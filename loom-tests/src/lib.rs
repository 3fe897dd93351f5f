//! Loom models of tollgate's limiter and of the throttler's keyed table
//! live in `tests/`; build them with `--cfg tollgate_loom` so both use
//! loom's atomics, cells, locks and futex model.
