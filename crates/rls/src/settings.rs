//! [`RlsSettings`]: the reference's settings that change answers, each a
//! flag of `tollgate rls` and read from the reference's environment
//! variable too.

/// The reference's settings that change answers.
#[derive(Debug, Clone, PartialEq)]
pub struct RlsSettings {
    /// Send `RateLimit-Limit`, `-Remaining` and `-Reset` headers
    /// (`LIMIT_RESPONSE_HEADERS_ENABLED`).
    pub response_headers: bool,
    /// The limit header's name (`LIMIT_LIMIT_HEADER`).
    pub limit_header: String,
    /// The remaining header's name (`LIMIT_REMAINING_HEADER`).
    pub remaining_header: String,
    /// The reset header's name (`LIMIT_RESET_HEADER`).
    pub reset_header: String,
    /// Answer OK overall whatever the statuses say (`SHADOW_MODE`).
    pub shadow_mode: bool,
    /// Every descriptor is a quota descriptor (`QUOTA_MODE`).
    pub quota_mode: bool,
    /// When any descriptor of a request would go over, charge only those
    /// that go over (`STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`).
    pub stop_increment_when_over_limit: bool,
    /// The share of a limit past which a hit counts as near the limit, for
    /// the `near_limit` metric (`NEAR_LIMIT_RATIO`).
    pub near_limit_ratio: f64,
    /// Most keys each counter table holds (the least recently used go
    /// first past it).
    pub max_keys: usize,
}

impl Default for RlsSettings {
    fn default() -> RlsSettings {
        RlsSettings {
            response_headers: false,
            limit_header: "RateLimit-Limit".to_owned(),
            remaining_header: "RateLimit-Remaining".to_owned(),
            reset_header: "RateLimit-Reset".to_owned(),
            shadow_mode: false,
            quota_mode: false,
            stop_increment_when_over_limit: false,
            near_limit_ratio: 0.8,
            max_keys: RlsSettings::DEFAULT_MAX_KEYS,
        }
    }
}

impl RlsSettings {
    /// The default of [`max_keys`](Self::max_keys).
    pub const DEFAULT_MAX_KEYS: usize = 1 << 20;
}
