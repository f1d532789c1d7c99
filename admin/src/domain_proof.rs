//! Proof that an organization controls an e-mail domain: a TXT record
//! `gw-domain-verification=<token>` under `_gw-verification.<domain>`, looked up through the
//! resolver the operator configures (`admin.dns_resolver`, else the system's). The token is the
//! claim's own, so another organization's record proves nothing for this one. Answers are not
//! cached: a check sees what DNS says now.

use std::net::SocketAddr;
use std::time::Duration;

use hickory_resolver::config::{NameServerConfigGroup, ResolverConfig, ResolverOpts};
use hickory_resolver::error::ResolveErrorKind;
use hickory_resolver::TokioAsyncResolver;

/// The name the TXT record is published under.
pub fn record_name(domain: &str) -> String {
    format!("_gw-verification.{domain}")
}

/// The TXT record's value for a claim's token.
pub fn record_value(token: &str) -> String {
    format!("gw-domain-verification={token}")
}

/// What a lookup found.
#[derive(Debug, PartialEq, Eq)]
pub enum Found {
    /// A TXT record holds the expected value.
    Proven,
    /// The name has TXT records (this many), none of them the expected one.
    Other(usize),
    /// No TXT record at the name.
    Nothing,
}

fn resolver_with(server: SocketAddr, opts: ResolverOpts) -> TokioAsyncResolver {
    let group = NameServerConfigGroup::from_ips_clear(&[server.ip()], server.port(), true);
    TokioAsyncResolver::tokio(ResolverConfig::from_parts(None, vec![], group), opts)
}

/// A resolver asking `server` only, nothing cached (the outbound guard looks names up through it
/// when the operator configured one), with `/etc/hosts` consulted first, as the system does.
pub fn resolver_at(server: SocketAddr) -> TokioAsyncResolver {
    let mut opts = ResolverOpts::default();
    opts.cache_size = 0;
    opts.timeout = Duration::from_secs(5);
    opts.attempts = 2;
    resolver_with(server, opts)
}

pub struct DomainProof {
    resolver: TokioAsyncResolver,
}

#[derive(Debug, thiserror::Error)]
#[error("the DNS lookup of {name} failed: {reason}")]
pub struct LookupFailed {
    pub name: String,
    pub reason: String,
}

impl DomainProof {
    pub fn new(server: Option<SocketAddr>) -> Result<Self, Box<dyn std::error::Error>> {
        let mut opts = ResolverOpts::default();
        opts.cache_size = 0;
        opts.timeout = Duration::from_secs(5);
        opts.attempts = 2;
        opts.use_hosts_file = false;
        let resolver = match server {
            Some(addr) => resolver_with(addr, opts),
            None => {
                let (config, _) = hickory_resolver::system_conf::read_system_conf()?;
                TokioAsyncResolver::tokio(config, opts)
            }
        };
        Ok(DomainProof { resolver })
    }

    /// Looks up the claim's record.
    pub async fn check(&self, domain: &str, token: &str) -> Result<Found, LookupFailed> {
        // A trailing dot: the name is absolute, never searched under the resolver's domains.
        let name = format!("{}.", record_name(domain));
        let expected = record_value(token);
        match self.resolver.txt_lookup(name.as_str()).await {
            Ok(answer) => {
                let values: Vec<String> = answer
                    .iter()
                    .map(|txt| txt.txt_data().iter().map(|part| String::from_utf8_lossy(part)).collect::<String>())
                    .collect();
                if values.iter().any(|v| v.trim() == expected) {
                    Ok(Found::Proven)
                } else {
                    Ok(Found::Other(values.len()))
                }
            }
            Err(e) if matches!(e.kind(), ResolveErrorKind::NoRecordsFound { .. }) => Ok(Found::Nothing),
            Err(e) => Err(LookupFailed { name: record_name(domain), reason: e.to_string() }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_named_under_the_domain() {
        assert_eq!(record_name("example.com"), "_gw-verification.example.com");
        assert_eq!(record_value("abc"), "gw-domain-verification=abc");
    }
}
