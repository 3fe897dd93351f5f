//! The demand index: every lease's wants, has and subclients, ordered by
//! wants per subclient, with subtree sums.
//!
//! # Implementation notes
//!
//! A treap (a binary search tree whose nodes also carry a random priority
//! and are heap-ordered by it, so its expected depth is `O(log n)` whatever
//! the insertion order) stored in an arena: node `i` is the lease in the
//! store's slot `i`, and links are slot numbers with [`NIL`] for "none".
//!
//! * Key: `(wants / subclients, slot)`, compared with `f64::total_cmp` then
//!   slot, so keys are unique and the order is total even on NaN.
//! * Augmentation: every node holds the sums of `wants`, `has` and
//!   `subclients` over its subtree. Only [`DemandIndex::pull`] writes them,
//!   from the node's own values and its children's sums.
//! * Float drift: no sum is ever updated by adding or subtracting a delta;
//!   each is recomputed from its children whenever anything below it changes.
//!   So a sum is always the sum of the *current* values in the tree's
//!   current shape, with rounding error at most about `depth * eps * sum`,
//!   and no error accumulates over the history of updates. (An order of
//!   summation differing from a plain loop is the only difference from a
//!   from-scratch recomputation; nothing needs a periodic rebuild.) Subclient
//!   sums are integers, added with saturation.
//! * Queries descend from the root once, carrying the sums of everything
//!   ordered before the current subtree: the prefix sums at any key come out
//!   in `O(depth)`.
//!
//! Priorities come from a fixed-seed SplitMix64 generator: the shape is
//! reproducible from run to run, and clients cannot choose it (they choose
//! keys, not priorities).

use std::cmp::Ordering;

/// A slot number, the link between nodes.
pub(super) type Slot = u32;

/// The absent link.
pub(super) const NIL: Slot = Slot::MAX;

/// The per-lease values the index keeps, and aggregates.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct Demand {
    pub(super) wants: f64,
    pub(super) has: f64,
    pub(super) subclients: u64,
}

impl Demand {
    /// Wants per subclient: the sort key.
    fn ratio(&self) -> f64 {
        self.wants / self.subclients as f64
    }

    fn plus(self, other: Demand) -> Demand {
        Demand {
            wants: self.wants + other.wants,
            has: self.has + other.has,
            subclients: self.subclients.saturating_add(other.subclients),
        }
    }
}

#[derive(Clone, Debug)]
struct Node {
    /// This lease's values.
    own: Demand,
    /// `own.ratio()`, cached: the first half of the key.
    ratio: f64,
    /// Heap priority: a parent's is at least its children's.
    priority: u64,
    left: Slot,
    right: Slot,
    /// Sums of `own` over this node's subtree, itself included.
    sums: Demand,
}

impl Node {
    /// A node holding `own`, with no children yet, at heap priority
    /// `priority`.
    fn leaf(own: Demand, priority: u64) -> Node {
        Node {
            own,
            ratio: own.ratio(),
            priority,
            left: NIL,
            right: NIL,
            sums: own,
        }
    }
}

/// Leases ordered by wants per subclient, with subtree sums of wants, has and
/// subclients. See the module notes.
#[derive(Clone, Debug)]
pub(super) struct DemandIndex {
    /// By slot. A slot not in the tree holds a stale node nobody links to.
    nodes: Vec<Node>,
    root: Slot,
    /// SplitMix64 state for priorities.
    seed: u64,
}

impl Default for DemandIndex {
    fn default() -> Self {
        DemandIndex {
            nodes: Vec::new(),
            root: NIL,
            seed: 0x853c_49e6_748f_ea9b,
        }
    }
}

impl DemandIndex {
    /// The sums over every lease in the index.
    pub(super) fn total(&self) -> Demand {
        self.sums(self.root)
    }

    /// Adds `slot`, which must not be in the index, with values `own`.
    pub(super) fn insert(&mut self, slot: Slot, own: Demand) {
        let index = slot as usize;
        if self.nodes.len() <= index {
            self.nodes.resize_with(index + 1, || Node {
                own: Demand::default(),
                ratio: 0.0,
                priority: 0,
                left: NIL,
                right: NIL,
                sums: Demand::default(),
            });
        }
        let priority = self.next_priority();
        self.nodes[index] = Node::leaf(own, priority);
        self.root = self.insert_at(self.root, slot);
    }

