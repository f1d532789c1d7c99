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

/// Resolves host names to the permitted addresses only.
struct GuardedResolver {
    allow: Arc<Vec<IpNet>>,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let allow = self.allow.clone();
        Box::pin(async move {
            let host = name.as_str().to_string();
            let found = tokio::time::timeout(Duration::from_secs(5), tokio::net::lookup_host((host.as_str(), 0)))
                .await
                .map_err(|_| boxed(OutboundError::Refused(format!("{host} did not resolve in time"))))?
                .map_err(|e| boxed(OutboundError::Refused(format!("{host} does not resolve: {e}"))))?;
            let all: Vec<SocketAddr> = found.collect();
            let ok: Vec<SocketAddr> =
                all.iter().copied().filter(|a| gw_shared::net_guard::permitted(a.ip(), &allow)).collect();
            if ok.is_empty() {
                let shown = all.first().map(|a| a.ip().to_string()).unwrap_or_default();
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
}

impl Outbound {
    pub fn new(allow: Vec<IpNet>) -> Result<Self, reqwest::Error> {
        let allow = Arc::new(allow);
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(10))
            .dns_resolver(Arc::new(GuardedResolver { allow: allow.clone() }))
            .build()?;
        Ok(Outbound { client, allow })
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
