//! Which bucket serves a (namespace, name) pair, in the reference
//! quotaservice's lookup order.

use crate::config::{BucketConfig, QuotaConfig, DEFAULT_BUCKET_NAME, GLOBAL_NAMESPACE};

/// Which configuration a live bucket follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BucketKind {
    /// A bucket named in the namespace's `buckets`.
    Named,
    /// The namespace's default bucket.
    NamespaceDefault,
    /// A bucket made from the namespace's dynamic template.
    Dynamic,
    /// The global default bucket.
    GlobalDefault,
}

impl BucketKind {
    /// The lower-case name used in listings.
    pub fn as_str(self) -> &'static str {
        match self {
            BucketKind::Named => "named",
            BucketKind::NamespaceDefault => "namespace_default",
            BucketKind::Dynamic => "dynamic",
            BucketKind::GlobalDefault => "global_default",
        }
    }
}

/// The bucket that serves a (namespace, name) pair under a configuration,
/// in the reference quotaservice's lookup order. In a configured namespace:
/// the named bucket, else a dynamic bucket from the namespace's template,
/// else the namespace's default bucket, else none. In a namespace that is
/// not configured: the global default bucket, else none. `None`: no bucket.
///
/// The global default bucket never serves a configured namespace: a name
/// a namespace does not know is refused there, as the reference does.
///
/// Returns the kind, the namespace and bucket name it is kept under, and
/// its configuration.
pub fn resolve<'a>(
    config: &'a QuotaConfig,
    namespace: &'a str,
    name: &'a str,
) -> Option<(BucketKind, &'a str, &'a str, &'a BucketConfig)> {
    if let Some(ns) = config.namespaces.get(namespace) {
        if let Some(b) = ns.buckets.get(name) {
            return Some((BucketKind::Named, namespace, name, b));
        }
        if let Some(b) = &ns.dynamic_bucket_template {
            return Some((BucketKind::Dynamic, namespace, name, b));
        }
        return ns.default_bucket.as_ref().map(|b| {
            (
                BucketKind::NamespaceDefault,
                namespace,
                DEFAULT_BUCKET_NAME,
                b,
            )
        });
    }
    config.global_default_bucket.as_ref().map(|b| {
        (
            BucketKind::GlobalDefault,
            GLOBAL_NAMESPACE,
            DEFAULT_BUCKET_NAME,
            b,
        )
    })
}
