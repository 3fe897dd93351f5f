//! Loom models of the throttler's keyed table (`crates/table`, the
//! `tollgate-table` crate): its probe, each slot's lock bit and the
//! rebuild of a run.
//!
//! The table is driven as the keyed store drives it (see [`Table`] below
//! and `with_entry` in `crates/throttle/src/store.rs`): hits without the
//! shard lock, inserts, removals and rebuilds under it. Each key's state
//! is a count in a slot cell; loom checks every access to those cells
//! against the order the lock bit claims, so a weakened ordering fails as a causality violation
//! and a lost or doubled update fails the counts. Keys are given hashes
//! with one home slot, so they share one probe sequence.
//!
//! Each model was run against a deliberate break and failed:
//! - `Slot::lock`'s compare-and-swap with `Relaxed` instead of `Acquire`
//!   (or `Guard::drop`'s store with `Relaxed`): a causality violation on
//!   the count's cell in `concurrent_hits_on_one_key_lose_no_update`;
//! - `Table::find` ending its probe at a tombstone as at an empty slot:
//!   the key behind it inserted twice in
//!   `a_probe_goes_past_a_removed_key_while_it_is_removed`;
//! - `Table::rebuild` moving an occupied slot's cells out without taking
//!   its lock bit: a causality violation (the mover reads the count while
//!   a hit writes it) in `a_rebuild_racing_a_hit_loses_nothing`.
#![cfg(tollgate_loom)]

use loom::sync::{Arc, Mutex, MutexGuard};
use loom::thread;
use tollgate_table::Occupancy;

/// One shard's run of slots, with counts as states, driven as the keyed
/// store drives its table: a hit takes a slot's lock bit without the shard
/// lock; a miss probes again under the shard lock and inserts; removals
/// and rebuilds hold the shard lock. The caller picks each key's hash, so
/// a model can put keys in one probe sequence.
struct Table {
    table: tollgate_table::Table<u64, u64>,
    shard: Mutex<Occupancy>,
}

impl Table {
    /// One run of `run` slots (at least 2).
    fn new(run: usize) -> Table {
        Table {
            table: tollgate_table::Table::new(1, run),
            shard: Mutex::new(Occupancy::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Occupancy> {
        self.shard.lock().unwrap()
    }

    /// Adds `n` to the count of `key` (inserted at 0 if absent), whose hash
    /// is `hash`; returns the count after.
    fn add(&self, hash: u64, key: u64, n: u64) -> u64 {
        if let Some(mut guard) = self.table.find(0, hash, &key) {
            *guard.state() += n;
            return *guard.state();
        }
        let mut occupancy = self.lock();
        if let Some(mut guard) = self.table.find(0, hash, &key) {
            *guard.state() += n;
            return *guard.state();
        }
        // SAFETY (here and below): this thread holds the shard's lock,
        // whose occupancy this is.
        unsafe {
            if self.table.needs_rebuild(&occupancy) {
                self.table.rebuild(&mut occupancy, 0);
            }
            let mut guard = self.table.insert(&mut occupancy, 0, hash, key, 0, 0);
            *guard.state() += n;
            *guard.state()
        }
    }

    /// The count of `key`, without inserting it.
    fn get(&self, hash: u64, key: u64) -> Option<u64> {
        let mut guard = self.table.find(0, hash, &key)?;
        Some(*guard.state())
    }

    /// Removes `key`; returns its count.
    fn remove(&self, key: u64) -> Option<u64> {
        let mut occupancy = self.lock();
        let mut removed = None;
        // SAFETY: as in `add`; the removal takes the occupancy `for_each`
        // hands it.
        unsafe {
            self.table
                .for_each(&mut occupancy, 0, |occupancy, mut guard| {
                    if *guard.key() == key {
                        removed = Some(*guard.state());
                        guard.remove(occupancy);
                    }
                });
        }
        removed
    }

    /// Rebuilds the run, clearing its tombstones.
    fn rebuild(&self) {
        // SAFETY: as in `add`.
        unsafe { self.table.rebuild(&mut self.lock(), 0) };
    }

    /// The keys held and the tombstones left.
    fn occupancy(&self) -> (usize, usize) {
        let occupancy = self.lock();
        (occupancy.len, occupancy.tombstones())
    }
}

/// A hash whose home slot is 0 in any run (bits 8..40 zero), told apart
/// from others by its tag bits (4..8 and 40..64).
fn hash(key: u64) -> u64 {
    (key << 40) | 0x10
}

#[test]
fn concurrent_hits_on_one_key_lose_no_update() {
    loom::model(|| {
        let table = Arc::new(Table::new(4));
        table.add(hash(1), 1, 1);
        let other = {
            let table = Arc::clone(&table);
            thread::spawn(move || {
                table.add(hash(1), 1, 10);
            })
        };
        table.add(hash(1), 1, 100);
        other.join().unwrap();
        assert_eq!(table.get(hash(1), 1), Some(111));
        assert_eq!(table.occupancy(), (1, 0));
    });
}

#[test]
fn a_probe_goes_past_a_removed_key_while_it_is_removed() {
    loom::model(|| {
        // Keys 1 and 2 share a home: 2 sits one slot past 1.
        let table = Arc::new(Table::new(4));
        table.add(hash(1), 1, 1);
        table.add(hash(2), 2, 1);
        let remover = {
            let table = Arc::clone(&table);
            thread::spawn(move || table.remove(1))
        };
        // Whether 1 is still there or already a tombstone, 2 is found.
        table.add(hash(2), 2, 1);
        assert_eq!(remover.join().unwrap(), Some(1));
        assert_eq!(table.get(hash(2), 2), Some(2));
        assert_eq!(table.occupancy(), (1, 1));
    });
}

#[test]
fn a_rebuild_racing_a_hit_loses_nothing() {
    loom::model(|| {
        let table = Arc::new(Table::new(4));
        table.add(hash(1), 1, 1);
        table.add(hash(2), 2, 1);
        table.remove(1);
        let rebuilder = {
            let table = Arc::clone(&table);
            thread::spawn(move || table.rebuild())
        };
        // A hit before, during (it misses and retries under the shard
        // lock) or after the rebuild.
        table.add(hash(2), 2, 1);
        rebuilder.join().unwrap();
        assert_eq!(table.get(hash(2), 2), Some(2));
        // The rebuild cleared the tombstone; 2 was counted once.
        assert_eq!(table.occupancy(), (1, 0));
    });
}
