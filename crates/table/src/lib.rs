//! The keyed table of `tollgate-throttle`'s `KeyedLimiter`: one flat array
//! of cache-line slots, cut into equal runs, one per shard, found without a
//! lock and each guarded by a lock bit in its own tag word.
//!
//! A hit ([`Table::find`]) takes no lock but its slot's bit. Everything that
//! changes which slots are occupied ([`Table::insert`], [`Guard::remove`],
//! [`Table::rebuild`], and [`Table::for_each`], which hands out removable
//! slots) is `unsafe`: its caller owns the run's layout, shown by the run's
//! [`Occupancy`], which it keeps behind one lock per shard.
//!
//! # Examples
//!
//! ```
//! use std::sync::Mutex;
//! use tollgate_table::{Occupancy, Table};
//!
//! // One shard of 8 slots; the shard's lock guards its occupancy.
//! let table: Table<u64, u32> = Table::new(1, 8);
//! let shard = Mutex::new(Occupancy::default());
//! let hash = 0x1234_5678_9abc_def0;
//! assert!(table.find(0, hash, &7).is_none());
//! {
//!     let mut occupancy = shard.lock().unwrap();
//!     // SAFETY: this thread holds shard 0's lock, whose occupancy this is.
//!     let mut guard = unsafe { table.insert(&mut occupancy, 0, hash, 7, 0, 0) };
//!     *guard.state() += 1;
//! }
//! let mut guard = table.find(0, hash, &7).expect("inserted");
//! assert_eq!(*guard.state(), 1);
//! drop(guard);
//! assert_eq!(shard.lock().unwrap().len, 1);
//! ```
//!
//! # Implementation notes
//!
//! A run is an open-addressed table with linear probing. A key's home slot
//! is its hash's bits 8..40 scaled to the run's length (a multiply, not a
//! mask, so a run needs no power-of-two size); probing walks on, wrapping
//! inside the run, until it meets the key or an `EMPTY` slot.
//!
//! Each slot is one (or, for a large key and state, two) cache lines: the
//! tag word, the time, the key and the policy state, so that a hit costs
//! the miss on the slot's line and, for a key that lives on the heap, the
//! deref that compares it. The tag (`Slot::tag`) carries the hash's
//! bits 4..64, so a probe skips other keys' slots without touching them.
//!
//! Hits take no shard lock: a thread finds a slot whose tag matches, sets
//! the slot's `LOCKED` bit by compare-and-swap on the line it already
//! missed on, compares the key exactly (a tag match is only a filter),
//! runs the policy, and clears the bit with the new time. Everything that
//! changes which slots are occupied (insert, removal, rebuild) needs the
//! shard's `Mutex`, shown by a `&mut` [`Occupancy`] only that mutex hands out
//! (which is why those calls are `unsafe`: the caller keeps that promise),
//! and locks a slot's bit before emptying it, so a concurrent hit either
//! finishes first or finds the slot gone. A probe that misses while a
//! removal or rebuild moves slots retries under the shard lock, where the
//! layout is still, so no key is ever inserted twice.
//!
//! Removal leaves a `TOMBSTONE` (probes go on past it). When occupied
//! slots plus tombstones reach seven eighths of a run, the run is rebuilt
//! under its shard lock: every entry is moved out, the run emptied and the
//! entries put back, clearing every tombstone. The store keeps at most
//! three quarters of a run occupied, so a rebuild clears at least an
//! eighth of the run and costs O(1) amortised per removal.
//!
//! The array is allocated zeroed (all-zero bytes are an `EMPTY` slot), so
//! pages no key has touched cost no resident memory. Under loom, whose
//! atomics and cells are not plain words, each slot is built instead.
//!
//! The atomics, cells and spinning come from the crate's sync shim
//! (`sync.rs`), so the loom models in `loom-tests/tests/table.rs` check the
//! probe, the lock bit and the rebuild against every interleaving.

mod sync;

#[cfg(not(tollgate_loom))]
use std::alloc::{alloc_zeroed, dealloc, handle_alloc_error, Layout};
use std::borrow::Borrow;
use std::mem::{self, MaybeUninit};
use std::ptr::NonNull;

use sync::{yield_now, AtomicU64, Ordering, UnsafeCell};

