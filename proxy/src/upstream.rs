//! The upstream exchange, made by the proxy itself through Pingora's pooled `Connector` so that
//! the downstream header can wait until usage and cost are known.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use gw_shared::providers::UpstreamUrl;
use pingora::connectors::http::Connector;
use pingora::http::RequestHeader;
use pingora::protocols::http::client::HttpSession;
use pingora::upstreams::peer::HttpPeer;
use pingora::{Error, ErrorType};

/// Why one attempt at one deployment failed, and whether another deployment may be tried.
#[derive(Debug)]
pub struct AttemptError {
    pub kind: AttemptErrorKind,
    pub message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptErrorKind {
    /// Could not connect (refused, unreachable, DNS, TLS).
    Connect,
    /// Connected, but a read or write took too long.
    Timeout,
    /// The connection broke mid-exchange.
    Io,
    /// The upstream answered something that is not a valid response.
    BadResponse,
}

impl AttemptError {
    fn new(kind: AttemptErrorKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into() }
    }

    fn from_pingora(provider: &str, e: &Error) -> Self {
        use ErrorType::*;
        let kind = match e.etype() {
            ConnectTimedout | ConnectRefused | ConnectNoRoute | ConnectError | TLSHandshakeFailure
            | TLSHandshakeTimedout | InvalidCert | HandshakeError | SocketError | BindError => {
                AttemptErrorKind::Connect
            }
            ReadTimedout | WriteTimedout => AttemptErrorKind::Timeout,
            InvalidHTTPHeader | H1Error | H2Error | InvalidH2 => AttemptErrorKind::BadResponse,
            _ => AttemptErrorKind::Io,
        };
        let what = match kind {
            AttemptErrorKind::Connect => "could not connect to",
            AttemptErrorKind::Timeout => "timed out talking to",
            AttemptErrorKind::Io => "lost the connection to",
            AttemptErrorKind::BadResponse => "got a malformed HTTP response from",
        };
        Self::new(kind, format!("gw {what} upstream provider '{provider}': {}", e.etype().as_str()))
    }
}

pub struct Upstreams {
    connector: Connector,
    connect_timeout: Duration,
    read_timeout: Duration,
    max_body: usize,
}

/// One open exchange with an upstream, after its response header arrived.
pub struct UpstreamCall {
    pub session: HttpSession,
    peer: HttpPeer,
    pub status: u16,
    pub content_type: String,
}

impl Upstreams {
    pub fn new(connect_timeout: Duration, read_timeout: Duration, max_body: usize) -> Self {
        Self { connector: Connector::new(None), connect_timeout, read_timeout, max_body }
    }

    async fn resolve(url: &UpstreamUrl, provider: &str) -> Result<SocketAddr, AttemptError> {
        if let Ok(ip) = url.host.parse::<std::net::IpAddr>() {
            return Ok(SocketAddr::new(ip, url.port));
        }
        tokio::net::lookup_host((url.host.as_str(), url.port)).await.ok().and_then(|mut addrs| addrs.next()).ok_or_else(
            || {
                AttemptError::new(
                    AttemptErrorKind::Connect,
                    format!("gw could not resolve the host of upstream provider '{provider}'"),
                )
            },
        )
    }

