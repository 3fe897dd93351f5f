//! How a request descriptor walks its domain's tree to a node.
//!
//! # Implementation notes
//!
//! For entry `i` at the current level: the child `key_value`; else the
//! first wildcard child (in configuration order) whose pattern, split on
//! `*`, matches `key_value` (prefix, suffix and the middle parts in
//! order); else the value-less child `key`. No match ends the walk with no
//! limit. A match with children moves down for entry `i + 1`; one without
//! ends the walk. The limits are those of the node the **last** entry
//! matched, so a request longer than the tree matches nothing and one
//! shorter takes the limits where it ends (the reference's rule).
//!
//! The counter key is `domain_` then `key_value_` per entry, where a
//! wildcard node with `share_threshold` puts its pattern in place of the
//! value, so that every value it matches shares one counter.

use super::config::Node;

/// The node a descriptor's entries lead to (with limits), and the counter
/// key.
pub(crate) fn find<'a>(
    root: &'a Node,
    domain: &str,
    entries: &[(String, String)],
    key: &mut String,
) -> Option<&'a Node> {
    let mut level = root;
    let mut found = None;
    let mut composite = String::new();
    // Share patterns, by entry, once the walk has seen them.
    let mut shares: Vec<Option<&'a str>> = Vec::new();
    for (i, (k, v)) in entries.iter().enumerate() {
        composite.clear();
        composite.push_str(k);
        composite.push('_');
        composite.push_str(v);
        let mut next = level.children.get(&composite);
        let mut wild = false;
        if next.is_none() {
            if let Some((pattern, _)) = level
                .wildcards
                .iter()
                .find(|(_, parts)| wildcard_match(parts, &composite))
            {
                next = level.children.get(pattern);
                wild = true;
            }
        }
        if next.is_none() {
            next = level.children.get(k);
        }
        let Some(node) = next else { break };
        if wild {
            if let Some(share) = &node.share {
                shares.resize(i + 1, None);
                shares[i] = Some(share);
            }
        }
        if i + 1 == entries.len() && !node.rules.is_empty() {
            found = Some(node);
        }
        if node.children.is_empty() {
            break;
        }
        level = node;
    }
    let node = found?;
    key.clear();
    key.push_str(domain);
    key.push('_');
    for (i, (k, v)) in entries.iter().enumerate() {
        key.push_str(k);
        key.push('_');
        key.push_str(shares.get(i).copied().flatten().unwrap_or(v));
        key.push('_');
    }
    Some(node)
}

/// The counter key of an override: the entries as they are.
pub(crate) fn plain_key(domain: &str, entries: &[(String, String)], key: &mut String) {
    key.clear();
    key.push_str(domain);
    key.push('_');
    for (k, v) in entries {
        key.push_str(k);
        key.push('_');
        key.push_str(v);
        key.push('_');
    }
}

/// Whether `value` matches a pattern split on `*` into `parts`.
fn wildcard_match(parts: &[String], value: &str) -> bool {
    let [first, middle @ .., last] = parts else {
        return parts.first().is_some_and(|p| p == value);
    };
    if value.len() < parts.iter().map(String::len).sum::<usize>()
        || !value.starts_with(first.as_str())
        || !value.ends_with(last.as_str())
    {
        return false;
    }
    let mut rest = &value[first.len()..value.len() - last.len()];
    for part in middle {
        match rest.find(part.as_str()) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::wildcard_match;

    fn parts(p: &str) -> Vec<String> {
        p.split('*').map(str::to_owned).collect()
    }

    #[test]
    fn wildcards_match_prefix_suffix_and_middle_in_order() {
        assert!(wildcard_match(&parts("path_/api/*"), "path_/api/users"));
        assert!(wildcard_match(&parts("path_/api/*"), "path_/api/"));
        assert!(!wildcard_match(&parts("path_/api/*"), "path_/web/x"));
        assert!(wildcard_match(&parts("f_*.pdf"), "f_a.pdf"));
        assert!(wildcard_match(&parts("f_a*b*c"), "f_aXbYc"));
        assert!(!wildcard_match(&parts("f_a*b*c"), "f_aXcYb"));
        // The fixed parts may not overlap.
        assert!(!wildcard_match(&parts("f_ab*bc"), "f_abc"));
        assert!(wildcard_match(&parts("exact"), "exact"));
    }
}