    /// Removes `slot`, which must be in the index.
    pub(super) fn remove(&mut self, slot: Slot) {
        self.root = self.remove_at(self.root, slot);
    }

    /// Replaces the values of `slot`, which must be in the index.
    pub(super) fn update(&mut self, slot: Slot, own: Demand) {
        let node = &self.nodes[slot as usize];
        if node.ratio.total_cmp(&own.ratio()) == Ordering::Equal {
            // Same key, same place: refresh the sums on the path to it.
            self.nodes[slot as usize].own = own;
            self.pull_path(self.root, slot);
        } else {
            self.remove(slot);
            let priority = self.nodes[slot as usize].priority;
            self.nodes[slot as usize] = Node::leaf(own, priority);
            self.root = self.insert_at(self.root, slot);
        }
    }

    /// The sums over the leases whose wants per subclient is at most `ratio`.
    pub(super) fn up_to(&self, ratio: f64) -> Demand {
        let mut before = Demand::default();
        let mut t = self.root;
        while t != NIL {
            let node = &self.nodes[t as usize];
            if node.ratio <= ratio {
                // This node and its left subtree are in; look right for more.
                before = before.plus(self.sums(node.left)).plus(node.own);
                t = node.right;
            } else {
                t = node.left;
            }
        }
        before
    }

    /// The weighted max-min fair water level for `capacity`: the `L` with
    /// `sum_i min(wants_i, L * subclients_i) = capacity`, or infinity when
    /// the wants fit.
    ///
    /// With leases sorted by ratio `r_i = wants_i / subclients_i`, a lease is
    /// *saturated* (gets its wants) when `f(r_i) <= capacity`, where
    /// `f(x) = sum_i min(wants_i, x * subclients_i)` is nondecreasing; at
    /// the lease `j`, `f(r_j) = W(..=j) + r_j * (S - S(..=j))` from the prefix
    /// sums `W` and `S`. The saturated leases are thus a prefix of the
    /// order, found in one descent, and the others share what is left:
    /// `L = (capacity - W(prefix)) / (S - S(prefix))`.
    pub(super) fn water_level(&self, capacity: f64) -> f64 {
        let total = self.total();
        if total.wants <= capacity {
            return f64::INFINITY;
        }
        let mut saturated = Demand::default();
        let mut t = self.root;
        while t != NIL {
            let node = &self.nodes[t as usize];
            let through = saturated.plus(self.sums(node.left)).plus(node.own);
            let rest = total.subclients.saturating_sub(through.subclients);
            if through.wants + node.ratio * rest as f64 <= capacity {
                saturated = through;
                t = node.right;
            } else {
                t = node.left;
            }
        }
        let rest = total.subclients.saturating_sub(saturated.subclients);
        if rest == 0 {
            // Only reachable through rounding: everyone is saturated.
            return f64::INFINITY;
        }
        (capacity - saturated.wants) / rest as f64
    }

    fn sums(&self, t: Slot) -> Demand {
        if t == NIL {
            Demand::default()
        } else {
            self.nodes[t as usize].sums
        }
    }

    /// Recomputes `t`'s sums from its own values and its children's sums.
    fn pull(&mut self, t: Slot) {
        let node = &self.nodes[t as usize];
        let sums = self
            .sums(node.left)
            .plus(node.own)
            .plus(self.sums(node.right));
        self.nodes[t as usize].sums = sums;
    }

    /// The key order: ratio, then slot.
    fn cmp_keys(&self, a: Slot, b: Slot) -> Ordering {
        let (x, y) = (&self.nodes[a as usize], &self.nodes[b as usize]);
        x.ratio.total_cmp(&y.ratio).then(a.cmp(&b))
    }