    /// Sends `body` as a JSON POST and waits for the response header. A pooled connection that
    /// turns out to be dead is replaced once by a fresh one.
    pub async fn post_json(
        &self,
        provider: &str,
        url: &UpstreamUrl,
        api_key: Option<&str>,
        path: &str,
        body: Bytes,
        stream: bool,
    ) -> Result<UpstreamCall, AttemptError> {
        let addr = Self::resolve(url, provider).await?;
        let sni = if url.tls { url.host.clone() } else { String::new() };
        let mut peer = HttpPeer::new(addr, url.tls, sni);
        peer.options.connection_timeout = Some(self.connect_timeout);
        peer.options.total_connection_timeout = Some(self.connect_timeout * 2);

        let mut last_err = None;
        for _ in 0..2 {
            let (mut session, reused) =
                self.connector.get_http_session(&peer).await.map_err(|e| AttemptError::from_pingora(provider, &e))?;
            session.set_read_timeout(Some(self.read_timeout));
            session.set_write_timeout(Some(self.read_timeout));
            let req = build_request(url, api_key, path, body.len(), stream)
                .map_err(|e| AttemptError::new(AttemptErrorKind::Io, format!("bad upstream request: {e}")))?;
            match exchange(&mut session, req, body.clone()).await {
                Ok(()) => {
                    let (status, content_type) = match session.response_header() {
                        Some(h) => (
                            h.status.as_u16(),
                            h.headers
                                .get(http::header::CONTENT_TYPE)
                                .and_then(|v| v.to_str().ok())
                                .unwrap_or_default()
                                .to_ascii_lowercase(),
                        ),
                        None => {
                            return Err(AttemptError::new(
                                AttemptErrorKind::BadResponse,
                                format!("upstream provider '{provider}' sent no response header"),
                            ))
                        }
                    };
                    return Ok(UpstreamCall { session, peer, status, content_type });
                }
                Err(e) => {
                    let err = AttemptError::from_pingora(provider, &e);
                    // Only a reused connection earns a second try: it may have been closed by the
                    // upstream while idle. A fresh connection failing is the upstream's answer.
                    if reused && err.kind == AttemptErrorKind::Io {
                        last_err = Some(err);
                        continue;
                    }
                    return Err(err);
                }
            }
        }
        Err(last_err.unwrap_or_else(|| AttemptError::new(AttemptErrorKind::Io, "upstream exchange failed")))
    }

    /// Largest upstream body (or stream) accepted.
    pub fn max_body(&self) -> usize {
        self.max_body
    }

    /// Reads the whole response body, up to the configured limit.
    pub async fn read_body(&self, call: &mut UpstreamCall, provider: &str) -> Result<Bytes, AttemptError> {
        let mut buf = BytesMut::new();
        loop {
            match call.session.read_response_body().await {
                Ok(Some(chunk)) => {
                    if buf.len() + chunk.len() > self.max_body {
                        return Err(AttemptError::new(
                            AttemptErrorKind::BadResponse,
                            format!("upstream provider '{provider}' sent a response over {} bytes", self.max_body),
                        ));
                    }
                    buf.extend_from_slice(&chunk);
                }
                Ok(None) => return Ok(buf.freeze()),
                Err(e) => return Err(AttemptError::from_pingora(provider, &e)),
            }
        }
    }

    /// Returns a fully read connection to the pool (or closes it when it cannot be reused).
    pub async fn release(&self, mut call: UpstreamCall) {
        if call.session.response_done() {
            self.connector.release_http_session(call.session, &call.peer, Some(Duration::from_secs(60))).await;
        }
    }
}

fn build_request(
    url: &UpstreamUrl,
    api_key: Option<&str>,
    path: &str,
    len: usize,
    stream: bool,
) -> pingora::Result<RequestHeader> {
    let mut req = RequestHeader::build("POST", url.path(path).as_bytes(), Some(8))?;
    req.insert_header("Host", url.host_header())?;
    req.insert_header("Content-Type", "application/json")?;
    req.insert_header("Content-Length", len)?;
    req.insert_header("Accept", if stream { "text/event-stream" } else { "application/json" })?;
    req.insert_header("Accept-Encoding", "identity")?;
    req.insert_header("User-Agent", concat!("gw/", env!("CARGO_PKG_VERSION")))?;
    if let Some(key) = api_key {
        req.insert_header("Authorization", format!("Bearer {key}"))?;
    }
    Ok(req)
}

async fn exchange(session: &mut HttpSession, req: RequestHeader, body: Bytes) -> pingora::Result<()> {
    session.write_request_header(Box::new(req)).await?;
    session.write_request_body(body, true).await?;
    session.finish_request_body().await?;
    loop {
        session.read_response_header().await?;
        match session.response_header() {
            Some(h) if h.status.is_informational() => continue,
            _ => return Ok(()),
        }
    }
}
