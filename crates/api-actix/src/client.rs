//! Who is calling (contract §17): the address that connected, or, when that is a trusted
//! proxy (`WORKBENCH_TRUSTED_PROXIES`), the client it forwarded for. The address goes into the
//! request's log line and the token exchange's rate limit.

use std::net::IpAddr;

use actix_web::dev::ServiceRequest;
use actix_web::http::header::HeaderMap;
use ipnet::IpNet;

/// The proxies whose `Forwarded` and `X-Forwarded-For` headers are believed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies(Vec<IpNet>);

impl std::fmt::Display for TrustedProxies {
    /// The CIDRs, comma-separated, as they are read.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let cidrs: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        f.write_str(&cidrs.join(","))
    }
}

impl TrustedProxies {
    /// Reads comma-separated CIDRs (`10.0.0.0/8, 192.168.1.7/32`; a bare address is one
    /// host); empty trusts none.
    pub fn parse(text: &str) -> Result<Self, String> {
        text.split(',')
            .map(str::trim)
            .filter(|item| !item.is_empty())
            .map(|item| {
                item.parse::<IpNet>()
                    .or_else(|_| item.parse::<IpAddr>().map(IpNet::from))
                    .map_err(|_| format!("`{item}` is not an address or a CIDR such as 10.0.0.0/8"))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(TrustedProxies)
    }

    fn trusts(&self, address: IpAddr) -> bool {
        self.0.iter().any(|net| net.contains(&address))
    }

    /// The client of a request that came from `peer`: `peer` itself unless it is trusted;
    /// then, walking the forwarded addresses from the nearest hop back, the first one that
    /// is not a trusted proxy (an address a client wrote itself further left is not believed).
    pub fn client(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        // An IPv4 client of a dual-stack listener arrives as `::ffff:a.b.c.d`.
        let peer = peer.to_canonical();
        if !self.trusts(peer) {
            return peer;
        }
        let mut client = peer;
        for hop in forwarded_for(headers).into_iter().rev() {
            // What lies beyond an unreadable hop cannot be placed.
            let Some(hop) = hop.map(|h| h.to_canonical()) else {
                break;
            };
            client = hop;
            if !self.trusts(hop) {
                break;
            }
        }
        client
    }
}

/// The addresses a request was forwarded for, nearest hop last: from `X-Forwarded-For`, which
/// the common proxies append to (a client's own `Forwarded` header they pass through untouched,
/// so it is read only when there is no `X-Forwarded-For`: behind a proxy that writes
/// `Forwarded` alone); `None` for an entry that cannot be read.
fn forwarded_for(headers: &HeaderMap) -> Vec<Option<IpAddr>> {
    let forwarded: Vec<&str> = headers
        .get_all("forwarded")
        .filter_map(|v| v.to_str().ok())
        .collect();
    if !forwarded.is_empty() && !headers.contains_key("x-forwarded-for") {
        return forwarded
            .iter()
            .flat_map(|v| v.split(','))
            .map(|element| {
                element.split(';').find_map(|pair| {
                    let (name, value) = pair.trim().split_once('=')?;
                    name.trim()
                        .eq_ignore_ascii_case("for")
                        .then(|| node_address(value.trim()))
                        .flatten()
                })
            })
            .collect();
    }
    headers
        .get_all("x-forwarded-for")
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|item| item.trim().parse::<IpAddr>().ok())
        .collect()
}

/// The address of an RFC 7239 node: `192.0.2.1`, `"192.0.2.1:8080"`, `"[2001:db8::1]:80"`.
fn node_address(node: &str) -> Option<IpAddr> {
    let node = node.trim_matches('"');
    if let Some(rest) = node.strip_prefix('[') {
        return rest.split_once(']')?.0.parse().ok();
    }
    let host = match node.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
        _ => node,
    };
    host.parse().ok()
}

/// The client of a request, as [`TrustedProxies::client`] reads it; None without a peer.
pub(crate) fn of(req: &ServiceRequest, trusted: &TrustedProxies) -> Option<IpAddr> {
    req.peer_addr()
        .map(|peer| trusted.client(peer.ip(), req.headers()))
}

/// The client address of a request, put in its extensions by the edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ClientAddress(pub(crate) IpAddr);

#[cfg(test)]
mod tests {
    use actix_web::http::header::{HeaderName, HeaderValue};

    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                HeaderName::from_static(name),
                HeaderValue::from_static(value),
            );
        }
        map
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().expect("ip")
    }

    #[test]
    fn forwarded_headers_are_believed_only_from_trusted_proxies() {
        let trusted = TrustedProxies::parse("10.0.0.0/8, 192.168.1.7").expect("parse");
        let sent = headers(&[("x-forwarded-for", "203.0.113.9")]);
        // A client that is not a proxy cannot choose its address.
        assert_eq!(
            trusted.client(ip("198.51.100.2"), &sent),
            ip("198.51.100.2")
        );
        assert_eq!(trusted.client(ip("10.1.2.3"), &sent), ip("203.0.113.9"));
        assert_eq!(trusted.client(ip("192.168.1.7"), &sent), ip("203.0.113.9"));
        // Nothing forwarded: the proxy itself.
        assert_eq!(
            trusted.client(ip("10.1.2.3"), &HeaderMap::new()),
            ip("10.1.2.3")
        );
        assert_eq!(
            TrustedProxies::default().client(ip("10.1.2.3"), &sent),
            ip("10.1.2.3")
        );
    }

    #[test]
    fn the_nearest_untrusted_hop_is_the_client_and_what_a_client_wrote_is_not() {
        let trusted = TrustedProxies::parse("10.0.0.0/8").expect("parse");
        // The client wrote 1.1.1.1 itself; 203.0.113.9 connected to the first proxy.
        let chain = headers(&[("x-forwarded-for", "1.1.1.1, 203.0.113.9, 10.0.0.5")]);
        assert_eq!(trusted.client(ip("10.0.0.6"), &chain), ip("203.0.113.9"));
        let forwarded = headers(&[(
            "forwarded",
            "for=1.1.1.1, for=\"[2001:db8::7]:4711\";proto=https, for=10.0.0.5",
        )]);
        assert_eq!(
            trusted.client(ip("10.0.0.6"), &forwarded),
            ip("2001:db8::7")
        );
        // `X-Forwarded-For`, which the proxy appends to, wins over a `Forwarded` a client
        // may have sent itself.
        let both = headers(&[
            ("forwarded", "for=192.0.2.60"),
            ("x-forwarded-for", "198.51.100.1"),
        ]);
        assert_eq!(trusted.client(ip("10.0.0.6"), &both), ip("198.51.100.1"));
        // A dual-stack listener's IPv4 peer is trusted by its IPv4 CIDR.
        assert_eq!(
            trusted.client(ip("::ffff:10.0.0.6"), &both),
            ip("198.51.100.1")
        );
        // An unreadable hop ends what can be placed: the proxy is the client.
        let garbled = headers(&[("x-forwarded-for", "203.0.113.9, not-an-ip")]);
        assert_eq!(trusted.client(ip("10.0.0.6"), &garbled), ip("10.0.0.6"));
    }

    #[test]
    fn proxies_are_addresses_or_cidrs() {
        assert!(TrustedProxies::parse("").expect("empty").0.is_empty());
        assert_eq!(
            TrustedProxies::parse("::1, fd00::/8").expect("v6").0.len(),
            2
        );
        let err = TrustedProxies::parse("10.0.0.0/8, proxy.local").expect_err("a name");
        assert!(err.contains("proxy.local"), "{err}");
    }
}
