//! Where the web tools may connect (SSRF protection, after OWASP's SSRF guidance): never to
//! loopback, private, link-local (the cloud metadata address 169.254.169.254 included),
//! shared, multicast, reserved or unspecified addresses, in any spelling (`127.1`,
//! `2130706433`, `0x7f000001` and `[::ffff:127.0.0.1]` all parse to 127.0.0.1), checked after
//! DNS resolution (a name that resolves to such an address is refused) and on every redirect
//! hop. Exceptions: the operator's `TASKFORCE_WEB_ALLOW_NETS` (CIDRs or addresses), and the
//! hosts of the operator's own `TASKFORCE_WEB_SEARCH_URL` and `GITHUB_API_URL`.

use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    sync::Arc,
};

use ipnet::IpNet;
use reqwest::Url;

/// Most redirects one request follows.
const MAX_REDIRECTS: usize = 10;

/// The rule; cheap to share.
#[derive(Debug, Clone, Default)]
pub struct NetGuard {
    allow_nets: Vec<IpNet>,
    /// Host names the operator configured (resolved without the address check).
    allow_names: Vec<String>,
    /// Address literals with the port the operator configured.
    allow_sockets: Vec<SocketAddr>,
}

impl NetGuard {
    /// The rule with these operator exceptions: `nets` (allowed address ranges) and the hosts of
    /// `operator_urls`.
    pub fn new(nets: Vec<IpNet>, operator_urls: &[&str]) -> Self {
        let mut guard = Self {
            allow_nets: nets,
            ..Self::default()
        };
        for url in operator_urls.iter().filter_map(|u| Url::parse(u).ok()) {
            match url.host() {
                Some(url::Host::Domain(name)) => guard.allow_names.push(name.to_ascii_lowercase()),
                Some(url::Host::Ipv4(ip)) => guard.allow_sockets.push(SocketAddr::new(
                    ip.into(),
                    url.port_or_known_default().unwrap_or(0),
                )),
                Some(url::Host::Ipv6(ip)) => guard.allow_sockets.push(SocketAddr::new(
                    ip.into(),
                    url.port_or_known_default().unwrap_or(0),
                )),
                None => {}
            }
        }
        guard
    }

    /// Whether the tools may request `url`: `http`/`https` only, and an address host must pass
    /// [`Self::check_ip`] (names are checked when they resolve).
    pub fn check_url(&self, url: &Url) -> Result<(), String> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!(
                "the scheme `{}` is not allowed (http and https are)",
                url.scheme()
            ));
        }
        let ip: IpAddr = match url.host() {
            Some(url::Host::Ipv4(ip)) => ip.into(),
            Some(url::Host::Ipv6(ip)) => ip.into(),
            Some(url::Host::Domain(_)) => return Ok(()),
            None => return Err("the URL has no host".to_owned()),
        };
        let socket = SocketAddr::new(ip, url.port_or_known_default().unwrap_or(0));
        if self.allow_sockets.contains(&socket) {
            return Ok(());
        }
        self.check_ip(ip)
    }

    /// Whether the tools may connect to `ip`; `Err` says what kind of address it is.
    pub fn check_ip(&self, ip: IpAddr) -> Result<(), String> {
        if self.allow_nets.iter().any(|n| n.contains(&ip)) {
            return Ok(());
        }
        match forbidden(ip) {
            None => Ok(()),
            Some(kind) => Err(format!(
                "{ip} is {kind} address; the web tools only reach public addresses \
                 (an operator can allow it with TASKFORCE_WEB_ALLOW_NETS)"
            )),
        }
    }

    /// The redirect policy: at most 10 hops, each checked like the first URL, and with a
    /// `scope`, none to another path of its origin (a hop to another host is followed: the
    /// client drops the `Authorization` header there, and downloads of logs, tarballs and
    /// release assets live on other hosts).
    pub fn redirect_policy(self: &Arc<Self>, scope: Option<Url>) -> reqwest::redirect::Policy {
        let guard = Arc::clone(self);
        reqwest::redirect::Policy::custom(move |attempt| {
            if attempt.previous().len() >= MAX_REDIRECTS {
                return attempt.error(format!("more than {MAX_REDIRECTS} redirects"));
            }
            if let Some(scope) = &scope
                && attempt.url().origin() == scope.origin()
                && !within(scope, attempt.url())
            {
                let to = attempt.url().to_string();
                return attempt.error(format!(
                    "a redirect to {to} leaves {scope}, so it is not followed"
                ));
            }
            match guard.check_url(attempt.url()) {
                Ok(()) => attempt.follow(),
                Err(why) => {
                    let to = attempt.url().to_string();
                    attempt.error(format!("a redirect to {to} was refused: {why}"))
                }
            }
        })
    }
}

