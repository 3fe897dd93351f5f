//! The configuration loader: the reference's load errors, one line each
//! naming file, line and key, and malformed YAML that never panics.

use tollgate_rls::{Algorithm, RlsConfig, Unit};

fn error(yaml: &str) -> String {
    RlsConfig::from_yaml("c.yaml", yaml)
        .unwrap_err()
        .to_string()
}

#[test]
fn the_reference_load_errors_name_file_line_and_key() {
    let cases: &[(&str, &str)] = &[
        ("descriptors: []\n", "c.yaml: config file cannot have empty domain"),
        (
            "domain: d\ndescriptors:\n  - value: v\n",
            "c.yaml:3: descriptors[0]: descriptor has empty key",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    value: b\n  - key: a\n    value: b\n",
            "c.yaml: duplicate descriptor composite key 'd.a_b'",
        ),
        (
            "domain: d\ndescriptors:\n  - key: p\n    descriptors:\n      - key: k\n      - key: k\n",
            "c.yaml: duplicate descriptor composite key 'd.p.k'",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: minutes\n      requests_per_unit: 1\n",
            "c.yaml:3: descriptors[0]: invalid rate limit unit 'minutes'",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {requests_per_unit: 1}\n",
            "c.yaml:3: descriptors[0]: invalid rate limit unit ''",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: unknown, requests_per_unit: 1}\n",
            "c.yaml:3: descriptors[0]: invalid rate limit unit 'unknown'",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, unit: second}\n",
            "c.yaml:3: descriptors[0]: should not specify rate limit unit when unlimited",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{}]}\n",
            "c.yaml:3: descriptors[0]: should not have an empty replaces entry",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, name: n, replaces: [{name: n}]}\n",
            "c.yaml:3: descriptors[0]: replaces should not contain name of same descriptor",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    value: b\n    share_threshold: true\n",
            "c.yaml:3: descriptors[0]: share_threshold can only be used with wildcard values (containing '*'), but found key 'a_b'",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    colour: red\n",
            "c.yaml:3: descriptors[0]: config error, unknown key 'colour'",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    5: x\n",
            "c.yaml:3: descriptors[0]: config error, key is not of type string: 5",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n  - just a string\n",
            "c.yaml:4: descriptors[1]: config error, yaml file contains list of type other than map: just a string",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1.5}\n",
            "c.yaml:4: descriptors[0].rate_limit: error checking config",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    metadata: 7\n",
            "c.yaml:4: descriptors[0].metadata: error parsing metadata: metadata must be a map, not 7",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n   value: b\n",
            "c.yaml:4: error loading config file: did not find expected '-' indicator at line 4 column 4, while parsing a block collection at line 3 column 3",
        ),
    ];
    for (yaml, expected) in cases {
        assert_eq!(&error(yaml), expected, "for:\n{yaml}");
    }
}

#[test]
fn a_second_file_with_the_same_domain_is_refused_unless_merging() {
    let a = "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n";
    let b = "domain: d\ndescriptors:\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 1}\n";
    let e = RlsConfig::from_documents([("a.yaml", a), ("b.yaml", b)], false).unwrap_err();
    assert_eq!(e.to_string(), "b.yaml: duplicate domain 'd' in config file");
    let merged = RlsConfig::from_documents([("a.yaml", a), ("b.yaml", b)], true).unwrap();
    let paths: Vec<String> = merged.rules("d").iter().map(|r| r.path.clone()).collect();
    assert_eq!(paths, ["d.a", "d.b"]);
    // Merging still refuses the same key twice.
    let e = RlsConfig::from_documents([("a.yaml", a), ("a2.yaml", a)], true).unwrap_err();
    assert_eq!(
        e.to_string(),
        "a2.yaml: duplicate descriptor composite key 'd.a'"
    );
}

