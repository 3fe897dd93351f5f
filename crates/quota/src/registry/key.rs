//! A live bucket's key, found by a request's two names without copying
//! them.

use std::borrow::Borrow;
use std::hash::{Hash, Hasher};

/// A live bucket's key: `namespace:bucket` in one allocation, hashed and
/// compared as the pair of names.
#[derive(Debug)]
pub(super) struct Key {
    text: Box<str>,
    /// Where the namespace ends (the `:`).
    split: usize,
}

impl Key {
    pub(super) fn new(namespace: &str, name: &str) -> Key {
        Key {
            text: key(namespace, name).into_boxed_str(),
            split: namespace.len(),
        }
    }

    /// `namespace:bucket`.
    pub(super) fn as_str(&self) -> &str {
        &self.text
    }
}

/// A key as (namespace, bucket name), owned ([`Key`]) or borrowed
/// (`(&str, &str)`): the map is looked up through `&dyn Pair`, so a
/// request's names need not be copied into a [`Key`] to find their bucket.
pub(super) trait Pair {
    fn pair(&self) -> (&str, &str);
}

impl Pair for Key {
    fn pair(&self) -> (&str, &str) {
        (&self.text[..self.split], &self.text[self.split + 1..])
    }
}

impl Pair for (&str, &str) {
    fn pair(&self) -> (&str, &str) {
        *self
    }
}

// The map's contract: `Key` and `dyn Pair` hash and compare alike, both as
// the pair.
impl Hash for dyn Pair + '_ {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.pair().hash(state);
    }
}

impl PartialEq for dyn Pair + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.pair() == other.pair()
    }
}

impl Eq for dyn Pair + '_ {}

impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.pair().hash(state);
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        self.pair() == other.pair()
    }
}

impl Eq for Key {}

impl<'a> Borrow<dyn Pair + 'a> for Key {
    fn borrow(&self) -> &(dyn Pair + 'a) {
        self
    }
}

/// `namespace:name`, as keys and shares are written.
pub(super) fn key(namespace: &str, name: &str) -> String {
    let mut k = String::with_capacity(namespace.len() + 1 + name.len());
    k.push_str(namespace);
    k.push(':');
    k.push_str(name);
    k
}

#[cfg(test)]
mod tests {
    use std::hash::BuildHasher as _;

    use super::*;

    /// A key hashes and compares as its pair of names, whichever form
    /// holds it, and the split is where the namespace ended, not the first
    /// `:`.
    #[test]
    fn keys_are_pairs() {
        let hasher = std::collections::hash_map::RandomState::new();
        let hash = |k: &dyn Pair| hasher.hash_one(k);
        let owned = Key::new("ns", "b");
        assert_eq!(owned.as_str(), "ns:b");
        assert_eq!(owned.pair(), ("ns", "b"));
        assert_eq!(hash(&owned), hash(&("ns", "b")));
        assert!(&owned as &dyn Pair == &("ns", "b") as &dyn Pair);
        assert!(&owned as &dyn Pair != &("ns", "c") as &dyn Pair);
        let a = Key::new("a:b", "c");
        let b = Key::new("a", "b:c");
        assert_eq!(a.as_str(), b.as_str());
        assert_eq!((a.pair(), b.pair()), (("a:b", "c"), ("a", "b:c")));
        assert!(a != b);
    }
}