/// Tag of a slot that never held a key since the run was (re)built: ends
/// every probe.
const EMPTY: u64 = 0;
/// Tag bit 0: a thread holds the slot; only it reads or writes the slot's
/// time and state, and only it may empty the slot.
const LOCKED: u64 = 1;
/// Tag bit 1: the key is banned and the slot's time is when the ban ends.
const BANNED: u64 = 1 << 1;
/// Tag bit 2: the slot holds a key, whose hash's bits 4..64 are the tag's.
const OCCUPIED: u64 = 1 << 2;
/// Tag of a slot whose key was removed: probes go on past it, inserts may
/// reuse it. Neither [`OCCUPIED`] nor [`LOCKED`], so no hit ever locks it.
const TOMBSTONE: u64 = 1 << 3;
/// The tag's low bits, which hold flags rather than hash bits.
const FLAGS: u64 = 0xF;

/// The tag bits a hit compares: an occupied slot's key bits, without its
/// lock and ban bits.
fn key_bits(tag: u64) -> u64 {
    tag & !(LOCKED | BANNED)
}

/// The unlocked, unbanned tag of an occupied slot holding a key of `hash`.
fn tag_of(hash: u64) -> u64 {
    (hash & !FLAGS) | OCCUPIED
}

/// One key's slot, a cache line (two when the key and state exceed 48
/// bytes).
#[repr(C, align(64))]
pub struct Slot<K, S> {
    /// [`EMPTY`], [`TOMBSTONE`], or an occupied tag: hash bits 4..64,
    /// [`OCCUPIED`], and the [`BANNED`] and [`LOCKED`] bits. Only a thread
    /// that set [`LOCKED`] touches the other fields, and only under the
    /// shard lock does a slot change between free and occupied.
    tag: AtomicU64,
    /// The last use of the key, or the end of its ban when [`BANNED`].
    time: UnsafeCell<u64>,
    /// Initialised exactly while the tag is occupied.
    key: UnsafeCell<MaybeUninit<K>>,
    /// Initialised exactly while the tag is occupied.
    state: UnsafeCell<MaybeUninit<S>>,
}

impl<K, S> std::fmt::Debug for Slot<K, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Only the tag may be read without the slot's lock.
        f.debug_struct("Slot")
            .field("tag", &self.tag.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl<K, S> Slot<K, S> {
    /// An empty slot.
    #[cfg(tollgate_loom)]
    fn empty() -> Slot<K, S> {
        Slot {
            tag: AtomicU64::new(EMPTY),
            time: UnsafeCell::new(0),
            key: UnsafeCell::new(MaybeUninit::uninit()),
            state: UnsafeCell::new(MaybeUninit::uninit()),
        }
    }

    /// Sets the lock bit if the tag's key bits are `want`; returns the tag
    /// as it was (unlocked), or `None` once the key bits differ.
    fn lock(&self, want: u64) -> Option<u64> {
        let mut spins = 0u32;
        // Relaxed: only the compare-and-swap below takes the slot.
        let mut cur = self.tag.load(Ordering::Relaxed);
        loop {
            if key_bits(cur) != want {
                return None;
            }
            if cur & LOCKED == 0 {
                // Acquire: pairs with the Release in `Guard::drop` (or the
                // publishing store of an insert or rebuild), so that the
                // last holder's key, time and state are visible.
                match self.tag.compare_exchange_weak(
                    cur,
                    cur | LOCKED,
                    Ordering::Acquire,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => return Some(cur),
                    Err(now) => {
                        cur = now;
                        continue;
                    }
                }
            }
            backoff(&mut spins);
            cur = self.tag.load(Ordering::Relaxed);
        }
    }
}

/// Spins before yielding to a slot's holder: none under loom, where a spin
/// only multiplies the interleavings to explore.
const SPINS: u32 = if cfg!(tollgate_loom) { 0 } else { 64 };

/// Spins a little, then yields: a slot is held for a few nanoseconds, but
/// its holder may have been preempted.
fn backoff(spins: &mut u32) {
    if *spins < SPINS {
        *spins += 1;
        std::hint::spin_loop();
    } else {
        yield_now();
    }
}

/// Occupied slots and tombstones of one run; the shard's mutex holds it,
/// and a `&mut` to it is the proof that a caller holds that mutex.
#[derive(Debug, Default)]
pub struct Occupancy {
    /// Occupied slots.
    pub len: usize,
    /// Tombstones.
    tombstones: usize,
}

impl Occupancy {
    /// Tombstones left in the run.
    pub fn tombstones(&self) -> usize {
        self.tombstones
    }
}

/// A locked, occupied slot; dropping it unlocks the slot.
pub struct Guard<'a, K, S> {
    slot: &'a Slot<K, S>,
    /// The tag to store on unlock (occupied, not locked).
    tag: u64,
}

