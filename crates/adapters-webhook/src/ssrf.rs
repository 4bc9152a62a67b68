//! Which addresses a webhook may call (contract §7): never loopback, private, link-local,
//! CGNAT, multicast, reserved or cloud-metadata addresses, unless an operator allow-list
//! (`WORKBENCH_WEBHOOK_ALLOW_CIDRS`) admits them. IPv6 forms that embed an IPv4 address
//! (mapped, NAT64, 6to4) are judged by the embedded address.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use ipnet::IpNet;

/// A policy that cannot be made from its configuration.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PolicyError {
    /// An allowed range that is not a CIDR.
    #[error("{0:?} is not a CIDR (e.g. 127.0.0.0/8 or fc00::/7)")]
    BadCidr(String),
}

/// The allow-list and the rule.
#[derive(Debug, Clone, Default)]
pub struct AddressPolicy {
    allow: Arc<Vec<IpNet>>,
}

impl AddressPolicy {
    /// From comma-separated CIDRs; empty means no exceptions.
    pub fn parse(allow: &str) -> Result<Self, PolicyError> {
        let allow = allow
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| {
                s.parse::<IpNet>()
                    .map_err(|_| PolicyError::BadCidr(s.to_owned()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(AddressPolicy {
            allow: Arc::new(allow),
        })
    }

    /// None when the address may be called, else why not.
    pub fn refuse(&self, ip: IpAddr) -> Option<&'static str> {
        if self.allow.iter().any(|net| net.contains(&ip)) {
            return None;
        }
        forbidden(ip)
    }

    /// Resolves `host:port` and checks every address: one forbidden address refuses the name
    /// (a name must not mix public and private answers).
    pub async fn resolve(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, String> {
        if let Ok(ip) = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
        {
            return match self.refuse(ip) {
                Some(why) => Err(refusal(&ip.to_string(), "is", why)),
                None => Ok(vec![SocketAddr::new(ip, port)]),
            };
        }
        // One answer for a name that does not resolve and one that resolves to an address
        // refused, naming neither the address nor its kind: a refusal must not map the inside
        // of the network for whoever chose the name (contract §16).
        let hidden = || refusal(host, "does not resolve to", "a public address");
        let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
            .await
            .map_err(|_| hidden())?
            .collect();
        if addrs.is_empty() || addrs.iter().any(|a| self.refuse(a.ip()).is_some()) {
            return Err(hidden());
        }
        Ok(addrs)
    }
}

/// Why a webhook may not call `subject`: the rule it broke, and the setting that would admit
/// it.
pub fn refusal(subject: &str, verb: &str, why: &str) -> String {
    format!(
        "{subject} {verb} {why}; webhooks call such addresses only when \
         WORKBENCH_WEBHOOK_ALLOW_CIDRS admits them"
    )
}

fn forbidden(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => forbidden_v4(v4),
        IpAddr::V6(v6) => forbidden_v6(v6),
    }
}

fn in_v4(ip: Ipv4Addr, net: [u8; 4], prefix: u32) -> bool {
    let mask = if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - prefix)
    };
    (u32::from(ip) & mask) == (u32::from(Ipv4Addr::from(net)) & mask)
}

fn forbidden_v4(ip: Ipv4Addr) -> Option<&'static str> {
    const RANGES: &[([u8; 4], u32, &str)] = &[
        ([0, 0, 0, 0], 8, "a reserved address (this network)"),
        ([10, 0, 0, 0], 8, "a private address"),
        ([100, 64, 0, 0], 10, "a shared (CGNAT) address"),
        ([127, 0, 0, 0], 8, "a loopback address"),
        (
            [169, 254, 0, 0],
            16,
            "a link-local or cloud-metadata address",
        ),
        ([172, 16, 0, 0], 12, "a private address"),
        ([192, 0, 0, 0], 24, "a reserved (IETF protocol) address"),
        ([192, 0, 2, 0], 24, "a documentation address"),
        ([192, 88, 99, 0], 24, "a reserved (6to4 relay) address"),
        ([192, 168, 0, 0], 16, "a private address"),
        ([198, 18, 0, 0], 15, "a benchmarking address"),
        ([198, 51, 100, 0], 24, "a documentation address"),
        ([203, 0, 113, 0], 24, "a documentation address"),
        ([224, 0, 0, 0], 4, "a multicast address"),
        ([240, 0, 0, 0], 4, "a reserved or broadcast address"),
    ];
    RANGES
        .iter()
        .find(|(net, prefix, _)| in_v4(ip, *net, *prefix))
        .map(|(_, _, why)| *why)
}

