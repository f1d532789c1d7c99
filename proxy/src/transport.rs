//! The upstream exchange, made by the proxy itself over Pingora's pooled connections so the
//! downstream header can wait until usage and cost are known. Transport only: the adapter built
//! the request and will read the answer; here are connections, host resolution, timeouts and
//! the request's deadline.
//!
//! The request goes out in one write, header and body together: Pingora's client session flushes
//! the header on its own, and on loopback or a LAN every extra segment costs a wake-up of the
//! upstream and the kernel's delivery work on the proxy's core (a third of its time per request
//! in the profile). Pingora's HTTP/1.1 session reads the response.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use gw_shared::providers::{LocalResponse, UpstreamError, UpstreamFailure, UpstreamRequest, UpstreamUrl};
use http::header::{ACCEPT, ACCEPT_ENCODING, CONTENT_LENGTH, CONTENT_TYPE, HOST, USER_AGENT};
use http::HeaderValue;
use moka::future::Cache;
use pingora::connectors::{ConnectorOptions, TransportConnector};
use pingora::http::RequestHeader;
use pingora::protocols::http::v1::client::{http_req_header_to_wire, HttpSession};
use pingora::protocols::Stream;
use pingora::upstreams::peer::{HttpPeer, Peer};
use pingora::{Error, ErrorType};
use pingora_timeout::fast_timeout::fast_timeout;
use tokio::io::AsyncWriteExt;

use crate::error::ProxyError;

const JSON: HeaderValue = HeaderValue::from_static("application/json");
const EVENT_STREAM: HeaderValue = HeaderValue::from_static("text/event-stream");
const IDENTITY: HeaderValue = HeaderValue::from_static("identity");
const GW_AGENT: HeaderValue = HeaderValue::from_static(concat!("gw/", env!("CARGO_PKG_VERSION")));

pub struct Transport {
    connector: TransportConnector,
    connect_timeout: Duration,
    read_timeout: Duration,
    max_body: usize,
    /// `host:port` → address, refreshed after the TTL rather than resolved per attempt.
    dns: Cache<(String, u16), SocketAddr>,
}

/// An answer's body, from the network or from an in-process provider.
pub enum Body {
    Http(Box<UpstreamCall>),
    Local(Option<Bytes>),
}

/// One open exchange with an upstream, after its response header arrived.
pub struct UpstreamCall {
    session: HttpSession,
    peer: HttpPeer,
    provider: Arc<str>,
    read: usize,
}

/// One attempt's connection and response-header timeouts (the deployment's, within the
/// attempt's time left).
#[derive(Debug, Clone, Copy)]
pub struct AttemptTimeouts {
    pub connect: Duration,
    pub first_byte: Duration,
}

/// The status line and type of an answer.
pub struct Head {
    pub status: u16,
    pub event_stream: bool,
}

impl Transport {
    pub fn new(
        connect_timeout: Duration,
        read_timeout: Duration,
        max_body: usize,
        dns_ttl: Duration,
        keepalive_pool: usize,
    ) -> Self {
        Self {
            connector: TransportConnector::new(Some(ConnectorOptions::new(keepalive_pool.max(1)))),
            connect_timeout,
            read_timeout,
            max_body,
            dns: Cache::builder().max_capacity(1024).time_to_live(dns_ttl).build(),
        }
    }

    async fn resolve(&self, url: &UpstreamUrl, provider: &Arc<str>) -> Result<SocketAddr, ProxyError> {
        if let Ok(ip) = url.host.parse::<IpAddr>() {
            return Ok(SocketAddr::new(ip, url.port));
        }
        let key = (url.host.clone(), url.port);
        self.dns
            .try_get_with(key, async move {
                // The resolver's own timeouts run to tens of seconds; every request to this host
                // waits on this one lookup.
                tokio::time::timeout(self.connect_timeout, tokio::net::lookup_host((url.host.as_str(), url.port)))
                    .await
                    .ok()
                    .and_then(Result::ok)
                    .and_then(|mut addrs| addrs.next())
                    .ok_or(())
            })
            .await
            .map_err(|_| ProxyError::UpstreamConnect { provider: provider.clone(), why: "host name did not resolve" })
    }