/// Twenty kinds of malformed YAML: each is one line, names the file, and
/// none panics.
#[test]
fn malformed_yaml_gives_one_line_and_never_panics() {
    let cases: &[(&str, &str)] = &[
        // 1. a tab where indentation is expected
        ("domain: d\ndescriptors:\n\t- key: a\n", "c.yaml:3: error loading config file: found character that cannot start any token"),
        // 2. an unclosed flow map
        ("domain: d\ndescriptors: [{key: a\n", "c.yaml:3: error loading config file: did not find expected ',' or '}'"),
        // 3. an unclosed quote
        ("domain: \"d\ndescriptors: []\n", "c.yaml:3: error loading config file: found unexpected end of stream"),
        // 4. a list at the top
        ("- domain: d\n", "c.yaml:1: error loading config file: the document must be a map with `domain` and `descriptors`, not a list"),
        // 5. a scalar at the top
        ("just text\n", "c.yaml:1: error loading config file: the document must be a map with `domain` and `descriptors`, not \"just text\""),
        // 6. descriptors as a map
        ("domain: d\ndescriptors: {key: a}\n", "c.yaml:2: descriptors: error loading config file: `descriptors` must be a list"),
        // 7. descriptors as a scalar
        ("domain: d\ndescriptors: 5\n", "c.yaml:2: descriptors: error loading config file: `descriptors` must be a list, not 5"),
        // 8. rate_limit as a scalar
        ("domain: d\ndescriptors:\n  - key: a\n    rate_limit: 5\n", "c.yaml:4: descriptors[0].rate_limit: error loading config file: `rate_limit` must be a map, not 5"),
        // 9. a negative requests_per_unit
        ("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: -1}\n", "c.yaml:4: descriptors[0].rate_limit: error loading config file: `requests_per_unit` must be a whole number from 0 to 4294967295, not -1"),
        // 10. requests_per_unit past 32 bits
        ("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 4294967296}\n", "c.yaml:4: descriptors[0].rate_limit: error loading config file: `requests_per_unit` must be a whole number from 0 to 4294967295, not 4294967296"),
        // 11. requests_per_unit as text
        ("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: many}\n", "c.yaml:4: descriptors[0].rate_limit: error loading config file: `requests_per_unit` must be a whole number from 0 to 4294967295, not many"),
        // 12. a key that is a list (checked as the reference does: its
        // items must be maps)
        ("domain: d\ndescriptors:\n  - key: [a, b]\n", "c.yaml:3: descriptors[0].key: config error, yaml file contains list of type other than map: a"),
        // 13. a flag that is not a boolean
        ("domain: d\ndescriptors:\n  - key: a\n    shadow_mode: sometimes\n", "c.yaml:4: descriptors[0].shadow_mode: error loading config file: must be true or false, not \"sometimes\""),
        // 14. replaces not a list
        ("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: x}\n", "c.yaml:4: descriptors[0].rate_limit: error loading config file: `replaces` must be a list of {name: ...} maps, not x"),
        // 15. replaces items not maps
        ("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [x]}\n", "c.yaml:4: descriptors[0].rate_limit: config error, yaml file contains list of type other than map: x"),
        // 16. a duplicated map key
        ("domain: d\ndomain: e\n", "c.yaml:1: config error, duplicate key 'domain'"),
        // 17. an unknown anchor
        ("domain: *nowhere\n", "c.yaml:1: error loading config file: unknown anchor"),
        // 18. two documents in one file
        ("domain: d\n---\ndomain: e\n", "c.yaml: error loading config file: deserializing from YAML containing more than one document is not supported"),
        // 19. an unknown algorithm
        ("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: leaky}\n", "c.yaml:4: descriptors[0].rate_limit: invalid algorithm 'leaky' (fixed_window, token_bucket, gcra or sliding_window)"),
        // 20. a float at a key the loader ignores
        ("domain: d\nunit: 0.5\ndescriptors: []\n", "c.yaml:2: unit: error checking config"),
    ];
    for (i, (yaml, expected)) in cases.iter().enumerate() {
        let got = std::panic::catch_unwind(|| error(yaml))
            .unwrap_or_else(|_| panic!("case {} panicked", i + 1));
        assert!(
            !got.contains('\n'),
            "case {}: more than one line: {got}",
            i + 1
        );
        assert!(
            got.starts_with(expected),
            "case {}:\n  got      {got}\n  expected {expected}",
            i + 1
        );
    }
}

#[test]
fn the_extensions_read_lists_of_limits_and_algorithms() {
    let config = RlsConfig::from_yaml(
        "c.yaml",
        "domain: d\ndescriptors:\n  - key: user\n    rate_limit:\n      - {unit: second, requests_per_unit: 10, algorithm: token_bucket}\n      - {unit: day, requests_per_unit: 1000, name: daily}\n",
    )
    .unwrap();
    let rules = config.rules("d");
    assert_eq!(rules.len(), 2);
    assert_eq!(
        (rules[0].unit, rules[0].algorithm),
        (Some(Unit::Second), Algorithm::TokenBucket)
    );
    assert_eq!(
        (rules[1].unit, rules[1].algorithm, rules[1].name.as_str()),
        (Some(Unit::Day), Algorithm::FixedWindow, "daily")
    );
}

#[test]
fn a_directory_loads_every_file_in_name_order() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.yaml"), "domain: a\n").unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    std::fs::write(dir.path().join("sub/b.yml"), "domain: b\n").unwrap();
    std::fs::write(dir.path().join(".swp"), "not: [yaml").unwrap();
    let config = RlsConfig::load(dir.path(), false).unwrap();
    assert_eq!(config.domains(), ["a", "b"]);
    std::fs::write(dir.path().join("c.yaml"), "domain: a\n").unwrap();
    let e = RlsConfig::load(dir.path(), false).unwrap_err();
    assert_eq!(e.file(), dir.path().join("c.yaml").display().to_string());
}