impl<K, S> std::fmt::Debug for Guard<'_, K, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard")
            .field("tag", &self.tag)
            .finish_non_exhaustive()
    }
}

impl<K, S> Guard<'_, K, S> {
    /// The slot's key.
    pub fn key(&self) -> &K {
        // SAFETY: the slot is occupied (the tag we locked had OCCUPIED), so
        // the key is initialised; it was written before the tag was
        // published (Release) and our lock's Acquire, and only a holder of
        // the lock drops it, so it outlives the guard's borrow.
        self.slot
            .key
            .with(|key| unsafe { (*key).assume_init_ref() })
    }

    /// The key's policy state.
    pub fn state(&mut self) -> &mut S {
        // SAFETY: as in `key`, the state is initialised; we hold the lock,
        // so no other thread reads or writes it until we unlock, after the
        // guard's borrow ends.
        self.slot
            .state
            .with_mut(|state| unsafe { (*state).assume_init_mut() })
    }

    /// The last use, or the end of the ban when [`banned`](Self::banned).
    pub fn time(&self) -> u64 {
        // SAFETY: the lock makes this thread the time's only user.
        self.slot.time.with(|time| unsafe { *time })
    }

    /// Whether the key is banned until [`time`](Self::time).
    pub fn banned(&self) -> bool {
        self.tag & BANNED != 0
    }

    /// Records the last use, or (banned) the end of the ban.
    pub fn set_time(&mut self, time: u64, banned: bool) {
        // SAFETY: the lock makes this thread the time's only user.
        self.slot.time.with_mut(|t| unsafe { *t = time });
        self.tag = if banned {
            self.tag | BANNED
        } else {
            self.tag & !BANNED
        };
    }

    /// Empties the slot (leaving a tombstone), dropping its key and state.
    ///
    /// # Safety
    ///
    /// `occupancy` is the one of the run that holds this slot, and the
    /// caller holds it exclusively (the shard's lock) for the call: no
    /// other thread inserts into, removes from or rebuilds that run
    /// meanwhile.
    pub unsafe fn remove(self, occupancy: &mut Occupancy) {
        let slot = self.slot;
        mem::forget(self);
        // SAFETY: we hold the lock on an occupied slot, so both cells are
        // initialised and no one else reads them; they are moved out once,
        // and the tombstone below marks them uninitialised.
        let (key, state) = unsafe {
            (
                slot.key.with(|k| (*k).assume_init_read()),
                slot.state.with(|s| (*s).assume_init_read()),
            )
        };
        // Release: pairs with the Acquire of a hit spinning on this slot;
        // it then sees the tombstone and probes on.
        slot.tag.store(TOMBSTONE, Ordering::Release);
        occupancy.len -= 1;
        occupancy.tombstones += 1;
        // Dropped after the slot is free, so a panicking drop leaks rather
        // than leaving a locked slot.
        drop((key, state));
    }
}

impl<K, S> Drop for Guard<'_, K, S> {
    fn drop(&mut self) {
        // Release: pairs with the Acquire in `Slot::lock`, publishing this
        // holder's writes to the time and state.
        self.slot.tag.store(self.tag, Ordering::Release);
    }
}

/// All shards' runs of slots.
pub struct Table<K, S> {
    /// The allocation, from `alloc_zeroed(layout)`.
    #[cfg(not(tollgate_loom))]
    raw: NonNull<u8>,
    /// 16-byte aligned, one slot larger than the slots: the global
    /// allocator's zeroed allocation is a lazily zeroed `calloc` only up to
    /// that alignment (above it, it writes every byte, making every page
    /// resident), so the slots start at the first 64-byte boundary inside.
    #[cfg(not(tollgate_loom))]
    layout: Layout,
    /// `len` slots inside `raw`, each initialised (zeroed, then written).
    slots: NonNull<Slot<K, S>>,
    len: usize,
    /// Slots per run (per shard).
    run: usize,
}

// SAFETY: the table owns its keys and states (sending it sends them).
unsafe impl<K: Send, S: Send> Send for Table<K, S> {}
// SAFETY: a state is only touched by the thread holding its slot's lock
// (so `S: Send` suffices, as for a `Mutex<S>`); keys are only read through
// `&K`, by lock holders and by dropping, so they need `Send + Sync`.
unsafe impl<K: Send + Sync, S: Send> Sync for Table<K, S> {}