    /// Sends the request and waits for the response header within the attempt's timeouts. A
    /// pooled connection that turns out dead is replaced once by a fresh one. `public_only`: the
    /// URL is a tenant's, and the address dialled must be public (`gw_shared::net_guard`).
    pub async fn send(
        &self,
        provider: &Arc<str>,
        url: &UpstreamUrl,
        req: UpstreamRequest,
        stream: bool,
        timeouts: AttemptTimeouts,
        public_only: bool,
    ) -> Result<(Head, Body), ProxyError> {
        let addr = self.resolve(url, provider).await?;
        if public_only && !gw_shared::net_guard::is_public(addr.ip()) {
            return Err(ProxyError::UpstreamConnect {
                provider: provider.clone(),
                why: "its address is not public, and an organization's base URL must be",
            });
        }
        let sni = if url.tls { url.host.clone() } else { String::new() };
        let mut peer = HttpPeer::new(addr, url.tls, sni);
        let connect = timeouts.connect.max(Duration::from_millis(1));
        peer.options.connection_timeout = Some(connect);
        peer.options.total_connection_timeout = Some(connect * 2);
        let host =
            HeaderValue::try_from(url.host_header()).map_err(|e| ProxyError::internal("upstream Host header", e))?;
        let read_timeout = timeouts.first_byte.max(Duration::from_millis(1));

        let header = request_header(&req, host, stream)?;
        let wire = request_bytes(&header, &req.body)?;
        let mut last_err = None;
        for _ in 0..2 {
            let (conn, reused) = self.connector.get_stream(&peer).await.map_err(|e| attempt_error(provider, &e))?;
            match exchange(conn, &peer, &wire, read_timeout).await {
                Ok(session) => {
                    let head = match session.resp_header() {
                        Some(h) => Head {
                            status: h.status.as_u16(),
                            event_stream: h
                                .headers
                                .get(CONTENT_TYPE)
                                .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream")),
                        },
                        None => {
                            return Err(ProxyError::upstream(
                                provider,
                                UpstreamError::bad_response("no response header"),
                            ))
                        }
                    };
                    let call = UpstreamCall { session, peer, provider: provider.clone(), read: 0 };
                    return Ok((head, Body::Http(Box::new(call))));
                }
                Err(e) => {
                    let err = attempt_error(provider, &e);
                    // Only a reused connection earns a second try: the upstream may have closed it
                    // while idle. A fresh connection failing is the upstream's answer.
                    if reused && e.etype() != &ErrorType::ReadTimedout {
                        last_err = Some(err);
                        continue;
                    }
                    return Err(err);
                }
            }
        }
        Err(last_err.unwrap_or(ProxyError::UpstreamConnect { provider: provider.clone(), why: "exchange failed" }))
    }

    /// An in-process answer, in the same shape as a network one.
    pub fn local(resp: LocalResponse) -> (Head, Body) {
        let head = Head { status: resp.status, event_stream: resp.content_type.starts_with("text/event-stream") };
        (head, Body::Local(Some(resp.body)))
    }

    /// The next piece of the body; `None` at its end. Bounded by the upstream body limit, and each
    /// read by the read timeout and the request's deadline.
    pub async fn next_chunk(&self, body: &mut Body, remaining: Duration) -> Result<Option<Bytes>, ProxyError> {
        let call = match body {
            Body::Local(b) => return Ok(b.take()),
            Body::Http(call) => call,
        };
        call.session.read_timeout = Some(self.read_timeout.min(remaining).max(Duration::from_millis(1)));
        match call.session.read_body_bytes().await {
            Ok(Some(chunk)) => {
                call.read += chunk.len();
                if call.read > self.max_body {
                    return Err(ProxyError::upstream(
                        &call.provider,
                        UpstreamError::bad_response(format!("response over the {}-byte limit", self.max_body)),
                    ));
                }
                Ok(Some(chunk))
            }
            Ok(None) => Ok(None),
            Err(e) => Err(attempt_error(&call.provider, &e)),
        }
    }

    /// Reads the whole body.
    pub async fn read_all(&self, body: &mut Body, remaining: Duration) -> Result<Bytes, ProxyError> {
        let mut buf = BytesMut::new();
        while let Some(chunk) = self.next_chunk(body, remaining).await? {
            if buf.is_empty() {
                buf = BytesMut::from(&chunk[..]);
            } else {
                buf.extend_from_slice(&chunk);
            }
        }
        Ok(buf.freeze())
    }

