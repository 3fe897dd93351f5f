//! The throttler's keyed table alone, for the loom models in
//! `loom-tests/tests/table.rs`: built only with `--cfg tollgate_loom`,
//! where the rest of the throttler is not.
//!
//! [`Table`] drives the table as the keyed store does (see
//! `store.rs`'s `with_entry`): a hit takes a slot's lock bit without the
//! shard lock; a miss probes again under the shard lock and inserts;
//! removals and rebuilds hold the shard lock. The state of a key is a
//! count, and the caller picks each key's hash, so a model can put keys
//! in one probe sequence.

#![allow(unreachable_pub)]

#[path = "table.rs"]
mod table;

use table::Occupancy;
use tollgate::sync::{lock, Mutex};

/// One shard's run of slots, with counts as states.
pub struct Table {
    table: table::Table<u64, u64>,
    shard: Mutex<Occupancy>,
}

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table").finish_non_exhaustive()
    }
}

impl Table {
    /// One run of `run` slots (at least 2).
    pub fn new(run: usize) -> Table {
        Table {
            table: table::Table::new(1, run),
            shard: Mutex::new(Occupancy::default()),
        }
    }

    /// Adds `n` to the count of `key` (inserted at 0 if absent), whose hash
    /// is `hash`; returns the count after.
    pub fn add(&self, hash: u64, key: u64, n: u64) -> u64 {
        if let Some(mut guard) = self.table.find(0, hash, &key) {
            *guard.state() += n;
            return *guard.state();
        }
        let mut occupancy = lock(&self.shard);
        if let Some(mut guard) = self.table.find(0, hash, &key) {
            *guard.state() += n;
            return *guard.state();
        }
        if self.table.needs_rebuild(&occupancy) {
            self.table.rebuild(&mut occupancy, 0);
        }
        let mut guard = self.table.insert(&mut occupancy, 0, hash, key, 0, 0);
        *guard.state() += n;
        *guard.state()
    }

    /// The count of `key`, without inserting it.
    pub fn get(&self, hash: u64, key: u64) -> Option<u64> {
        let mut guard = self.table.find(0, hash, &key)?;
        Some(*guard.state())
    }

    /// Removes `key`; returns its count.
    pub fn remove(&self, key: u64) -> Option<u64> {
        let mut occupancy = lock(&self.shard);
        let mut removed = None;
        self.table
            .for_each(&mut occupancy, 0, |occupancy, mut guard| {
                if *guard.key() == key {
                    removed = Some(*guard.state());
                    guard.remove(occupancy);
                }
            });
        removed
    }

    /// Rebuilds the run, clearing its tombstones.
    pub fn rebuild(&self) {
        self.table.rebuild(&mut lock(&self.shard), 0);
    }

    /// The keys held and the tombstones left.
    pub fn occupancy(&self) -> (usize, usize) {
        let occupancy = lock(&self.shard);
        (occupancy.len, occupancy.tombstones())
    }
}
