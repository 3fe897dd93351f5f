//! Loom models of the throttler's keyed table (`crates/throttle/src/store/table.rs`):
//! its probe, each slot's lock bit and the rebuild of a run.
//!
//! The table is driven as the keyed store drives it (see
//! `tollgate_throttle::table`): hits without the shard lock, inserts,
//! removals and rebuilds under it. Each key's state is a count in a slot
//! cell; loom checks every access to those cells against the order the
//! lock bit claims, so a weakened ordering fails as a causality violation
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

use loom::sync::Arc;
use loom::thread;
use tollgate_throttle::table::Table;

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