    /// Inserts the detached node `x` into the subtree `t`; returns its root.
    fn insert_at(&mut self, t: Slot, x: Slot) -> Slot {
        if t == NIL {
            return x;
        }
        if self.nodes[x as usize].priority > self.nodes[t as usize].priority {
            // `x` goes here: everything in `t` hangs below it.
            let (left, right) = self.split(t, x);
            let node = &mut self.nodes[x as usize];
            node.left = left;
            node.right = right;
            self.pull(x);
            return x;
        }
        if self.cmp_keys(x, t) == Ordering::Less {
            let left = self.insert_at(self.nodes[t as usize].left, x);
            self.nodes[t as usize].left = left;
        } else {
            let right = self.insert_at(self.nodes[t as usize].right, x);
            self.nodes[t as usize].right = right;
        }
        self.pull(t);
        t
    }

    /// Removes `x` from the subtree `t`; returns its root.
    fn remove_at(&mut self, t: Slot, x: Slot) -> Slot {
        if t == NIL {
            debug_assert!(false, "slot {x} is not in the index");
            return NIL;
        }
        let node = &self.nodes[t as usize];
        let (left, right) = (node.left, node.right);
        match self.cmp_keys(x, t) {
            Ordering::Equal => return self.merge(left, right),
            Ordering::Less => {
                let left = self.remove_at(left, x);
                self.nodes[t as usize].left = left;
            }
            Ordering::Greater => {
                let right = self.remove_at(right, x);
                self.nodes[t as usize].right = right;
            }
        }
        self.pull(t);
        t
    }

    /// Recomputes the sums on the path from `t` down to `x`.
    fn pull_path(&mut self, t: Slot, x: Slot) {
        if t == NIL {
            debug_assert!(false, "slot {x} is not in the index");
            return;
        }
        match self.cmp_keys(x, t) {
            Ordering::Equal => {}
            Ordering::Less => self.pull_path(self.nodes[t as usize].left, x),
            Ordering::Greater => self.pull_path(self.nodes[t as usize].right, x),
        }
        self.pull(t);
    }

    /// Splits the subtree `t` into the keys before `x`'s and the keys after.
    fn split(&mut self, t: Slot, x: Slot) -> (Slot, Slot) {
        if t == NIL {
            return (NIL, NIL);
        }
        if self.cmp_keys(t, x) == Ordering::Less {
            let (middle, right) = self.split(self.nodes[t as usize].right, x);
            self.nodes[t as usize].right = middle;
            self.pull(t);
            (t, right)
        } else {
            let (left, middle) = self.split(self.nodes[t as usize].left, x);
            self.nodes[t as usize].left = middle;
            self.pull(t);
            (left, t)
        }
    }

    /// Joins two subtrees, every key of `a` before every key of `b`.
    fn merge(&mut self, a: Slot, b: Slot) -> Slot {
        if a == NIL {
            return b;
        }
        if b == NIL {
            return a;
        }
        if self.nodes[a as usize].priority >= self.nodes[b as usize].priority {
            let right = self.merge(self.nodes[a as usize].right, b);
            self.nodes[a as usize].right = right;
            self.pull(a);
            a
        } else {
            let left = self.merge(a, self.nodes[b as usize].left);
            self.nodes[b as usize].left = left;
            self.pull(b);
            b
        }
    }

    /// SplitMix64.
    fn next_priority(&mut self) -> u64 {
        self.seed = self.seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.seed;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
impl DemandIndex {
    /// Checks the search order, the heap order and every sum; returns the
    /// number of nodes in the tree.
    pub(super) fn check(&self) -> usize {
        self.check_at(self.root, None, None)
    }

    fn check_at(&self, t: Slot, low: Option<Slot>, high: Option<Slot>) -> usize {
        if t == NIL {
            return 0;
        }
        let node = &self.nodes[t as usize];
        assert_eq!(node.ratio.total_cmp(&node.own.ratio()), Ordering::Equal);
        if let Some(low) = low {
            assert_eq!(self.cmp_keys(low, t), Ordering::Less, "search order");
        }
        if let Some(high) = high {
            assert_eq!(self.cmp_keys(t, high), Ordering::Less, "search order");
        }
        for child in [node.left, node.right] {
            if child != NIL {
                assert!(
                    self.nodes[child as usize].priority <= node.priority,
                    "heap order"
                );
            }
        }
        let expected = self
            .sums(node.left)
            .plus(node.own)
            .plus(self.sums(node.right));
        assert_eq!(node.sums, expected, "sums");
        1 + self.check_at(node.left, low, Some(t)) + self.check_at(node.right, Some(t), high)
    }
}
