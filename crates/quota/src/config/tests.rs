//! The unit tests of `config.rs`.

use super::*;

/// Every key of the reference's format, the ignored ones included.
const REFERENCE_STYLE: &str = "\
version: 3
metrics_enabled: true
admin_port: 8080
filler_frequency_millis: 100
global_default_bucket:
  size: 7
  fill_rate: 3
namespaces:
  plain:
    name: plain
    buckets:
      first:
        name: first
        namespace: plain
        fill_rate: 250
        wait_timeout_millis: 1234
        max_idle_millis: 5000
        max_debt_millis: 20000
      defaults_only:
        size: 100
  with_dynamic:
    max_dynamic_buckets: 20
    dynamic_bucket_template:
      fill_rate: 400
      max_tokens_per_request: 9
  with_default:
    default_bucket: {fill_rate: 600, wait_timeout_millis: 4321, max_idle_millis: 100}
";

#[test]
fn the_reference_format_loads_with_its_defaults() {
    let c = QuotaConfig::from_yaml(REFERENCE_STYLE).unwrap();
    let g = c.global_default_bucket.as_ref().unwrap();
    assert_eq!((g.size, g.fill_rate, g.max_tokens_per_request), (7, 3.0, 3));
    let first = &c.namespaces["plain"].buckets["first"];
    assert_eq!(first.size, 100);
    assert_eq!(first.fill_rate, 250.0);
    assert_eq!(first.wait_timeout, Duration::from_millis(1234));
    assert_eq!(first.max_idle, Some(Duration::from_millis(5000)));
    assert_eq!(first.max_debt, Duration::from_secs(20));
    assert_eq!(first.max_tokens_per_request, 250);
    let d = &c.namespaces["plain"].buckets["defaults_only"];
    assert_eq!(
        (d.size, d.fill_rate, d.wait_timeout, d.max_idle, d.max_debt),
        (
            100,
            50.0,
            Duration::from_secs(1),
            None,
            Duration::from_secs(10)
        )
    );
    let dy = &c.namespaces["with_dynamic"];
    assert_eq!(dy.max_dynamic_buckets, 20);
    assert_eq!(
        dy.dynamic_bucket_template
            .as_ref()
            .unwrap()
            .max_tokens_per_request,
        9
    );
    assert!(dy.default_bucket.is_none());
    let de = c.namespaces["with_default"]
        .default_bucket
        .as_ref()
        .unwrap();
    assert_eq!(de.max_idle, Some(Duration::from_millis(100)));
    assert_eq!(QuotaConfig::from_yaml("").unwrap(), QuotaConfig::default());
}

fn err(yaml: &str) -> String {
    QuotaConfig::from_yaml(yaml).unwrap_err().to_string()
}

#[test]
fn errors_name_the_namespace_bucket_and_field() {
    assert_eq!(
            err("namespaces:\n  a:\n    buckets:\n      b: {fill_rate: -2}\n"),
            "namespace \"a\": bucket \"b\": fill_rate: must be between 0.001 and 1000000000000 per second, got -2"
        );
    assert_eq!(
            err("namespaces:\n  a:\n    dynamic_bucket_template: {max_debt_millis: -1}\n"),
            "namespace \"a\": bucket \"dynamic_bucket_template\": max_debt_millis: must not be negative, got -1"
        );
    assert_eq!(
        err("global_default_bucket: {wait_timeout_millis: -5}\n"),
        "bucket \"global_default_bucket\": wait_timeout_millis: must not be negative, got -5"
    );
    assert_eq!(
        err("namespaces:\n  a:\n    buckets:\n      b: {max_tokens_per_request: -1}\n"),
        "namespace \"a\": bucket \"b\": max_tokens_per_request: must not be negative, got -1"
    );
    assert_eq!(
        err("namespaces:\n  a:\n    max_dynamic_buckets: -4\n"),
        "namespace \"a\": max_dynamic_buckets: must not be negative, got -4"
    );
    assert_eq!(
            err("namespaces:\n  a:\n    default_bucket: {}\n    dynamic_bucket_template: {}\n"),
            "namespace \"a\": default_bucket: a namespace may have a default bucket or a dynamic_bucket_template, not both"
        );
    assert_eq!(
        err("namespaces:\n  a:\n    name: b\n"),
        "namespace \"a\": name: \"b\" differs from the namespace's key"
    );
    assert_eq!(
        err("namespaces:\n  \"\":\n    buckets: {}\n"),
        "namespace \"\": name: empty; a name needs at least one character"
    );
    let long = "x".repeat(257);
    assert_eq!(
        err(&format!(
            "namespaces:\n  a:\n    buckets:\n      {long}: {{}}\n"
        )),
        format!("namespace \"a\": bucket \"{long}\": name: 257 bytes long, longer than 256")
    );
    assert_eq!(
        err("namespaces:\n  ___GLOBAL___:\n    buckets: {}\n"),
        "namespace \"___GLOBAL___\": name: reserved for the default buckets"
    );
    assert_eq!(
        err("namespaces:\n  a:\n    buckets:\n      ___DEFAULT_BUCKET___: {}\n"),
        "namespace \"a\": bucket \"___DEFAULT_BUCKET___\": name: reserved for the default buckets"
    );
    assert_eq!(
        err("namespaces:\n  a:\n    bukkets: {}\n"),
        "invalid quota configuration YAML"
    );
    let e = QuotaConfig::from_yaml("namespaces:\n  a:\n    bukkets: {}\n").unwrap_err();
    assert!(std::error::Error::source(&e)
        .unwrap()
        .to_string()
        .contains("bukkets"));
}

#[test]
fn fractional_rates_are_kept() {
    let c = QuotaConfig::from_yaml("global_default_bucket: {fill_rate: 0.25, size: 1}\n").unwrap();
    let g = c.global_default_bucket.unwrap();
    assert_eq!((g.fill_rate, g.max_tokens_per_request), (0.25, 1));
    assert_eq!(g.settings().rate().ops_per_sec(), 0.25);
}

#[test]
fn the_store_section_takes_a_url_or_a_clusters_seeds_and_a_ca() {
    let store = |yaml: &str| {
        QuotaConfig::from_yaml(&format!("{yaml}\nglobal_default_bucket: {{}}\n"))
            .map(|c| c.store().cloned())
            .map_err(|e| e.to_string())
    };
    let seeds = ["redis://10.0.0.1:6379", "redis://10.0.0.2:6379"];
    let cluster = QuotaStore::cluster(seeds).unwrap();
    assert_eq!(
        store("store: {cluster: [\"redis://10.0.0.1:6379\", \"redis://10.0.0.2:6379\"]}"),
        Ok(Some(cluster.clone()))
    );
    assert_eq!(
        store("store: {url: \"redis://10.0.0.1:6379,redis://10.0.0.2:6379\"}"),
        Ok(Some(cluster))
    );
    assert_eq!(
        store("store: {url: \"rediss://h:1\", ca: /etc/redis/ca.pem}"),
        Ok(Some(
            QuotaStore::new("rediss://h:1")
                .unwrap()
                .ca("/etc/redis/ca.pem")
        ))
    );
    for both_or_neither in [
        "store: {prefix: x}",
        "store: {url: \"redis://h:1\", cluster: [\"redis://h:2\"]}",
    ] {
        assert_eq!(
            store(both_or_neither),
            Err("store: give either a url or a cluster seed list".to_owned())
        );
    }
}