/// Whether `url` is under `scope`: the same origin, and its path at or below the scope's.
pub(crate) fn within(scope: &Url, url: &Url) -> bool {
    let base = scope.path().trim_end_matches('/');
    url.origin() == scope.origin()
        && url
            .path()
            .strip_prefix(base)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// The resolver of the tools' HTTP client: the system's, keeping only allowed addresses.
impl reqwest::dns::Resolve for NetGuard {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let guard = self.clone();
        let host = name.as_str().to_ascii_lowercase();
        Box::pin(async move {
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if guard.allow_names.contains(&host) {
                return Ok(Box::new(found.into_iter()) as reqwest::dns::Addrs);
            }
            let mut refused = None;
            let allowed: Vec<SocketAddr> = found
                .into_iter()
                .filter(|a| match guard.check_ip(a.ip()) {
                    Ok(()) => true,
                    Err(why) => {
                        refused.get_or_insert(why);
                        false
                    }
                })
                .collect();
            if allowed.is_empty() {
                let why = refused.unwrap_or_else(|| "no address".to_owned());
                return Err(format!("{host} resolves to no allowed address: {why}").into());
            }
            Ok(Box::new(allowed.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// What kind of non-public address `ip` is, if it is one.
fn forbidden(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => forbidden_v4(v4),
        IpAddr::V6(v6) => {
            // An IPv4 address inside IPv6 (mapped, or NAT64's well-known prefix) is that address.
            if let Some(v4) = v6.to_ipv4_mapped() {
                return forbidden_v4(v4);
            }
            let s = v6.segments();
            // The other IPv6 forms that carry an IPv4 address: IPv4-compatible (`::a.b.c.d`,
            // deprecated), IPv4-translated (`::ffff:0:a.b.c.d`) and NAT64's local-use prefix
            // (`64:ff9b:1::/48`): hosts that translate them reach the IPv4 address inside, so
            // none is a public destination.
            if s[..6] == [0, 0, 0, 0, 0, 0] && !v6.is_loopback() && !v6.is_unspecified() {
                return Some("an IPv4-compatible (deprecated)");
            }
            if s[..6] == [0, 0, 0, 0, 0xffff, 0] {
                return Some("an IPv4-translated");
            }
            if s[0] == 0x64 && s[1] == 0xff9b && s[2] == 1 {
                return Some("a local-use NAT64");
            }
            if s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0, 0, 0, 0] {
                return forbidden_v4(Ipv4Addr::new(
                    (s[6] >> 8) as u8,
                    (s[6] & 0xff) as u8,
                    (s[7] >> 8) as u8,
                    (s[7] & 0xff) as u8,
                ));
            }
            forbidden_v6(v6)
        }
    }
}

fn forbidden_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, ..] = ip.octets();
    if ip.is_loopback() {
        Some("a loopback")
    } else if ip.is_private() {
        Some("a private")
    } else if ip.is_link_local() {
        Some("a link-local (cloud metadata)")
    } else if ip.is_unspecified() || a == 0 {
        Some("an unspecified (this-network)")
    } else if a == 100 && (64..128).contains(&b) {
        Some("a shared (carrier-grade NAT)")
    } else if ip.is_multicast() || ip.is_broadcast() || a >= 240 {
        Some("a multicast, broadcast or reserved")
    } else if a == 192 && b == 0 && ip.octets()[2] == 0 {
        Some("an IETF protocol assignment")
    } else if a == 198 && (18..20).contains(&b) {
        Some("a benchmarking")
    } else if ip.is_documentation() {
        Some("a documentation")
    } else {
        None
    }
}

fn forbidden_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let first = ip.segments()[0];
    if ip.is_loopback() {
        Some("a loopback")
    } else if ip.is_unspecified() {
        Some("an unspecified")
    } else if ip.is_unique_local() {
        Some("a unique-local (private)")
    } else if ip.is_unicast_link_local() {
        Some("a link-local")
    } else if ip.is_multicast() {
        Some("a multicast")
    } else if first & 0xffc0 == 0xfec0 {
        Some("a site-local (private)")
    } else if first == 0x2001 && ip.segments()[1] == 0x0db8 {
        Some("a documentation")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> Url {
        Url::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn every_spelling_of_an_internal_address_is_refused() {
        let guard = NetGuard::default();
        for bad in [
            "http://127.0.0.1:8080/",
            "http://127.1/",
            "http://2130706433/",
            "http://0x7f000001/",
            "http://0177.0.0.1/",
            "http://[::1]/",
            "http://[::ffff:127.0.0.1]/",
            "http://[::ffff:7f00:1]/",
            "http://[64:ff9b::a9fe:a9fe]/",
            "http://[::127.0.0.1]/",
            "http://[::7f00:1]/",
            "http://[::ffff:0:7f00:1]/",
            "http://[64:ff9b:1::7f00:1]/",
            "http://[::8.8.8.8]/",
            "http://169.254.169.254/latest/meta-data/",
            "http://10.1.2.3/",
            "http://172.16.0.1/",
            "http://192.168.1.1/",
            "http://100.64.0.1/",
            "http://0.0.0.0/",
            "http://[fe80::1]/",
            "http://[fd00:ec2::254]/",
            "file:///etc/passwd",
            "gopher://example.com/",
        ] {
            assert!(guard.check_url(&url(bad)).is_err(), "{bad}");
        }
        for good in [
            "https://example.com/",
            "http://93.184.215.14/",
            "http://[2606:4700::1111]/",
        ] {
            assert_eq!(guard.check_url(&url(good)), Ok(()), "{good}");
        }
    }

    #[test]
    fn operators_allow_nets_and_their_own_endpoints() {
        let nets = vec!["10.0.0.0/8".parse().expect("a net")];
        let guard = NetGuard::new(
            nets,
            &[
                "http://127.0.0.1:9999/search?q=",
                "https://ghe.local/api/v3",
            ],
        );
        assert_eq!(guard.check_url(&url("http://10.9.8.7/")), Ok(()));
        assert_eq!(guard.check_url(&url("http://127.0.0.1:9999/x")), Ok(()));
        // Only the configured port of an address host.
        assert!(guard.check_url(&url("http://127.0.0.1:9998/x")).is_err());
        assert!(guard.allow_names.contains(&"ghe.local".to_owned()));
        assert!(
            guard
                .check_ip("127.0.0.1".parse().expect("an address"))
                .is_err_and(|why| why.contains("loopback"))
        );
    }
}
