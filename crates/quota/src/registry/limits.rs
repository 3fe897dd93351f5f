//! The server-wide cap on dynamic buckets, and the refusal when a cap is
//! reached.

use crate::config::QuotaConfig;

/// A dynamic-bucket cap was reached: the namespace's own, or the
/// server-wide one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TooManyBuckets {
    /// The cap.
    pub(crate) cap: u64,
    /// Whether it is the server-wide cap ([`QuotaLimits::max_dynamic_buckets`]).
    pub(crate) server_wide: bool,
}

/// Server-wide limits that the configuration cannot raise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaLimits {
    /// The most dynamic buckets alive at once, all namespaces together
    /// (default [`QuotaLimits::DEFAULT_MAX_DYNAMIC_BUCKETS`]). A namespace's
    /// `max_dynamic_buckets` caps it further; 0 there means no cap of its
    /// own, the reference's "unlimited", so this one bounds memory. With
    /// the buckets in Redis ([`Quota::with_store`](crate::Quota::with_store))
    /// it holds per server, on the dynamic buckets each server answers
    /// for (its own, which [`OnError::Local`](crate::OnError::Local)
    /// decides on).
    pub max_dynamic_buckets: u64,
}

impl QuotaLimits {
    /// The default server-wide cap on live dynamic buckets: a million,
    /// about 0.5 GB with names of a few dozen bytes.
    pub const DEFAULT_MAX_DYNAMIC_BUCKETS: u64 = 1_000_000;

    /// Why the server-wide cap may refuse buckets that `config` allows, or
    /// `None` when the namespaces' own caps add up to no more than it: the
    /// namespaces with a template and no cap of their own, or the sum of
    /// their caps.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate_quota::QuotaConfig;
    /// use tollgate_quota::QuotaLimits;
    ///
    /// let limits = QuotaLimits { max_dynamic_buckets: 1000 };
    /// let capped = QuotaConfig::from_yaml(
    ///     "namespaces:\n  ips:\n    max_dynamic_buckets: 10\n    dynamic_bucket_template: {}\n",
    /// )?;
    /// assert_eq!(limits.binds(&capped), None);
    /// let open = QuotaConfig::from_yaml("namespaces:\n  ips:\n    dynamic_bucket_template: {}\n")?;
    /// assert_eq!(
    ///     limits.binds(&open).as_deref(),
    ///     Some("namespace \"ips\" has no max_dynamic_buckets of its own")
    /// );
    /// # Ok::<(), tollgate_quota::QuotaConfigError>(())
    /// ```
    pub fn binds(&self, config: &QuotaConfig) -> Option<String> {
        let dynamic = || {
            config
                .namespaces
                .iter()
                .filter(|(_, ns)| ns.dynamic_bucket_template.is_some())
        };
        let open: Vec<&str> = dynamic()
            .filter(|(_, ns)| ns.max_dynamic_buckets == 0)
            .map(|(name, _)| name.as_str())
            .collect();
        match open.as_slice() {
            [] => {}
            [one] => {
                return Some(format!(
                    "namespace {one:?} has no max_dynamic_buckets of its own"
                ))
            }
            many => {
                return Some(format!(
                    "namespaces {many:?} have no max_dynamic_buckets of their own"
                ))
            }
        }
        let sum = dynamic().fold(0u64, |sum, (_, ns)| {
            sum.saturating_add(ns.max_dynamic_buckets)
        });
        (sum > self.max_dynamic_buckets)
            .then(|| format!("the namespaces' max_dynamic_buckets add up to {sum}"))
    }
}

impl Default for QuotaLimits {
    fn default() -> QuotaLimits {
        QuotaLimits {
            max_dynamic_buckets: QuotaLimits::DEFAULT_MAX_DYNAMIC_BUCKETS,
        }
    }
}