    /// Returns a fully read connection to the pool (or drops it when it cannot be reused).
    pub async fn release(&self, body: Body) {
        if let Body::Http(call) = body {
            let UpstreamCall { mut session, peer, .. } = *call;
            if session.is_body_done() {
                session.respect_keepalive();
                if let Some(stream) = session.reuse().await {
                    self.connector.release_stream(stream, peer.reuse_hash(), Some(Duration::from_secs(60)));
                }
            }
        }
    }
}

/// The upstream request header, built as plain `http` parts (Pingora's `insert_header` parses
/// every static name again).
fn request_header(req: &UpstreamRequest, host: HeaderValue, stream: bool) -> Result<RequestHeader, ProxyError> {
    let (mut parts, ()) = http::Request::new(()).into_parts();
    parts.method = http::Method::POST;
    parts.uri = req.path.parse().map_err(|e| ProxyError::internal("upstream request path", e))?;
    let h = &mut parts.headers;
    h.reserve(8 + req.headers.len());
    h.insert(HOST, host);
    h.insert(CONTENT_TYPE, JSON);
    h.insert(CONTENT_LENGTH, HeaderValue::from(req.body.len()));
    h.insert(ACCEPT, if stream { EVENT_STREAM } else { JSON });
    h.insert(ACCEPT_ENCODING, IDENTITY);
    h.insert(USER_AGENT, GW_AGENT);
    for (name, value) in &req.headers {
        h.insert(name.clone(), value.clone());
    }
    Ok(RequestHeader::from(parts))
}

/// The request as it goes on the wire: Pingora's own serialization of the header, then the body.
fn request_bytes(header: &RequestHeader, body: &[u8]) -> Result<BytesMut, ProxyError> {
    let mut wire = http_req_header_to_wire(header)
        .ok_or_else(|| ProxyError::Internal("upstream request header cannot be written".into()))?;
    wire.extend_from_slice(body);
    Ok(wire)
}

/// Writes the whole request at once and reads the response header (past any 1xx), each within
/// the attempt's first-byte timeout.
async fn exchange(mut conn: Stream, peer: &HttpPeer, wire: &[u8], timeout: Duration) -> pingora::Result<HttpSession> {
    let written = fast_timeout(timeout, async {
        conn.write_all(wire).await?;
        conn.flush().await
    })
    .await;
    match written {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(Error::because(ErrorType::WriteError, "writing the upstream request", e)),
        Err(_) => return Err(Error::explain(ErrorType::WriteTimedout, "writing the upstream request")),
    }
    let mut session = HttpSession::new_with_options(conn, peer);
    session.read_timeout = Some(timeout);
    loop {
        session.read_response().await?;
        match session.resp_header() {
            Some(h) if h.status.is_informational() => continue,
            _ => return Ok(session),
        }
    }
}

/// Maps a transport failure of one attempt: connect problems and timeouts may be retried on the
/// next deployment; a malformed answer counts as a bad response.
fn attempt_error(provider: &Arc<str>, e: &pingora::Error) -> ProxyError {
    use ErrorType::*;
    let provider = provider.clone();
    match e.etype() {
        ConnectTimedout => ProxyError::UpstreamConnect { provider, why: "connect timed out" },
        ConnectRefused => ProxyError::UpstreamConnect { provider, why: "connection refused" },
        ConnectNoRoute => ProxyError::UpstreamConnect { provider, why: "no route to host" },
        TLSHandshakeFailure | TLSHandshakeTimedout | InvalidCert | HandshakeError => {
            ProxyError::UpstreamConnect { provider, why: "TLS handshake failed" }
        }
        ConnectError | SocketError | BindError | ConnectProxyFailure => {
            ProxyError::UpstreamConnect { provider, why: "connect failed" }
        }
        ReadTimedout | WriteTimedout => ProxyError::UpstreamTimeout { provider },
        InvalidHTTPHeader | H1Error | H2Error | InvalidH2 => ProxyError::Upstream {
            provider,
            error: UpstreamError::bad_response(format!("malformed HTTP: {}", e.etype().as_str())),
        },
        other => ProxyError::Upstream {
            provider,
            error: UpstreamError::new(
                UpstreamFailure::Unavailable { status: None },
                format!("connection lost: {}", other.as_str()),
            ),
        },
    }
}
