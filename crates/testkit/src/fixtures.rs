//! The Doorman resource templates the tests write alike.

/// A lease server configuration with one template for every resource
/// (`identifier_glob: "*"`): `capacity` shared by FAIR_SHARE, leases of
/// `lease_length` seconds refreshed every `refresh_interval` seconds, and
/// `learning_mode_duration` seconds of learning mode.
///
/// ```
/// let yaml = tollgate_testkit::fixtures::fair_share(100, 30, 5, 0);
/// assert!(yaml.contains("capacity: 100"));
/// ```
pub fn fair_share(
    capacity: u64,
    lease_length: u64,
    refresh_interval: u64,
    learning_mode_duration: u64,
) -> String {
    format!(
        r#"
resources:
  - identifier_glob: "*"
    capacity: {capacity}
    algorithm: {{kind: FAIR_SHARE, lease_length: {lease_length}, refresh_interval: {refresh_interval}, learning_mode_duration: {learning_mode_duration}}}
"#
    )
}
