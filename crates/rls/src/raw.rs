//! The reference's YAML document read as written: every key checked, every
//! value typed, each error a one-line message with the place it was found.
//!
//! # Implementation notes
//!
//! The documents are read by serde visitors rather than into a generic
//! YAML value so that the YAML reader marks each error with its line: an
//! error raised while a descriptor's map (or a typed value) is read comes
//! back as `descriptors[2].rate_limit: <message> at line L column C`,
//! which `config.rs` turns into `FILE:L: descriptors[2].rate_limit:
//! <message>`. The checks follow envoyproxy/ratelimit's loader: the same
//! allow-list of keys at every depth (a key valid anywhere is accepted, and
//! ignored, where it means nothing), list items that must be maps, leaves
//! that must be strings, whole numbers, booleans or null, and the same
//! message texts. The checks that need the whole tree (duplicate keys, the
//! domain) are `config.rs`'s.

use std::fmt;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_norway::Value;

use super::Algorithm;

/// Visitor methods for every YAML scalar, answering with `$msg` (one `{}`
/// for the value).
macro_rules! not_a_map {
    ($msg:literal) => {
        fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
            Err(ours(format!($msg, v)))
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
            Err(ours(format!($msg, v)))
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
            Err(ours(format!($msg, v)))
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
            Err(ours(format!($msg, v)))
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Err(ours(format!($msg, v)))
        }
    };
}

/// Every key the reference accepts, at any depth; `algorithm` is
/// tollgate's own.
const VALID_KEYS: [&str; 17] = [
    "domain",
    "key",
    "value",
    "descriptors",
    "rate_limit",
    "unit",
    "requests_per_unit",
    "unlimited",
    "shadow_mode",
    "quota_mode",
    "name",
    "replaces",
    "detailed_metric",
    "value_to_metric",
    "share_threshold",
    "metadata",
    "algorithm",
];

/// One YAML document: a domain and its descriptor tree.
#[derive(Debug, Default)]
pub(crate) struct RawRoot {
    pub(crate) domain: String,
    pub(crate) descriptors: Vec<RawDescriptor>,
}

/// One descriptor node.
#[derive(Debug, Default)]
pub(crate) struct RawDescriptor {
    pub(crate) key: String,
    pub(crate) value: String,
    /// None: no `rate_limit`; several when `rate_limit` is a list.
    pub(crate) rate_limits: Vec<RawRateLimit>,
    pub(crate) descriptors: Vec<RawDescriptor>,
    pub(crate) shadow_mode: bool,
    pub(crate) quota_mode: bool,
    pub(crate) share_threshold: bool,
}

/// One `rate_limit` map.
#[derive(Debug, Default, Clone)]
pub(crate) struct RawRateLimit {
    pub(crate) requests_per_unit: u32,
    pub(crate) unit: String,
    pub(crate) unlimited: bool,
    pub(crate) name: String,
    pub(crate) replaces: Vec<String>,
    pub(crate) algorithm: Algorithm,
}

/// The mark that tells this loader's own messages from the YAML reader's
/// (which `config.rs` prefixes with `error loading config file: `).
pub(crate) const OURS: char = '\u{1}';

/// One of this loader's messages as a serde error.
fn ours<E: de::Error>(message: impl fmt::Display) -> E {
    E::custom(format_args!("{OURS}{message}"))
}

/// Go's `%v` of a YAML value, as the reference's messages print it.
fn show(value: &Value) -> String {
    match value {
        Value::Null => "<nil>".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        Value::Sequence(items) => {
            let items: Vec<String> = items.iter().map(show).collect();
            format!("[{}]", items.join(" "))
        }
        Value::Mapping(map) => {
            let pairs: Vec<String> = map
                .iter()
                .map(|(k, v)| format!("{}:{}", show(k), show(v)))
                .collect();
            format!("map[{}]", pairs.join(" "))
        }
        Value::Tagged(tagged) => show(&tagged.value),
    }
}

/// Checks a key: a string, and one the reference knows.
fn check_key(key: &Value) -> Result<&'static str, String> {
    match key {
        Value::String(k) => VALID_KEYS
            .iter()
            .find(|valid| **valid == k)
            .copied()
            .ok_or_else(|| format!("config error, unknown key '{k}'")),
        other => Err(format!(
            "config error, key is not of type string: {}",
            show(other)
        )),
    }
}