impl<K, S> std::fmt::Debug for Table<K, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table")
            .field("len", &self.len)
            .field("run", &self.run)
            .finish_non_exhaustive()
    }
}

impl<K, S> Table<K, S> {
    /// `shards` runs of `run` slots each, all empty.
    ///
    /// # Panics
    ///
    /// If `run` is under 2 or over `u32::MAX`, or `shards * run` slots
    /// overflow the address space (the store caps its size far below).
    #[cfg(not(tollgate_loom))]
    pub fn new(shards: usize, run: usize) -> Table<K, S> {
        assert!(run >= 2 && u32::try_from(run).is_ok(), "run of {run} slots");
        let len = shards * run;
        let size = len
            .checked_add(1)
            .and_then(|n| n.checked_mul(mem::size_of::<Slot<K, S>>()))
            .expect("a table within the address space");
        let layout = Layout::from_size_align(size, 16).expect("a table within the address space");
        // SAFETY: the layout's size is not zero (at least 3 slots of at
        // least 64 bytes).
        let raw = unsafe { alloc_zeroed(layout) };
        let Some(raw) = NonNull::new(raw) else {
            handle_alloc_error(layout);
        };
        let offset = raw.as_ptr().align_offset(mem::align_of::<Slot<K, S>>());
        assert!(offset < mem::size_of::<Slot<K, S>>(), "slot alignment");
        // SAFETY: `offset` is less than one slot, and the allocation holds
        // `len + 1` slots, so `len` aligned slots fit from there; all-zero
        // bytes are a valid `Slot`: an EMPTY tag (an `AtomicU64` has
        // `u64`'s representation), time 0, and `MaybeUninit` cells.
        let slots = unsafe { NonNull::new_unchecked(raw.as_ptr().add(offset).cast()) };
        let table = Table {
            raw,
            layout,
            slots,
            len,
            run,
        };
        advise_huge_pages(table.slots());
        table
    }

    /// `shards` runs of `run` slots each, all empty, each slot built (loom's
    /// atomics and cells are not plain words) and owned by a leaked box.
    #[cfg(tollgate_loom)]
    pub fn new(shards: usize, run: usize) -> Table<K, S> {
        assert!(run >= 2 && u32::try_from(run).is_ok(), "run of {run} slots");
        let len = shards * run;
        let slots: Box<[Slot<K, S>]> = (0..len).map(|_| Slot::empty()).collect();
        Table {
            // SAFETY: a box's pointer is never null.
            slots: unsafe { NonNull::new_unchecked(Box::into_raw(slots).cast()) },
            len,
            run,
        }
    }

    /// All the slots.
    fn slots(&self) -> &[Slot<K, S>] {
        // SAFETY: `slots` points to `len` initialised slots that live as
        // long as `self`.
        unsafe { std::slice::from_raw_parts(self.slots.as_ptr(), self.len) }
    }

    /// Bytes allocated for the slots.
    #[cfg(not(tollgate_loom))]
    pub fn bytes(&self) -> usize {
        self.layout.size()
    }

    /// Slot `i` of `shard`'s run.
    fn slot(&self, shard: usize, i: usize) -> &Slot<K, S> {
        &self.slots()[shard * self.run + i]
    }

    /// The home of a hash in a run: bits 8..40 scaled to the run's length
    /// (the shard is picked by bits 40.., the tag keeps bits 4..).
    fn home(&self, hash: u64) -> usize {
        ((u64::from((hash >> 8) as u32) * self.run as u64) >> 32) as usize
    }

    /// The run's slots in probe order from `hash`'s home, each once.
    fn probe(&self, shard: usize, hash: u64) -> impl Iterator<Item = &Slot<K, S>> {
        let home = self.home(hash);
        (home..self.run)
            .chain(0..home)
            .map(move |i| self.slot(shard, i))
    }

