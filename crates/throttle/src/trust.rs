//! [`Trust`]: the peers whose word the throttler takes, for the client
//! address a proxy forwards and for a request's criticality.
//!
//! # Implementation notes
//!
//! A trust is a list of networks (an address and a prefix length). A
//! peer's address is compared in its canonical form, so an IPv4 peer seen
//! through an IPv6 socket (`::ffff:10.0.0.1`) matches `10.0.0.0/8`.
//!
//! The client address behind proxies is found the way each proxy appends
//! it: starting from the connection's peer, while the address in hand is
//! a trusted proxy, step to the address that proxy says it received the
//! request from, the last remaining entry of `Forwarded` (its `for=`
//! parameters, RFC 7239) or, without that field, of `X-Forwarded-For`.
//! The first untrusted address is the client; entries left of it were
//! written by the client itself and are never read. An entry a trusted
//! proxy wrote that is not an address (`unknown`, an obfuscated
//! `_identifier`) is the key itself: every client behind it shares it.

use std::fmt;
use std::net::{IpAddr, SocketAddr};

use axum::http::HeaderMap;

use super::error::ValueError;

/// Peers whose forwarded client address or criticality header is
/// believed: none, every peer, or those in a list of networks.
///
/// # Examples
///
/// ```
/// use tollgate_throttle::Trust;
///
/// let proxies = Trust::networks(["10.0.0.0/8", "::1"])?;
/// assert!(proxies.contains("10.1.2.3".parse()?));
/// assert!(proxies.contains("::ffff:10.1.2.3".parse()?));
/// assert!(!proxies.contains("192.0.2.1".parse()?));
/// assert!(!Trust::none().contains("10.1.2.3".parse()?));
/// assert_eq!(
///     Trust::networks(["10.0.0.0/33"]).unwrap_err().to_string(),
///     "invalid trusted network \"10.0.0.0/33\": a prefix of at most 32 bits"
/// );
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Trust {
    everyone: bool,
    /// Each network's address, already masked, and its prefix length.
    networks: Vec<(IpAddr, u8)>,
}

impl Trust {
    /// No peer is trusted (the default).
    pub fn none() -> Trust {
        Trust::default()
    }

    /// Every peer is trusted: only for a server that no client reaches
    /// except through trusted proxies or callers.
    pub fn everyone() -> Trust {
        Trust {
            everyone: true,
            networks: Vec::new(),
        }
    }

    /// The peers in `networks`: addresses (`10.0.0.1`, `::1`) or networks
    /// in CIDR notation (`10.0.0.0/8`, `fd00::/8`).
    ///
    /// # Errors
    ///
    /// An entry that is not an address, or a prefix longer than its
    /// address.
    pub fn networks<I, S>(networks: I) -> Result<Trust, ValueError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let networks = networks
            .into_iter()
            .map(|n| network(n.as_ref()))
            .collect::<Result<_, _>>()?;
        Ok(Trust {
            everyone: false,
            networks,
        })
    }

    /// Whether `ip` is trusted.
    pub fn contains(&self, ip: IpAddr) -> bool {
        if self.everyone {
            return true;
        }
        let ip = ip.to_canonical();
        self.networks
            .iter()
            .any(|(net, bits)| masked(ip, *bits) == Some(*net))
    }

    /// Whether a request from `peer` (unknown: `None`) is trusted.
    pub(crate) fn trusts(&self, peer: Option<SocketAddr>) -> bool {
        self.everyone || peer.is_some_and(|p| self.contains(p.ip()))
    }
}

impl fmt::Debug for Trust {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.everyone {
            return f.write_str("Trust::everyone");
        }
        f.write_str("Trust")?;
        f.debug_list()
            .entries(
                self.networks
                    .iter()
                    .map(|(ip, bits)| format!("{ip}/{bits}")),
            )
            .finish()
    }
}

/// `ip` with all but its first `bits` bits cleared; `None` if `bits` is
/// longer than the address.
fn masked(ip: IpAddr, bits: u8) -> Option<IpAddr> {
    match ip {
        IpAddr::V4(v4) if bits <= 32 => {
            let mask = u32::MAX.checked_shl(32 - u32::from(bits)).unwrap_or(0);
            Some(IpAddr::V4((u32::from(v4) & mask).into()))
        }
        IpAddr::V6(v6) if bits <= 128 => {
            let mask = u128::MAX.checked_shl(128 - u32::from(bits)).unwrap_or(0);
            Some(IpAddr::V6((u128::from(v6) & mask).into()))
        }
        _ => None,
    }
}

fn network(text: &str) -> Result<(IpAddr, u8), ValueError> {
    let bad = |why: &'static str| ValueError::network(text, why);
    let (addr, bits) = match text.trim().split_once('/') {
        Some((addr, bits)) => (addr, Some(bits)),
        None => (text.trim(), None),
    };
    let ip = addr
        .parse::<IpAddr>()
        .map_err(|_| bad("not an IP address"))?
        .to_canonical();
    let max = if ip.is_ipv4() { 32 } else { 128 };
    let bits = match bits {
        None => max,
        Some(b) => b.parse::<u8>().ok().filter(|b| *b <= max).ok_or_else(|| {
            bad(if ip.is_ipv4() {
                "a prefix of at most 32 bits"
            } else {
                "a prefix of at most 128 bits"
            })
        })?,
    };
    Ok((
        masked(ip, bits).ok_or_else(|| bad("a prefix too long"))?,
        bits,
    ))
}

