//! Placeholder so the manifest's `limiter` bench target resolves; the limiter
//! benchmarks replace it.

fn main() {}
