//! The one guard on outbound requests to URLs a tenant gave (its own deployments' base URLs):
//! only addresses on the public internet, so a tenant cannot make gw call its own network, the
//! cloud's metadata service or another tenant's private endpoint. Applied when the URL is saved
//! (every address its host resolves to) and again at every connection (the address actually
//! dialled, so a name re-pointed after the check is caught). An operator running on a private
//! network may allow private addresses (`routing.org_private_base_urls`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Whether `ip` is on the public internet: not loopback, private, link-local (cloud metadata),
/// shared (CGNAT), documentation, benchmarking, multicast, broadcast, unspecified or reserved,
/// IPv4-mapped and 6to4/NAT64 forms of those included.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    let reserved = ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_broadcast()
        || ip.is_documentation()
        || ip.is_multicast()
        || a == 0
        || (a == 100 && (64..=127).contains(&b)) // shared address space (CGNAT)
        || (a == 192 && b == 0 && c == 0) // IETF protocol assignments
        || (a == 198 && (18..=19).contains(&b)) // benchmarking
        || a >= 240; // reserved
    !reserved
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return is_public_v4(v4);
    }
    let s = ip.segments();
    // 64:ff9b::/96 (NAT64) and 2002::/16 (6to4) carry an IPv4 address: judge that one.
    if s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0, 0, 0, 0] {
        return is_public_v4(Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8));
    }
    if s[0] == 0x2002 {
        return is_public_v4(Ipv4Addr::new((s[1] >> 8) as u8, s[1] as u8, (s[2] >> 8) as u8, s[2] as u8));
    }
    let reserved = ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_multicast()
        || (s[0] & 0xfe00) == 0xfc00 // unique local
        || (s[0] & 0xffc0) == 0xfe80 // link-local
        || (s[0] == 0x2001 && s[1] == 0x0db8) // documentation
        || s[0] == 0x0100 && s[1..4] == [0, 0, 0]; // discard-only
    !reserved
}

/// Whether `ip` may be reached: public, or inside a network the operator allows.
pub fn permitted(ip: IpAddr, allow: &[ipnet::IpNet]) -> bool {
    is_public(ip) || allow.iter().any(|n| n.contains(&ip))
}

/// Resolves `host` and checks every address; answers one to connect to (so the connection goes
/// where the check looked), or the refusal's reason when one is not public.
pub async fn resolve_public(host: &str, port: u16) -> Result<SocketAddr, String> {
    if let Ok(ip) = host.trim_matches(['[', ']']).parse::<IpAddr>() {
        return if is_public(ip) {
            Ok(SocketAddr::new(ip, port))
        } else {
            Err(format!("{ip} is not a public address"))
        };
    }
    let addrs = tokio::time::timeout(std::time::Duration::from_secs(5), tokio::net::lookup_host((host, port)))
        .await
        .map_err(|_| "the host name did not resolve in time".to_string())?
        .map_err(|_| "the host name does not resolve".to_string())?;
    let mut first = None;
    for a in addrs {
        if !is_public(a.ip()) {
            return Err(format!("the host name resolves to {}, which is not a public address", a.ip()));
        }
        first.get_or_insert(a);
    }
    first.ok_or_else(|| "the host name does not resolve".into())
}

/// [`resolve_public`], for a check only.
pub async fn check_host(host: &str, port: u16) -> Result<(), String> {
    resolve_public(host, port).await.map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_and_special_addresses_are_refused() {
        for bad in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "198.18.0.1",
            "192.0.0.8",
            "240.0.0.1",
            "::1",
            "::",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "64:ff9b::a9fe:a9fe",
            "2002:7f00:1::",
            "2001:db8::1",
            "ff02::1",
        ] {
            assert!(!is_public(bad.parse().unwrap()), "{bad}");
        }
        for good in ["8.8.8.8", "1.1.1.1", "104.18.0.1", "2606:4700::1111", "::ffff:8.8.8.8", "2002:0808:0808::"] {
            assert!(is_public(good.parse().unwrap()), "{good}");
        }
    }

    #[tokio::test]
    async fn literal_hosts_are_judged_without_a_lookup() {
        assert!(check_host("127.0.0.1", 443).await.is_err());
        assert!(check_host("[::1]", 443).await.is_err());
        assert!(check_host("8.8.8.8", 443).await.is_ok());
        assert!(check_host("localhost", 443).await.is_err());
    }

    #[test]
    fn an_operator_allows_networks_by_name() {
        let allow: Vec<ipnet::IpNet> = vec!["127.0.0.0/8".parse().unwrap()];
        assert!(permitted("127.0.0.1".parse().unwrap(), &allow));
        assert!(!permitted("169.254.169.254".parse().unwrap(), &allow));
        assert!(permitted("8.8.8.8".parse().unwrap(), &[]));
    }
}
