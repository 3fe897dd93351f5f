//! The `tollgate` command.
fn main() {}