    /// Finds `key` in `shard`'s run and locks its slot; `None` if a probe
    /// meets an empty slot first. Takes no shard lock; without it, `None`
    /// may also mean the key's slot was being moved (retry under the lock).
    pub fn find<Q>(&self, shard: usize, hash: u64, key: &Q) -> Option<Guard<'_, K, S>>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let want = tag_of(hash);
        for slot in self.probe(shard, hash) {
            // Relaxed: a match is confirmed by `lock`'s Acquire; an empty
            // slot sends the caller to the shard lock, which orders it.
            let tag = slot.tag.load(Ordering::Relaxed);
            if tag == EMPTY {
                return None;
            }
            if key_bits(tag) != want {
                continue;
            }
            if let Some(locked) = slot.lock(want) {
                let guard = Guard { slot, tag: locked };
                if guard.key().borrow() == key {
                    return Some(guard);
                }
            }
        }
        None
    }

    /// Inserts `key` (absent from the run) with `state`, returning its slot
    /// locked, with its time set to `time`.
    ///
    /// # Safety
    ///
    /// `occupancy` is `shard`'s, and the caller holds it exclusively (the
    /// shard's lock) for the call: no other thread inserts into, removes
    /// from or rebuilds that run meanwhile. The free slot the insert
    /// writes is then this thread's alone.
    ///
    /// # Panics
    ///
    /// If the run has no free slot: the store keeps an eighth of every run
    /// empty (see [`needs_rebuild`](Self::needs_rebuild)).
    pub unsafe fn insert(
        &self,
        occupancy: &mut Occupancy,
        shard: usize,
        hash: u64,
        key: K,
        state: S,
        time: u64,
    ) -> Guard<'_, K, S> {
        let tag = tag_of(hash);
        let slot = self.place(occupancy, shard, tag, key, state, time);
        // Relaxed: the guard's unlock publishes the slot (Release); a hit
        // that sees this locked tag waits for that.
        slot.tag.store(tag | LOCKED, Ordering::Relaxed);
        Guard { slot, tag }
    }

    /// Writes an entry into the first free slot of its probe and counts it;
    /// the caller publishes the slot's tag.
    fn place(
        &self,
        occupancy: &mut Occupancy,
        shard: usize,
        tag: u64,
        key: K,
        state: S,
        time: u64,
    ) -> &Slot<K, S> {
        for slot in self.probe(shard, tag) {
            // Relaxed: free and occupied only change under the shard lock,
            // which this thread holds (`occupancy`).
            let cur = slot.tag.load(Ordering::Relaxed);
            if cur != EMPTY && cur != TOMBSTONE {
                continue;
            }
            // SAFETY: the slot is free: no hit locks a free slot, so no
            // other thread reads its cells, and only a holder of the shard
            // lock (this thread, by `occupancy`) makes it occupied.
            unsafe {
                slot.key.with_mut(|k| (*k).write(key));
                slot.state.with_mut(|s| (*s).write(state));
                slot.time.with_mut(|t| *t = time);
            }
            if cur == TOMBSTONE {
                occupancy.tombstones -= 1;
            }
            occupancy.len += 1;
            return slot;
        }
        panic!("keyed store: a run with no free slot");
    }

    /// Whether the run's tombstones must be cleared before an insert.
    pub fn needs_rebuild(&self, occupancy: &Occupancy) -> bool {
        occupancy.len + occupancy.tombstones + 1 > self.run - (self.run / 8).max(1)
    }

    /// Locks each occupied slot of `shard`'s run in turn and hands it to
    /// `each`, which unlocks it (drop) or removes it.
    ///
    /// # Safety
    ///
    /// As for [`insert`](Self::insert): `occupancy` is `shard`'s, held
    /// exclusively for the call. `each` may then call [`Guard::remove`]
    /// with the occupancy it is handed.
    ///
    /// # Panics
    ///
    /// If an occupied slot is emptied meanwhile, which only a caller that
    /// broke the contract above can do.
    pub unsafe fn for_each(
        &self,
        occupancy: &mut Occupancy,
        shard: usize,
        mut each: impl FnMut(&mut Occupancy, Guard<'_, K, S>),
    ) {
        for i in 0..self.run {
            let slot = self.slot(shard, i);
            // Relaxed: occupied slots stay occupied while this thread holds
            // the shard lock; `lock` orders the cells.
            let tag = slot.tag.load(Ordering::Relaxed);
            if tag & OCCUPIED == 0 {
                continue;
            }
            let locked = slot
                .lock(key_bits(tag))
                .expect("an occupied slot stays occupied under its shard lock");
            each(occupancy, Guard { slot, tag: locked });
        }
    }

    /// Moves every entry of `shard`'s run out and back in, clearing its
    /// tombstones. Hits meanwhile may miss and retry under the shard lock.
    ///
    /// # Safety
    ///
    /// As for [`insert`](Self::insert): `occupancy` is `shard`'s, held
    /// exclusively for the call.
    ///
    /// # Panics
    ///
    /// As [`for_each`](Self::for_each).
    pub unsafe fn rebuild(&self, occupancy: &mut Occupancy, shard: usize) {
        let mut live = Vec::with_capacity(occupancy.len);
        for i in 0..self.run {
            let slot = self.slot(shard, i);
            // Relaxed: as in `for_each`.
            let tag = slot.tag.load(Ordering::Relaxed);
            if tag == EMPTY {
                continue;
            }
            if tag & OCCUPIED != 0 {
                let locked = slot
                    .lock(key_bits(tag))
                    .expect("an occupied slot stays occupied under its shard lock");
                // SAFETY: we hold the slot's lock and it is occupied, so the
                // cells are initialised and ours; the EMPTY tag stored next
                // marks them moved out.
                let entry = unsafe {
                    (
                        locked,
                        slot.time.with(|t| *t),
                        slot.key.with(|k| (*k).assume_init_read()),
                        slot.state.with(|s| (*s).assume_init_read()),
                    )
                };
                live.push(entry);
            }
            // Release: pairs with the Acquire of a hit spinning on this
            // slot, which then sees it empty and retries under the lock.
            slot.tag.store(EMPTY, Ordering::Release);
        }
        *occupancy = Occupancy::default();
        for (tag, time, key, state) in live {
            let slot = self.place(occupancy, shard, tag, key, state, time);
            // Release: pairs with the Acquire in `Slot::lock`, publishing
            // the cells just written.
            slot.tag.store(tag, Ordering::Release);
        }
    }
}

