//! A Prometheus registry's metrics as text, for tests to search.

/// Everything `registry` holds, in the text exposition format.
pub(crate) fn gathered(registry: &prometheus::Registry) -> String {
    use prometheus::Encoder;
    let mut out = Vec::new();
    prometheus::TextEncoder::new()
        .encode(&registry.gather(), &mut out)
        .unwrap();
    String::from_utf8(out).unwrap()
}
