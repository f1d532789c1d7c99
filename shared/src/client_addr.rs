//! The client's address behind trusted proxies. A request whose peer is one of the operator's
//! proxies (load balancers, ingress) carries the client in `X-Forwarded-For`; the address is
//! read from the right, skipping the trusted proxies' own hops, so a client cannot choose its
//! address by sending a header of its own (anything left of the first untrusted hop is what the
//! client said, not what a proxy saw). A peer outside the list is the client, whatever the
//! header says.

use std::net::IpAddr;

use ipnet::IpNet;

/// Most hops read from one header.
const MAX_HOPS: usize = 32;

fn trusted(ip: IpAddr, proxies: &[IpNet]) -> bool {
    proxies.iter().any(|n| n.contains(&ip))
}

/// The client address of a request from `peer` with `forwarded_for` (the header's values,
/// joined), given the trusted proxies.
pub fn client_address(peer: IpAddr, forwarded_for: Option<&str>, proxies: &[IpNet]) -> IpAddr {
    if proxies.is_empty() || !trusted(peer, proxies) {
        return peer;
    }
    let Some(header) = forwarded_for else { return peer };
    let mut client = peer;
    for hop in header.rsplit(',').take(MAX_HOPS) {
        let Ok(ip) = hop.trim().parse::<IpAddr>() else {
            // An unreadable hop: the last address a trusted proxy vouched for stands.
            return client;
        };
        client = ip;
        if !trusted(ip, proxies) {
            return ip;
        }
    }
    client
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn nets(v: &[&str]) -> Vec<IpNet> {
        v.iter().map(|s| s.parse().unwrap()).collect()
    }

    #[test]
    fn the_first_untrusted_hop_from_the_right_is_the_client() {
        let lb = nets(&["10.0.0.0/8"]);
        assert_eq!(client_address(ip("10.0.0.5"), Some("203.0.113.7"), &lb), ip("203.0.113.7"));
        // A client's own header is to the left of what the load balancer appended.
        assert_eq!(client_address(ip("10.0.0.5"), Some("1.2.3.4, 203.0.113.7"), &lb), ip("203.0.113.7"));
        // Two proxies of the operator's in a row.
        assert_eq!(client_address(ip("10.0.0.5"), Some("203.0.113.7, 10.0.0.9"), &lb), ip("203.0.113.7"));
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_it_says() {
        let lb = nets(&["10.0.0.0/8"]);
        assert_eq!(client_address(ip("198.51.100.1"), Some("1.2.3.4"), &lb), ip("198.51.100.1"));
        assert_eq!(client_address(ip("10.0.0.5"), Some("1.2.3.4"), &[]), ip("10.0.0.5"));
        assert_eq!(client_address(ip("10.0.0.5"), None, &lb), ip("10.0.0.5"));
    }

    #[test]
    fn garbage_stops_at_the_last_vouched_address() {
        let lb = nets(&["10.0.0.0/8"]);
        assert_eq!(client_address(ip("10.0.0.5"), Some("junk, 10.0.0.9"), &lb), ip("10.0.0.9"));
        assert_eq!(client_address(ip("10.0.0.5"), Some("not an address"), &lb), ip("10.0.0.5"));
    }
}