/// The next key of a document's or a descriptor's map: checked
/// ([`check_key`]) and not already in `seen`, the keys read so far.
fn next_key<'de, A: MapAccess<'de>>(
    map: &mut A,
    seen: &mut Vec<Value>,
) -> Result<Option<&'static str>, A::Error> {
    let Some(k) = map.next_key::<Value>()? else {
        return Ok(None);
    };
    let name = check_key(&k).map_err(ours)?;
    if seen.contains(&k) {
        return Err(ours(format!("config error, duplicate key '{name}'")));
    }
    seen.push(k);
    Ok(Some(name))
}

/// Reads a value its map does not use: `metadata`'s must be a map, any
/// other is checked as the reference checks it.
fn other_value<'de, A: MapAccess<'de>>(map: &mut A, name: &str) -> Result<(), A::Error> {
    if name == "metadata" {
        map.next_value::<Converted<Metadata>>()?;
    } else {
        map.next_value::<Converted<Checked>>()?;
    }
    Ok(())
}

/// The rest of a YAML list, as generic values.
fn rest_of_list<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<Vec<Value>, A::Error> {
    let mut items = Vec::new();
    while let Some(v) = seq.next_element::<Value>()? {
        items.push(v);
    }
    Ok(items)
}

/// The reference's check of a value it does not read at this place: maps
/// and list items (which must be maps) are checked key by key, leaves must
/// be strings, whole numbers, booleans or null.
fn check_value(value: &Value) -> Result<(), String> {
    match value {
        Value::Null | Value::Bool(_) | Value::String(_) => Ok(()),
        Value::Number(n) if n.is_i64() || n.is_u64() => Ok(()),
        Value::Number(_) => Err("error checking config".to_owned()),
        Value::Sequence(items) => items.iter().try_for_each(|item| match item {
            Value::Mapping(map) => check_map(map),
            other => Err(format!(
                "config error, yaml file contains list of type other than map: {}",
                show(other)
            )),
        }),
        Value::Mapping(map) => check_map(map),
        Value::Tagged(tagged) => check_value(&tagged.value),
    }
}

fn check_map(map: &serde_norway::Mapping) -> Result<(), String> {
    for (k, v) in map {
        if check_key(k)? != "metadata" {
            check_value(v)?;
        }
    }
    Ok(())
}

/// A string leaf: YAML scalars read as their text, as the reference's
/// loader does (`value: 10` is the value "10"), null as "".
fn text(value: &Value, key: &str) -> Result<String, String> {
    check_value(value)?;
    match value {
        Value::Null => Ok(String::new()),
        Value::Bool(b) => Ok(b.to_string()),
        Value::Number(n) => Ok(n.to_string()),
        Value::String(s) => Ok(s.clone()),
        Value::Tagged(tagged) => text(&tagged.value, key),
        _ => Err(format!(
            "error loading config file: `{key}` must be a string, not {}",
            show(value)
        )),
    }
}

/// A boolean leaf (YAML 1.1's words too, as the reference's reader takes
/// them), null as false.
fn flag(value: &Value, key: &str) -> Result<bool, String> {
    check_value(value)?;
    let key = if key.is_empty() {
        String::new()
    } else {
        format!("`{key}` ")
    };
    match value {
        Value::Null => Ok(false),
        Value::Bool(b) => Ok(*b),
        Value::String(s) => match s.to_ascii_lowercase().as_str() {
            "true" | "yes" | "on" | "y" => Ok(true),
            "false" | "no" | "off" | "n" => Ok(false),
            _ => Err(format!(
                "error loading config file: {key}must be true or false, not {s:?}"
            )),
        },
        Value::Tagged(tagged) => flag(&tagged.value, ""),
        _ => Err(format!(
            "error loading config file: {key}must be true or false, not {}",
            show(value)
        )),
    }
}

/// `requests_per_unit`: a whole number that fits 32 bits, null as 0.
fn count(value: &Value) -> Result<u32, String> {
    check_value(value)?;
    match value {
        Value::Null => Ok(0),
        Value::Number(n) => n
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| {
                format!("error loading config file: `requests_per_unit` must be a whole number from 0 to 4294967295, not {n}")
            }),
        Value::Tagged(tagged) => count(&tagged.value),
        other => Err(format!(
            "error loading config file: `requests_per_unit` must be a whole number from 0 to 4294967295, not {}",
            show(other)
        )),
    }
}

/// A `rate_limit` value: one map, or (tollgate's own) a list of them.
fn rate_limits(value: &Value) -> Result<Vec<RawRateLimit>, String> {
    check_value(value)?;
    match value {
        Value::Null => Ok(Vec::new()),
        Value::Mapping(map) => Ok(vec![rate_limit(map)?]),
        Value::Sequence(items) => {
            if items.is_empty() {
                return Err("error loading config file: `rate_limit` is an empty list".to_owned());
            }
            items
                .iter()
                .map(|item| match item {
                    Value::Mapping(map) => rate_limit(map),
                    // check_value has refused every other item.
                    other => Err(show(other)),
                })
                .collect()
        }
        Value::Tagged(tagged) => rate_limits(&tagged.value),
        other => Err(format!(
            "error loading config file: `rate_limit` must be a map, not {}",
            show(other)
        )),
    }
}