/// Asks the kernel to back a large table with transparent huge pages.
///
/// A hit lands on a random slot, so with 4 KiB pages a table larger than
/// the TLB's reach costs a page walk on top of the slot's miss (and in a
/// virtual machine a nested one). 2 MiB pages make a table of hundreds of
/// megabytes fit the TLB. The cost: a touched huge page is resident whole,
/// so the table's resident size reaches its allocated size sooner.
#[cfg(all(target_os = "linux", not(tollgate_loom)))]
fn advise_huge_pages<T>(slots: &[T]) {
    const HUGE: usize = 2 << 20;
    let start = slots.as_ptr() as usize;
    let end = start + mem::size_of_val(slots);
    let (first, last) = (start.next_multiple_of(HUGE), end / HUGE * HUGE);
    if last >= first + 2 * HUGE {
        // SAFETY: the range lies within the live allocation `slots`, is
        // page-aligned, and MADV_HUGEPAGE changes no contents; an error
        // (no THP support) only leaves the pages small.
        unsafe {
            libc::madvise(
                first as *mut libc::c_void,
                last - first,
                libc::MADV_HUGEPAGE,
            );
        }
    }
}

/// Huge pages are only asked for on Linux.
#[cfg(all(not(target_os = "linux"), not(tollgate_loom)))]
fn advise_huge_pages<T>(_slots: &[T]) {}

impl<K, S> Drop for Table<K, S> {
    fn drop(&mut self) {
        // Without anything to drop, the walk (which would fault in every
        // page of a large table) is skipped.
        if mem::needs_drop::<K>() || mem::needs_drop::<S>() {
            for slot in self.slots() {
                // Relaxed: `&mut self` means no other thread holds the table.
                if slot.tag.load(Ordering::Relaxed) & OCCUPIED != 0 {
                    // SAFETY: an occupied slot's cells are initialised, and
                    // `&mut self` means no other thread can touch them.
                    unsafe {
                        slot.key.with_mut(|k| (*k).assume_init_drop());
                        slot.state.with_mut(|s| (*s).assume_init_drop());
                    }
                }
            }
        }
        self.free();
    }
}

impl<K, S> Table<K, S> {
    /// Frees the slots' memory (their contents already dropped).
    #[cfg(not(tollgate_loom))]
    fn free(&mut self) {
        // SAFETY: allocated in `new` with this layout; no slot is used
        // after this.
        unsafe { dealloc(self.raw.as_ptr(), self.layout) };
    }

    /// Frees the slots' box (their contents already dropped: the cells are
    /// `MaybeUninit`, so dropping the box drops no key or state twice).
    #[cfg(tollgate_loom)]
    fn free(&mut self) {
        let slots = std::ptr::slice_from_raw_parts_mut(self.slots.as_ptr(), self.len);
        // SAFETY: leaked from this box in `new`; no slot is used after this.
        drop(unsafe { Box::from_raw(slots) });
    }
}