fn forbidden_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let s = ip.segments();
    if ip.is_unspecified() {
        return Some("the unspecified address");
    }
    if ip.is_loopback() {
        return Some("a loopback address");
    }
    // Forms that carry an IPv4 address: mapped (::ffff:a.b.c.d), NAT64 (64:ff9b::/96),
    // 6to4 (2002::/16), IPv4-compatible (::a.b.c.d).
    let embedded = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    if let Some(v4) = ip.to_ipv4_mapped() {
        return forbidden_v4(v4);
    }
    if s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0, 0, 0, 0] {
        return forbidden_v4(embedded(s[6], s[7]));
    }
    if s[0] == 0x2002 {
        return forbidden_v4(embedded(s[1], s[2]));
    }
    if s[0..6] == [0, 0, 0, 0, 0, 0] {
        return Some("a reserved (IPv4-compatible) address");
    }
    match s[0] {
        x if x & 0xfe00 == 0xfc00 => Some("a unique-local (private) address"),
        x if x & 0xffc0 == 0xfe80 => Some("a link-local address"),
        x if x & 0xffc0 == 0xfec0 => Some("a site-local (private) address"),
        x if x & 0xff00 == 0xff00 => Some("a multicast address"),
        0x2001 if s[1] == 0x0db8 => Some("a documentation address"),
        0x0100 if s[1..4] == [0, 0, 0] => Some("a discard-only address"),
        _ => None,
    }
}

/// A name the resolver would not hand to a connection: it resolves to no admitted address
/// (or not at all; the two are not told apart). Its own type, so that a failed call can be
/// told refused rather than unable to connect.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct Refused(pub(crate) String);

/// reqwest's resolver: only addresses the policy admits, so the connection goes to a checked
/// address.
pub(crate) struct GuardedResolver(pub(crate) AddressPolicy);

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = self.0.clone();
        Box::pin(async move {
            // reqwest sets the port itself; 0 is a placeholder.
            let addrs = policy.resolve(name.as_str(), 0).await.map_err(
                |e| -> Box<dyn std::error::Error + Send + Sync> { Box::new(Refused(e)) },
            )?;
            let addrs: reqwest::dns::Addrs = Box::new(addrs.into_iter());
            Ok(addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ssrf_table_is_refused() {
        let policy = AddressPolicy::default();
        for ip in [
            "127.0.0.1",
            "127.9.9.9",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "64:ff9b::7f00:1",
            "2002:7f00:1::",
            "2002:a9fe:a9fe::",
        ] {
            let ip: IpAddr = ip.parse().expect(ip);
            assert!(policy.refuse(ip).is_some(), "{ip} must be refused");
        }
        for ip in [
            "93.184.216.34",
            "8.8.8.8",
            "172.32.0.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
        ] {
            let ip: IpAddr = ip.parse().expect(ip);
            assert_eq!(policy.refuse(ip), None, "{ip} must be allowed");
        }
    }

    #[test]
    fn the_allow_list_admits_only_its_ranges() {
        let policy = AddressPolicy::parse("127.0.0.0/8, ::1/128").expect("cidrs");
        assert_eq!(policy.refuse("127.0.0.1".parse().expect("ip")), None);
        assert_eq!(policy.refuse("::1".parse().expect("ip")), None);
        assert!(policy.refuse("10.0.0.1".parse().expect("ip")).is_some());
        assert_eq!(
            AddressPolicy::parse("127.0.0.1").err(),
            Some(PolicyError::BadCidr("127.0.0.1".into()))
        );
    }

    #[tokio::test]
    async fn names_resolving_to_forbidden_addresses_are_refused() {
        let policy = AddressPolicy::default();
        let err = policy.resolve("localhost", 80).await.expect_err("refused");
        assert!(err.contains("public address"), "{err}");
        // The rule and the setting that admits it are named; the address resolved is not.
        assert!(err.contains("WORKBENCH_WEBHOOK_ALLOW_CIDRS"), "{err}");
        assert!(!err.contains("127.0.0.1") && !err.contains("::1"), "{err}");
        let err = policy.resolve("[::1]", 80).await.expect_err("refused");
        assert!(
            err.contains("loopback"),
            "the address given is named: {err}"
        );
        let unknown = policy.resolve("no-such-host.invalid", 80).await;
        assert_eq!(
            unknown.expect_err("refused"),
            policy
                .resolve("localhost", 80)
                .await
                .expect_err("refused")
                .replace("localhost", "no-such-host.invalid"),
            "a name that does not resolve answers as one refused"
        );
        let allowed = AddressPolicy::parse("127.0.0.0/8,::1/128").expect("cidrs");
        assert!(!allowed
            .resolve("localhost", 80)
            .await
            .expect("allowed")
            .is_empty());
    }
}