fn rate_limit(map: &serde_norway::Mapping) -> Result<RawRateLimit, String> {
    let mut limit = RawRateLimit::default();
    for (k, v) in map {
        match check_key(k)? {
            "requests_per_unit" => limit.requests_per_unit = count(v)?,
            "unit" => limit.unit = text(v, "unit")?,
            "unlimited" => limit.unlimited = flag(v, "unlimited")?,
            "name" => limit.name = text(v, "name")?,
            "replaces" => limit.replaces = replaces(v)?,
            "algorithm" => {
                let name = text(v, "algorithm")?;
                limit.algorithm = Algorithm::from_name(&name).ok_or_else(|| {
                    format!("invalid algorithm '{name}' (fixed_window, token_bucket, gcra or sliding_window)")
                })?;
            }
            "metadata" => {}
            _ => check_value(v)?,
        }
    }
    Ok(limit)
}

/// `replaces`: a list of `{name: …}` maps.
fn replaces(value: &Value) -> Result<Vec<String>, String> {
    check_value(value)?;
    match value {
        Value::Null => Ok(Vec::new()),
        Value::Sequence(items) => items
            .iter()
            .map(|item| {
                let mut name = String::new();
                if let Value::Mapping(map) = item {
                    for (k, v) in map {
                        if check_key(k)? == "name" {
                            name = text(v, "name")?;
                        }
                    }
                }
                Ok(name)
            })
            .collect(),
        other => Err(format!(
            "error loading config file: `replaces` must be a list of {{name: ...}} maps, not {}",
            show(other)
        )),
    }
}

/// A value read as a generic YAML value and converted by `f`, so that an
/// error is marked with the place the value starts.
struct Converted<T>(T);

trait Convert: Sized {
    fn convert(value: &Value) -> Result<Self, String>;
}

