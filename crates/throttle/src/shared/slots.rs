//! Which keys share a Redis Cluster slot: a key's hash tag, and the items
//! of a call grouped by it (a script runs on the keys of one slot).

use super::script::Item;

pub(super) use tollgate_service::redis_link::hash_tag;

/// The indices of `items` grouped by hash tag, groups in order of first
/// appearance, items in order within each.
pub(super) fn groups(items: &[Item]) -> Vec<Vec<usize>> {
    let mut groups: Vec<(&str, Vec<usize>)> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let tag = hash_tag(&item.key);
        match groups.iter_mut().find(|(t, _)| *t == tag) {
            Some((_, g)) => g.push(i),
            None => groups.push((tag, vec![i])),
        }
    }
    groups.into_iter().map(|(_, g)| g).collect()
}

/// `items` split into groups of one hash tag each.
pub(super) fn groups_of(items: Vec<Item>) -> Vec<Vec<Item>> {
    groups(&items)
        .into_iter()
        .map(|g| g.into_iter().map(|i| items[i].clone()).collect())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared::script::{Params, Role};
    use crate::{FixedWindow, Limit};
    use std::time::Duration;

    #[test]
    fn the_hash_tag_is_what_redis_hashes() {
        assert_eq!(hash_tag("p:{alice}:rule:fw:1:2:h"), "alice");
        assert_eq!(hash_tag("p:{a}b}:x"), "a");
        assert_eq!(hash_tag("p:{}:x"), "p:{}:x");
        assert_eq!(hash_tag("no-tag"), "no-tag");
        assert_eq!(hash_tag("p:{open"), "p:{open");
    }

    #[test]
    fn items_group_by_tag_in_order_of_first_appearance() {
        let limit =
            Limit::FixedWindow(FixedWindow::new(1, Duration::from_secs(1)).expect("a window"));
        let item = |key: &str| Item {
            key: key.to_owned(),
            params: Params::of(&limit).expect("kept"),
            role: Role::Hard,
            amount: 1,
            slice: 0,
            slice_ns: 0,
        };
        let items = [
            item("{a}:1"),
            item("{b}:2"),
            item("{a}:3"),
            item("{c}:4"),
            item("{b}:5"),
        ];
        assert_eq!(groups(&items), [vec![0, 2], vec![1, 4], vec![3]]);
    }
}