/// The client's address behind the proxies `trust` names, as a key:
/// `peer` itself unless it is trusted (see the module notes).
pub(crate) fn client_key(peer: IpAddr, headers: &HeaderMap, trust: &Trust) -> String {
    let peer = peer.to_canonical();
    if !trust.contains(peer) {
        return peer.to_string();
    }
    let forwarded = headers.get_all("forwarded");
    let hops: Vec<&str> = if forwarded.iter().next().is_some() {
        forwarded
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .filter_map(forwarded_for)
            .collect()
    } else {
        headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .collect()
    };
    let mut client = peer;
    for hop in hops.iter().rev() {
        match hop_addr(hop) {
            Some(ip) => {
                client = ip;
                if !trust.contains(ip) {
                    break;
                }
            }
            None => return (*hop).to_owned(),
        }
    }
    client.to_string()
}

/// The `for=` value of one `Forwarded` element, unquoted.
fn forwarded_for(element: &str) -> Option<&str> {
    element.split(';').find_map(|pair| {
        let (name, value) = pair.split_once('=')?;
        name.trim()
            .eq_ignore_ascii_case("for")
            .then(|| value.trim().trim_matches('"'))
    })
}

/// The address of a forwarded hop: `192.0.2.1`, `192.0.2.1:4711`,
/// `2001:db8::1`, `[2001:db8::1]` or `[2001:db8::1]:4711`.
fn hop_addr(hop: &str) -> Option<IpAddr> {
    if let Ok(ip) = hop.parse::<IpAddr>() {
        return Some(ip.to_canonical());
    }
    if let Ok(addr) = hop.parse::<SocketAddr>() {
        return Some(addr.ip().to_canonical());
    }
    hop.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .and_then(|h| h.parse::<IpAddr>().ok())
        .map(|ip| ip.to_canonical())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn the_client_is_the_first_untrusted_hop_from_the_right() {
        let trust = Trust::networks(["10.0.0.0/8"]).unwrap();
        let h = headers(&[("x-forwarded-for", "6.6.6.6, 192.0.2.7, 10.0.0.2")]);
        // 6.6.6.6 was written by the client: never read.
        assert_eq!(client_key(ip("10.0.0.1"), &h, &trust), "192.0.2.7");
        // An untrusted peer's headers are ignored.
        assert_eq!(client_key(ip("192.0.2.9"), &h, &trust), "192.0.2.9");
        assert_eq!(client_key(ip("10.0.0.1"), &h, &Trust::none()), "10.0.0.1");
        // Only trusted proxies all the way: the leftmost address.
        let h = headers(&[("x-forwarded-for", "10.0.0.3")]);
        assert_eq!(client_key(ip("10.0.0.1"), &h, &trust), "10.0.0.3");
        // No header: the proxy itself.
        assert_eq!(
            client_key(ip("10.0.0.1"), &HeaderMap::new(), &trust),
            "10.0.0.1"
        );
    }

    #[test]
    fn forwarded_wins_over_x_forwarded_for_and_is_parsed_per_rfc_7239() {
        let trust = Trust::networks(["10.0.0.0/8", "2001:db8::/32"]).unwrap();
        let h = headers(&[
            ("x-forwarded-for", "198.51.100.1"),
            (
                "forwarded",
                r#"for=192.0.2.60;proto=http, For="[2001:db8:cafe::17]:4711""#,
            ),
            ("forwarded", "for=10.0.0.5:80;by=10.0.0.1"),
        ]);
        assert_eq!(client_key(ip("10.0.0.1"), &h, &trust), "192.0.2.60");
        let h = headers(&[("forwarded", "for=unknown, for=10.0.0.5")]);
        assert_eq!(client_key(ip("10.0.0.1"), &h, &trust), "unknown");
    }

    #[test]
    fn networks_match_canonical_addresses() {
        let t = Trust::networks(["10.0.0.0/8", "fd00::/8", "192.0.2.1"]).unwrap();
        assert!(t.contains(ip("10.255.0.1")));
        assert!(t.contains(ip("::ffff:10.0.0.1")));
        assert!(t.contains(ip("fdab::1")));
        assert!(t.contains(ip("192.0.2.1")));
        assert!(!t.contains(ip("192.0.2.2")));
        assert!(!t.contains(ip("11.0.0.1")));
        assert!(Trust::everyone().contains(ip("203.0.113.1")));
        assert_eq!(
            Trust::networks(["fd00::/129"]).unwrap_err().to_string(),
            "invalid trusted network \"fd00::/129\": a prefix of at most 128 bits"
        );
        assert_eq!(
            Trust::networks(["proxy.local"]).unwrap_err().to_string(),
            "invalid trusted network \"proxy.local\": not an IP address"
        );
    }
}