impl<'de, T: Convert> Deserialize<'de> for Converted<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Converted inside the visitor, so that the reader marks an error
        // with this value's place rather than its parent's.
        struct V<T>(std::marker::PhantomData<T>);
        impl<T: Convert> V<T> {
            fn done<E: de::Error>(value: Value) -> Result<Converted<T>, E> {
                T::convert(&value).map(Converted).map_err(ours)
            }
        }
        impl<'de, T: Convert> Visitor<'de> for V<T> {
            type Value = Converted<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a YAML value")
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
                Self::done(Value::Bool(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                Self::done(Value::Number(v.into()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Self::done(Value::Number(v.into()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
                Self::done(Value::Number(v.into()))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Self::done(Value::String(v.to_owned()))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Self::done(Value::Null)
            }
            fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
                Self::done(Value::Null)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
                Self::done(Value::Sequence(rest_of_list(seq)?))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out = serde_norway::Mapping::new();
                while let Some((k, v)) = map.next_entry::<Value, Value>()? {
                    out.insert(k, v);
                }
                Self::done(Value::Mapping(out))
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

struct Checked;
impl Convert for Checked {
    fn convert(value: &Value) -> Result<Checked, String> {
        check_value(value).map(|()| Checked)
    }
}

/// The string leaves read where they stand: `Text<F>` is the one named
/// `TEXT_KEYS[F]`.
const TEXT_KEYS: [&str; 3] = ["domain", "key", "value"];
struct Text<const F: usize>(String);
impl<const F: usize> Convert for Text<F> {
    fn convert(value: &Value) -> Result<Text<F>, String> {
        text(value, TEXT_KEYS[F]).map(Text)
    }
}
type DomainText = Text<0>;
type KeyText = Text<1>;
type ValueText = Text<2>;
struct Flag(bool);
impl Convert for Flag {
    fn convert(value: &Value) -> Result<Flag, String> {
        flag(value, "").map(Flag)
    }
}
struct Limits(Vec<RawRateLimit>);
impl Convert for Limits {
    fn convert(value: &Value) -> Result<Limits, String> {
        rate_limits(value).map(Limits)
    }
}
struct Metadata;
impl Convert for Metadata {
    fn convert(value: &Value) -> Result<Metadata, String> {
        match value {
            Value::Null | Value::Mapping(_) => Ok(Metadata),
            other => Err(format!(
                "error parsing metadata: metadata must be a map, not {}",
                show(other)
            )),
        }
    }
}

/// A list of descriptor maps.
struct Descriptors(Vec<RawDescriptor>);

impl<'de> Deserialize<'de> for Descriptors {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Descriptors;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of descriptors")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Descriptors, E> {
                Ok(Descriptors(Vec::new()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Descriptors, A::Error> {
                let mut out = Vec::new();
                while let Some(d) = seq.next_element::<RawDescriptor>()? {
                    out.push(d);
                }
                Ok(Descriptors(out))
            }
            fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<Descriptors, A::Error> {
                Err(ours(
                    "error loading config file: `descriptors` must be a list",
                ))
            }
            not_a_map!("error loading config file: `descriptors` must be a list, not {}");
        }
        d.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for RawDescriptor {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawDescriptor;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a descriptor map")
            }
            fn visit_unit<E: de::Error>(self) -> Result<RawDescriptor, E> {
                Err(ours(
                    "config error, yaml file contains list of type other than map: <nil>",
                ))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<RawDescriptor, A::Error> {
                Err(ours(format!(
                    "config error, yaml file contains list of type other than map: {}",
                    show(&Value::Sequence(rest_of_list(seq)?))
                )))
            }
            not_a_map!("config error, yaml file contains list of type other than map: {}");
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawDescriptor, A::Error> {
                let mut out = RawDescriptor::default();
                let mut seen = Vec::new();
                while let Some(name) = next_key(&mut map, &mut seen)? {
                    match name {
                        "key" => out.key = map.next_value::<Converted<KeyText>>()?.0 .0,
                        "value" => out.value = map.next_value::<Converted<ValueText>>()?.0 .0,
                        "rate_limit" => {
                            out.rate_limits = map.next_value::<Converted<Limits>>()?.0 .0
                        }
                        "descriptors" => out.descriptors = map.next_value::<Descriptors>()?.0,
                        "shadow_mode" => {
                            out.shadow_mode = map.next_value::<Converted<Flag>>()?.0 .0
                        }
                        "quota_mode" => out.quota_mode = map.next_value::<Converted<Flag>>()?.0 .0,
                        "share_threshold" => {
                            out.share_threshold = map.next_value::<Converted<Flag>>()?.0 .0
                        }
                        _ => other_value(&mut map, name)?,
                    }
                }
                out.check().map_err(ours)?;
                Ok(out)
            }
        }
        d.deserialize_any(V)
    }
}

impl RawDescriptor {
    /// The reference's checks of one node, in its order.
    fn check(&self) -> Result<(), String> {
        if self.key.is_empty() {
            return Err("descriptor has empty key".to_owned());
        }
        for limit in &self.rate_limits {
            let unit = super::Unit::from_name(&limit.unit);
            if limit.unlimited {
                if unit.is_some() {
                    return Err("should not specify rate limit unit when unlimited".to_owned());
                }
            } else if unit.is_none() {
                return Err(format!("invalid rate limit unit '{}'", limit.unit));
            }
            for name in &limit.replaces {
                if name.is_empty() {
                    return Err("should not have an empty replaces entry".to_owned());
                }
                if *name == limit.name {
                    return Err("replaces should not contain name of same descriptor".to_owned());
                }
            }
        }
        let composite = self.composite();
        if self.share_threshold && !composite.contains('*') {
            return Err(format!(
                "share_threshold can only be used with wildcard values (containing '*'), but found key '{composite}'"
            ));
        }
        Ok(())
    }

    /// `key`, or `key_value` when it has a value.
    pub(crate) fn composite(&self) -> String {
        if self.value.is_empty() {
            self.key.clone()
        } else {
            format!("{}_{}", self.key, self.value)
        }
    }
}

impl<'de> Deserialize<'de> for RawRoot {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawRoot;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map with `domain` and `descriptors`")
            }
            fn visit_unit<E: de::Error>(self) -> Result<RawRoot, E> {
                Ok(RawRoot::default())
            }
            fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<RawRoot, A::Error> {
                Err(ours(
                    "error loading config file: the document must be a map with `domain` and `descriptors`, not a list",
                ))
            }
            not_a_map!("error loading config file: the document must be a map with `domain` and `descriptors`, not {:?}");
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawRoot, A::Error> {
                let mut out = RawRoot::default();
                let mut seen = Vec::new();
                while let Some(name) = next_key(&mut map, &mut seen)? {
                    match name {
                        "domain" => out.domain = map.next_value::<Converted<DomainText>>()?.0 .0,
                        "descriptors" => out.descriptors = map.next_value::<Descriptors>()?.0,
                        _ => other_value(&mut map, name)?,
                    }
                }
                Ok(out)
            }
        }
        d.deserialize_any(V)
    }
}
