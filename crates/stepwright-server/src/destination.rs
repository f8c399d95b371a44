//! Where a webhook may post: a public address, never the server's own network. A namespace
//! admin registers the URL, but the server makes the request, from inside the operator's
//! network: without this check a webhook is a blind SSRF (cloud metadata, a database's
//! HTTP port, an admin console on loopback) and its delivery log a port scanner.
//!
//! The rules, after Stripe's and GitHub's: `http`/`https` only, no userinfo; the host, as
//! the URL standard normalizes it (so `2130706433`, `0x7f.1` and `[::ffff:a9fe:a9fe]` are
//! the loopback and metadata addresses they spell), must not be — nor resolve to — a
//! loopback, private, link-local, unique-local, shared (CGNAT), multicast, broadcast,
//! reserved, documentation or unspecified address, nor one of the cloud metadata names.
//! A name is checked when the webhook is registered *and* at each delivery, by the resolver
//! the delivery connects with, so the address checked is the address used (no DNS
//! rebinding between the two). Redirects are not followed. An operator may allow intranet
//! receivers by network (`serve --webhook-allow 10.1.0.0/16`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use ipnet::IpNet;
use reqwest::Url;

/// Names that are a cloud's instance metadata service (or the local machine) whatever they
/// resolve to.
const FORBIDDEN_NAMES: [&str; 6] = [
    "localhost",
    "metadata",
    "metadata.google.internal",
    "metadata.goog",
    "instance-data",
    "instance-data.ec2.internal",
];

/// Why a destination is refused: said to the admin who registers it and written as the
/// delivery's error (never anything the destination answered: none is contacted).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct Refused(pub(crate) String);

/// The networks an operator allows besides the public internet.
#[derive(Debug, Clone, Default)]
pub struct DestinationPolicy {
    allowed: Arc<Vec<IpNet>>,
}

impl DestinationPolicy {
    /// Public addresses only, plus these networks (an intranet receiver's).
    pub fn allowing(networks: Vec<IpNet>) -> Self {
        Self { allowed: Arc::new(networks) }
    }

    /// Why `ip` may not be posted to, if it may not.
    pub(crate) fn refuses(&self, ip: IpAddr) -> Option<&'static str> {
        let ip = canonical(ip);
        if self.allowed.iter().any(|net| net.contains(&ip)) {
            return None;
        }
        kind_of_internal(ip)
    }

    /// The URL, checked without resolving its name: scheme, userinfo, a literal address,
    /// a forbidden name. What a delivery checks before it sends (its resolver checks the
    /// addresses the name has then).
    pub(crate) fn check_url(&self, url: &str) -> Result<Url, Refused> {
        let parsed = Url::parse(url).map_err(|e| Refused(format!("url {url:?} is not a URL: {e}")))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(Refused(format!("url {url:?} is not an http:// or https:// URL")));
        }
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Err(Refused(format!(
                "url {url:?} has a user name or password in it; put credentials in the secret"
            )));
        }
        match parsed.host() {
            None => Err(Refused(format!("url {url:?} has no host"))),
            Some(url::Host::Ipv4(ip)) => self.check_ip(url, IpAddr::V4(ip)).map(|()| parsed.clone()),
            Some(url::Host::Ipv6(ip)) => self.check_ip(url, IpAddr::V6(ip)).map(|()| parsed.clone()),
            Some(url::Host::Domain(name)) => {
                let name = name.trim_end_matches('.').to_ascii_lowercase();
                if FORBIDDEN_NAMES.contains(&name.as_str()) || name.ends_with(".localhost") {
                    return Err(Refused(format!("url {url:?}: {name} is a local or metadata host")));
                }
                Ok(parsed.clone())
            }
        }
    }

    fn check_ip(&self, url: &str, ip: IpAddr) -> Result<(), Refused> {
        match self.refuses(ip) {
            Some(kind) => Err(Refused(format!("url {url:?}: {ip} is {kind}"))),
            None => Ok(()),
        }
    }

    /// The URL checked as at registration: [`DestinationPolicy::check_url`], then every
    /// address its name resolves to now (a name that does not resolve is refused).
    pub(crate) async fn check_registered(&self, url: &str) -> Result<Url, Refused> {
        let parsed = self.check_url(url)?;
        if let Some(url::Host::Domain(name)) = parsed.host() {
            let port = parsed.port_or_known_default().unwrap_or(443);
            self.resolve(name, port).await?;
        }
        Ok(parsed)
    }

    /// The addresses `name` resolves to, all of them allowed (one that is not refuses the
    /// name: a receiver has no need of an internal address).
    async fn resolve(&self, name: &str, port: u16) -> Result<Vec<SocketAddr>, Refused> {
        let addresses: Vec<SocketAddr> = tokio::net::lookup_host((name, port))
            .await
            .map_err(|e| Refused(format!("{name} does not resolve: {e}")))?
            .collect();
        if addresses.is_empty() {
            return Err(Refused(format!("{name} does not resolve to any address")));
        }
        for address in &addresses {
            if let Some(kind) = self.refuses(address.ip()) {
                return Err(Refused(format!("{name} resolves to {}, which is {kind}", address.ip())));
            }
        }
        Ok(addresses)
    }
}

