//! tollgate: a lock-free, sliced token-pool rate limiter and a
//! Doorman-compatible lease server.
#![deny(unsafe_op_in_unsafe_fn)]

pub mod doorman;
