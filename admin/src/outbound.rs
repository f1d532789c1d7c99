//! The HTTP client for URLs a tenant chose (SSO identity providers: discovery, JWKS, token
//! endpoint), behind the one outbound guard (`gw_shared::net_guard`): a name is resolved by a
//! resolver that keeps only permitted addresses (public, or in `admin.outbound_allow`), an
//! address literal is checked before the request, redirects are never followed, answers are
//! read to at most 1 MiB, and every request has its timeouts.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use hickory_resolver::TokioAsyncResolver;
use ipnet::IpNet;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// The most of an answer read.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum OutboundError {
    /// The address is private (or otherwise not public) and the operator did not allow it.
    #[error("{0}")]
    Refused(String),
    #[error("the answer is larger than {MAX_BODY_BYTES} bytes")]
    TooLarge,
    #[error("{0}")]
    Http(#[from] reqwest::Error),
    #[error("{0}")]
    Build(#[from] http::Error),
}

impl OutboundError {
    /// The refusal somewhere in an error's chain (a library wraps ours), if it is one.
    pub fn refusal_in(e: &(dyn std::error::Error + 'static)) -> Option<String> {
        let mut cur = Some(e);
        while let Some(err) = cur {
            if let Some(OutboundError::Refused(why)) = err.downcast_ref::<OutboundError>() {
                return Some(why.clone());
            }
            cur = err.source();
        }
        None
    }
}

/// How names are looked up: the system's resolver, or the DNS server the operator configured
/// (`admin.dns_resolver`, as for domain proofs).
#[derive(Clone)]
enum Lookup {
    System,
    Dns(Arc<TokioAsyncResolver>),
}

impl Lookup {
    /// Every address `host` resolves to, within 5 seconds.
    async fn addresses(&self, host: &str) -> Result<Vec<IpAddr>, String> {
        let within = Duration::from_secs(5);
        let late = |_| format!("{host} did not resolve in time");
        match self {
            Lookup::System => Ok(tokio::time::timeout(within, tokio::net::lookup_host((host, 0)))
                .await
                .map_err(late)?
                .map_err(|e| format!("{host} does not resolve: {e}"))?
                .map(|a| a.ip())
                .collect()),
            Lookup::Dns(r) => {
                // A trailing dot: the name is absolute, never searched under the resolver's domains.
                let absolute = format!("{}.", host.trim_end_matches('.'));
                Ok(tokio::time::timeout(within, r.lookup_ip(absolute.as_str()))
                    .await
                    .map_err(late)?
                    .map_err(|e| format!("{host} does not resolve: {e}"))?
                    .iter()
                    .collect())
            }
        }
    }
}

/// Resolves host names to the permitted addresses only.
struct GuardedResolver {
    allow: Arc<Vec<IpNet>>,
    lookup: Lookup,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let (allow, lookup) = (self.allow.clone(), self.lookup.clone());
        Box::pin(async move {
            let host = name.as_str().to_string();
            let all = lookup.addresses(&host).await.map_err(|why| boxed(OutboundError::Refused(why)))?;
            let ok: Vec<SocketAddr> = all
                .iter()
                .filter(|ip| gw_shared::net_guard::permitted(**ip, &allow))
                .map(|ip| SocketAddr::new(*ip, 0))
                .collect();
            if ok.is_empty() {
                let shown = all.first().map(|a| a.to_string()).unwrap_or_default();
                return Err(boxed(OutboundError::Refused(format!(
                    "{host} resolves to {shown}, which is not a public address"
                ))));
            }
            let addrs: Addrs = Box::new(ok.into_iter());
            Ok(addrs)
        })
    }
}

fn boxed(e: OutboundError) -> Box<dyn std::error::Error + Send + Sync> {
    Box::new(e)
}

/// What [`Outbound::call`] answers: the OAuth/OIDC library's response type, or why not.
type Call<'a> = Pin<Box<dyn Future<Output = Result<http::Response<Vec<u8>>, OutboundError>> + Send + 'a>>;

pub struct Outbound {
    client: reqwest::Client,
    allow: Arc<Vec<IpNet>>,
    lookup: Lookup,
}

impl Outbound {
    /// `dns`: the DNS server names are looked up through; the system's resolver when unset.
    pub fn new(allow: Vec<IpNet>, dns: Option<SocketAddr>) -> Result<Self, reqwest::Error> {
        let allow = Arc::new(allow);
        let lookup = match dns {
            Some(server) => Lookup::Dns(Arc::new(crate::domain_proof::resolver_at(server))),
            None => Lookup::System,
        };
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(10))
            .dns_resolver(Arc::new(GuardedResolver { allow: allow.clone(), lookup: lookup.clone() }))
            .build()?;
        Ok(Outbound { client, allow, lookup })
    }

    /// Whether `url` may be a destination: `https://` (or `http://` when `allow_http`), no
    /// credentials in it, and a host whose every address is permitted (an address literal, or a
    /// name resolved now; it is checked again on every request). Why not, when it may not.
    pub async fn check_destination(&self, url: &str, allow_http: bool) -> Result<url::Url, String> {
        let parsed = url::Url::parse(url).map_err(|e| format!("is not a URL ({e})"))?;
        match parsed.scheme() {
            "https" => {}
            "http" if allow_http => {}
            _ => return Err("must be an https:// URL".into()),
        }
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Err("must not carry credentials".into());
        }
        let host = match parsed.host() {
            Some(url::Host::Domain(d)) => d.to_string(),
            Some(url::Host::Ipv4(ip)) => return self.permitted(IpAddr::V4(ip)).map(|_| parsed),
            Some(url::Host::Ipv6(ip)) => return self.permitted(IpAddr::V6(ip)).map(|_| parsed),
            None => return Err("has no host".into()),
        };
        let found = self.lookup.addresses(&host).await.map_err(|why| match why.contains("in time") {
            true => format!("names {host}, which did not resolve in time"),
            false => format!("names {host}, which does not resolve"),
        })?;
        if found.is_empty() {
            return Err(format!("names {host}, which does not resolve"));
        }
        for ip in found {
            if !gw_shared::net_guard::permitted(ip, &self.allow) {
                return Err(format!("names {host}, which resolves to {ip}, not a public address"));
            }
        }
        Ok(parsed)
    }

    fn permitted(&self, ip: IpAddr) -> Result<(), String> {
        if gw_shared::net_guard::permitted(ip, &self.allow) {
            Ok(())
        } else {
            Err(format!("names {ip}, which is not a public address"))
        }
    }

    /// POSTs `body` to `url` with `headers`, through the guard (an address literal checked here,
    /// names resolved to permitted addresses only, no redirects), within `timeout`. The status
    /// and at most `keep` bytes of the answer, or why there is none.
    pub async fn post(
        &self,
        url: &str,
        headers: &[(&str, String)],
        body: Vec<u8>,
        timeout: Duration,
        keep: usize,
    ) -> Result<(u16, String), String> {
        let parsed = url::Url::parse(url).map_err(|e| format!("not a URL: {e}"))?;
        match parsed.host() {
            Some(url::Host::Ipv4(ip)) => self.permitted(IpAddr::V4(ip))?,
            Some(url::Host::Ipv6(ip)) => self.permitted(IpAddr::V6(ip))?,
            _ => {}
        }
        let mut req = self.client.post(parsed).timeout(timeout).body(body);
        for (name, value) in headers {
            req = req.header(*name, value);
        }
        let mut response = req.send().await.map_err(|e| match OutboundError::refusal_in(&e) {
            Some(why) => why,
            None if e.is_timeout() => format!("no answer within {} s", timeout.as_secs()),
            None => format!("could not connect: {}", gw_shared::providers::log_snippet(e.to_string().as_bytes())),
        })?;
        let status = response.status().as_u16();
        let mut kept = Vec::new();
        while kept.len() < keep {
            match response.chunk().await {
                Ok(Some(chunk)) => kept.extend_from_slice(&chunk[..chunk.len().min(keep - kept.len())]),
                _ => break,
            }
        }
        Ok((status, String::from_utf8_lossy(&kept).into_owned()))
    }

    /// One request, for the OAuth/OIDC library (its `AsyncHttpClient` is any such function).
    pub fn call(&self, request: http::Request<Vec<u8>>) -> Call<'_> {
        Box::pin(async move {
            if let Some(host) = request.uri().host() {
                // The resolver never sees an address literal: it is checked here.
                if let Ok(ip) = host.trim_matches(['[', ']']).parse::<IpAddr>() {
                    if !gw_shared::net_guard::permitted(ip, &self.allow) {
                        return Err(OutboundError::Refused(format!("{ip} is not a public address")));
                    }
                }
            }
            let request = reqwest::Request::try_from(request)?;
            let mut response = self.client.execute(request).await?;
            let mut builder = http::Response::builder().status(response.status());
            for (name, value) in response.headers() {
                builder = builder.header(name, value);
            }
            let mut body = Vec::new();
            while let Some(chunk) = response.chunk().await? {
                if body.len() + chunk.len() > MAX_BODY_BYTES {
                    return Err(OutboundError::TooLarge);
                }
                body.extend_from_slice(&chunk);
            }
            Ok(builder.body(body)?)
        })
    }
}