/// The resolver deliveries connect through: the addresses it hands the connection are the
/// ones it checked.
impl reqwest::dns::Resolve for DestinationPolicy {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = self.clone();
        Box::pin(async move {
            // The port is the URL's; the connector sets it on the addresses it gets.
            let addresses = DestinationPolicy::resolve(&policy, name.as_str(), 0).await?;
            Ok(Box::new(addresses.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// An IPv4 address an IPv6 one carries (mapped, compatible, NAT64, 6to4) is judged as
/// that IPv4 address.
fn canonical(ip: IpAddr) -> IpAddr {
    let IpAddr::V6(v6) = ip else { return ip };
    if let Some(v4) = v6.to_ipv4_mapped() {
        return IpAddr::V4(v4);
    }
    let s = v6.segments();
    let embedded = |hi: u16, lo: u16| IpAddr::V4(Ipv4Addr::new((hi >> 8) as u8, hi as u8, (lo >> 8) as u8, lo as u8));
    match s {
        // IPv4-compatible (deprecated, ::a.b.c.d), not :: or ::1 themselves.
        [0, 0, 0, 0, 0, 0, hi, lo] if (hi, lo) != (0, 0) && (hi, lo) != (0, 1) => embedded(hi, lo),
        // NAT64 (64:ff9b::/96).
        [0x64, 0xff9b, 0, 0, 0, 0, hi, lo] => embedded(hi, lo),
        // 6to4 (2002:AABB:CCDD::/48).
        [0x2002, hi, lo, ..] => embedded(hi, lo),
        _ => ip,
    }
}

/// What kind of non-public address `ip` is, if it is one.
fn kind_of_internal(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => kind_of_internal_v4(v4),
        IpAddr::V6(v6) => kind_of_internal_v6(v6),
    }
}

fn kind_of_internal_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    Some(match (a, b, c) {
        _ if ip.is_unspecified() || a == 0 => "an unspecified address (\"this network\")",
        _ if ip.is_loopback() => "a loopback address",
        _ if ip.is_private() => "a private address",
        _ if ip.is_link_local() => "a link-local address (cloud metadata lives there)",
        (100, 64..=127, _) => "a shared (carrier-grade NAT) address",
        (192, 0, 0) => "an IETF protocol assignment",
        (192, 0, 2) | (198, 51, 100) | (203, 0, 113) => "a documentation address",
        (198, 18..=19, _) => "a benchmarking address",
        _ if ip.is_multicast() => "a multicast address",
        _ if ip.is_broadcast() => "the broadcast address",
        (240..=255, _, _) => "a reserved address",
        _ => return None,
    })
}

fn kind_of_internal_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let first = ip.segments()[0];
    Some(match first {
        _ if ip.is_unspecified() => "an unspecified address",
        _ if ip.is_loopback() => "a loopback address",
        0xfc00..=0xfdff => "a unique-local address (cloud metadata lives there too)",
        0xfe80..=0xfebf => "a link-local address",
        0xfec0..=0xfeff => "a site-local address",
        0xff00..=0xffff => "a multicast address",
        0x2001 if ip.segments()[1] == 0x0db8 => "a documentation address",
        0x0100 if ip.segments()[1..4] == [0, 0, 0] => "a discard-only address",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hostile corpus: every spelling of an internal address a probe tried, and more.
    const REFUSED: [&str; 26] = [
        "http://169.254.169.254/latest/meta-data/",
        "http://metadata.google.internal/computeMetadata/v1/",
        "http://metadata.google.internal./",
        "http://[fd00:ec2::254]/latest/meta-data/",
        "http://10.0.0.5/",
        "http://172.16.3.4:8080/",
        "http://192.168.1.1/admin",
        "http://127.0.0.1:5432/",
        "http://localhost:8080/",
        "http://api.localhost/",
        "http://0.0.0.0/",
        "http://2130706433/",
        "http://0x7f.1/",
        "http://0177.0.0.1/",
        "http://127.1/",
        "http://[::ffff:169.254.169.254]/",
        "http://[::ffff:7f00:1]/",
        "http://[::1]/",
        "http://[::]/",
        "http://[fe80::1]/",
        "http://[64:ff9b::a9fe:a9fe]/",
        "http://[2002:a9fe:a9fe::1]/",
        "http://100.100.100.200/",
        "http://224.0.0.1/",
        "http://255.255.255.255/",
        "http://user:pass@example.com/",
    ];

    #[test]
    fn every_spelling_of_an_internal_destination_is_refused() {
        let policy = DestinationPolicy::default();
        for url in REFUSED {
            assert!(policy.check_url(url).is_err(), "{url} was accepted");
        }
        for url in ["ftp://example.com/", "file:///etc/passwd", "gopher://example.com/", "http://"] {
            assert!(policy.check_url(url).is_err(), "{url} was accepted");
        }
    }

    #[test]
    fn public_destinations_pass_and_an_allow_list_admits_an_intranet() {
        let policy = DestinationPolicy::default();
        for url in ["https://hooks.example.com/stepwright", "http://93.184.215.14:8080/x", "https://[2606:4700::1111]/"]
        {
            assert!(policy.check_url(url).is_ok(), "{url} was refused");
        }
        let intranet =
            DestinationPolicy::allowing(vec!["10.1.0.0/16".parse().unwrap(), "127.0.0.1/32".parse().unwrap()]);
        assert!(intranet.check_url("http://10.1.2.3/").is_ok());
        assert!(intranet.check_url("http://127.0.0.1:9000/").is_ok());
        assert!(intranet.check_url("http://[::ffff:127.0.0.1]:9000/").is_ok(), "mapped addresses are judged as IPv4");
        assert!(intranet.check_url("http://10.2.0.1/").is_err(), "only the networks allowed");
        assert!(intranet.check_url("http://169.254.169.254/").is_err());
    }

    #[test]
    fn the_refusal_names_the_kind_of_address() {
        let refused = DestinationPolicy::default().check_url("http://0x7f.1/").unwrap_err();
        assert!(refused.0.contains("127.0.0.1 is a loopback address"), "{refused}");
        let refused = DestinationPolicy::default().check_url("http://[fd00:ec2::254]/").unwrap_err();
        assert!(refused.0.contains("unique-local"), "{refused}");
    }

    /// Names of this machine's hosts file that point at loopback (other than `localhost`,
    /// refused by name): refused for the address they resolve to.
    fn loopback_names() -> Vec<String> {
        let hosts = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
        hosts
            .lines()
            .filter_map(|line| {
                let mut fields = line.split('#').next()?.split_whitespace();
                let ip: IpAddr = fields.next()?.parse().ok()?;
                ip.is_loopback().then(|| fields.map(str::to_owned).collect::<Vec<_>>())
            })
            .flatten()
            .filter(|name| {
                name != "localhost" && !name.ends_with(".localhost") && name.contains(|c: char| c.is_alphabetic())
            })
            .collect()
    }

    #[tokio::test]
    async fn a_name_that_resolves_to_loopback_is_refused_at_registration_and_by_the_resolver() {
        let policy = DestinationPolicy::default();
        for name in loopback_names() {
            let refused = policy.check_registered(&format!("http://{name}/")).await.unwrap_err();
            assert!(refused.0.contains("loopback"), "{name}: {refused}");
            // The resolver a delivery connects through refuses it the same way.
            let name_for_reqwest: reqwest::dns::Name = name.parse().unwrap();
            let resolved = reqwest::dns::Resolve::resolve(&policy, name_for_reqwest).await;
            let error = resolved.err().unwrap_or_else(|| panic!("{name} resolved"));
            assert!(error.downcast_ref::<Refused>().is_some(), "{name}: {error}");
        }
        let refused = policy.check_registered("http://no-such-host.invalid/").await.unwrap_err();
        assert!(refused.0.contains("does not resolve"), "{refused}");
    }
}
