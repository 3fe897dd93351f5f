//! The sliced active pool: per-thread cache-padded token counters.
//!
//! # Implementation notes
//!
//! Each slice is one `AtomicU64` of tokens on its own cache line
//! (`CachePadded`: two slices never share a line, so a thread taking from
//! its slice never invalidates another core's). A thread is given a home
//! slice the first time it acquires from any limiter (a thread-local index,
//! taken round-robin from a global counter, masked by the slice count), and
//! moves to another slice when it meets contention on its home.
//!
//! The fast path is one load and one compare-exchange on the home slice. A
//! slice refills from the central pool in chunks; a caller that finds its
//! slice and the central pool short takes from other slices, so tokens left
//! in the slice of a thread that went idle are never stranded while anyone
//! needs them.
//!
//! Every token moves by an atomic read-modify-write on one location; the
//! tokens carry no data, so `Relaxed` is enough for the counts themselves
//! (the wait/wake protocol that needs ordering lives in `wait.rs`).

use std::cell::Cell;

use crossbeam_utils::CachePadded;

use crate::sync::{static_counter, thread_local, AtomicU64, Ordering::Relaxed};

static_counter! {
    /// A hint, not state: the home index the next thread is given.
    static NEXT_HOME = 0;
}

thread_local! {
    /// Which slice the current thread calls home (`usize::MAX`: not yet).
    static HOME: Cell<usize> = Cell::new(usize::MAX);
}

/// The next home index (before masking).
fn next_home() -> usize {
    // Relaxed: only spreads threads over slices; no ordering needed.
    // Truncation on 32-bit targets is harmless: the index is masked.
    NEXT_HOME.fetch_add(1, Relaxed) as usize
}

/// The current thread's home index (before masking).
///
/// A thread whose thread-locals are being destroyed (a budget giving its
/// tokens back as the thread exits may serve waiters) has no home left:
/// it is given the next index, which is as good as any.
#[inline]
fn home_hint() -> usize {
    HOME.try_with(|home| {
        let index = home.get();
        if index != usize::MAX {
            return index;
        }
        let index = next_home();
        home.set(index);
        index
    })
    .unwrap_or_else(|_| next_home())
}

/// Moves the current thread to another home after contention on its own.
pub(crate) fn move_home() {
    let index = next_home();
    // A thread past its thread-locals has no home to move (see `home_hint`).
    let _ = HOME.try_with(|home| home.set(index));
}

/// Token counters, one per cache line.
#[derive(Debug)]
pub(crate) struct Slices {
    slots: Box<[CachePadded<AtomicU64>]>,
    mask: usize,
}

/// Outcome of a fast-path take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Take {
    /// The tokens were taken.
    Taken,
    /// The home slice holds too few tokens.
    Short,
    /// Another thread changed the home slice meanwhile.
    Contended,
}

impl Slices {
    /// `count` slices, rounded up to a power of two.
    pub(crate) fn new(count: usize) -> Slices {
        let count = count.max(1).next_power_of_two();
        Slices {
            slots: (0..count)
                .map(|_| CachePadded::new(AtomicU64::new(0)))
                .collect(),
            mask: count - 1,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    #[inline]
    fn home_index(&self) -> usize {
        home_hint() & self.mask
    }

    /// The fast path: takes `need` tokens from the home slice if it holds them.
    #[inline]
    pub(crate) fn try_take(&self, need: u64) -> Take {
        let slot = &self.slots[self.home_index()];
        let have = slot.load(Relaxed);
        if have < need {
            return Take::Short;
        }
        match slot.compare_exchange(have, have - need, Relaxed, Relaxed) {
            Ok(_) => Take::Taken,
            Err(_) => Take::Contended,
        }
    }

    /// Takes up to `max` tokens from the slice at `index`.
    fn take_up_to_at(&self, index: usize, max: u64) -> u64 {
        if max == 0 {
            return 0;
        }
        let slot = &self.slots[index];
        let mut have = slot.load(Relaxed);
        loop {
            if have == 0 {
                return 0;
            }
            let taken = have.min(max);
            match slot.compare_exchange_weak(have, have - taken, Relaxed, Relaxed) {
                Ok(_) => return taken,
                Err(now) => have = now,
            }
        }
    }

    /// Takes up to `max` tokens from the home slice.
    pub(crate) fn take_home(&self, max: u64) -> u64 {
        self.take_up_to_at(self.home_index(), max)
    }

    /// Takes up to `max` tokens from the other slices, starting after home.
    pub(crate) fn steal(&self, max: u64) -> u64 {
        let home = self.home_index();
        let mut taken = 0;
        for step in 1..self.slots.len() {
            if taken == max {
                break;
            }
            taken += self.take_up_to_at((home + step) & self.mask, max - taken);
        }
        taken
    }

    /// Takes up to `max` tokens from all slices, home first.
    pub(crate) fn steal_all(&self, max: u64) -> u64 {
        let home = self.home_index();
        let mut taken = 0;
        for step in 0..self.slots.len() {
            if taken == max {
                break;
            }
            taken += self.take_up_to_at((home + step) & self.mask, max - taken);
        }
        taken
    }

    /// Adds tokens to the home slice.
    pub(crate) fn put_home(&self, tokens: u64) {
        if tokens > 0 {
            self.slots[self.home_index()].fetch_add(tokens, Relaxed);
        }
    }

    /// The tokens in all slices: a snapshot, exact when no take runs
    /// concurrently.
    pub(crate) fn total(&self) -> u64 {
        self.slots.iter().map(|slot| slot.load(Relaxed)).sum()
    }

    /// Empties every slice; returns the tokens removed.
    pub(crate) fn drain(&self) -> u64 {
        self.slots.iter().map(|slot| slot.swap(0, Relaxed)).sum()
    }
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use super::*;

    #[test]
    fn take_put_steal_drain_conserve_tokens() {
        let slices = Slices::new(3);
        assert_eq!(slices.len(), 4);
        assert_eq!(slices.try_take(1), Take::Short);
        slices.put_home(10);
        assert_eq!(slices.try_take(4), Take::Taken);
        assert_eq!(slices.take_home(100), 6);
        slices.slots[(slices.home_index() + 1) & slices.mask].fetch_add(5, Relaxed);
        slices.slots[(slices.home_index() + 2) & slices.mask].fetch_add(5, Relaxed);
        assert_eq!(slices.steal(7), 7);
        assert_eq!(slices.total(), 3);
        assert_eq!(slices.drain(), 3);
        assert_eq!(slices.total(), 0);
    }

    #[test]
    fn moving_home_changes_the_slice() {
        let slices = Slices::new(2);
        slices.put_home(1);
        let before = slices.home_index();
        HOME.with(|home| home.set(home.get() + 1));
        assert_ne!(slices.home_index(), before);
        assert_eq!(slices.take_home(1), 0);
        assert_eq!(slices.steal(1), 1);
    }
}
