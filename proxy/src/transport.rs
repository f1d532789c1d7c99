//! The upstream exchange, made by the proxy itself through Pingora's pooled `Connector` so the
//! downstream header can wait until usage and cost are known. Transport only: the adapter built
//! the request and will read the answer; here are connections, host resolution, timeouts and
//! the request's deadline.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use gw_shared::providers::{LocalResponse, UpstreamError, UpstreamFailure, UpstreamRequest, UpstreamUrl};
use http::header::{ACCEPT, ACCEPT_ENCODING, CONTENT_LENGTH, CONTENT_TYPE, HOST, USER_AGENT};
use http::HeaderValue;
use moka::future::Cache;
use pingora::connectors::http::Connector;
use pingora::http::RequestHeader;
use pingora::protocols::http::client::HttpSession;
use pingora::upstreams::peer::HttpPeer;
use pingora::ErrorType;

use crate::error::ProxyError;

const JSON: HeaderValue = HeaderValue::from_static("application/json");
const EVENT_STREAM: HeaderValue = HeaderValue::from_static("text/event-stream");
const IDENTITY: HeaderValue = HeaderValue::from_static("identity");
const GW_AGENT: HeaderValue = HeaderValue::from_static(concat!("gw/", env!("CARGO_PKG_VERSION")));

pub struct Transport {
    connector: Connector,
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
    pub fn new(connect_timeout: Duration, read_timeout: Duration, max_body: usize, dns_ttl: Duration) -> Self {
        Self {
            connector: Connector::new(None),
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
    /// pooled connection that turns out dead is replaced once by a fresh one.
    pub async fn send(
        &self,
        provider: &Arc<str>,
        url: &UpstreamUrl,
        req: UpstreamRequest,
        stream: bool,
        timeouts: AttemptTimeouts,
    ) -> Result<(Head, Body), ProxyError> {
        let addr = self.resolve(url, provider).await?;
        let sni = if url.tls { url.host.clone() } else { String::new() };
        let mut peer = HttpPeer::new(addr, url.tls, sni);
        let connect = timeouts.connect.max(Duration::from_millis(1));
        peer.options.connection_timeout = Some(connect);
        peer.options.total_connection_timeout = Some(connect * 2);
        let host =
            HeaderValue::try_from(url.host_header()).map_err(|e| ProxyError::internal("upstream Host header", e))?;
        let read_timeout = timeouts.first_byte.max(Duration::from_millis(1));

        let mut last_err = None;
        for _ in 0..2 {
            let (mut session, reused) =
                self.connector.get_http_session(&peer).await.map_err(|e| attempt_error(provider, &e))?;
            session.set_read_timeout(Some(read_timeout));
            session.set_write_timeout(Some(read_timeout));
            let header = request_header(&req, host.clone(), stream)?;
            match exchange(&mut session, header, req.body.clone()).await {
                Ok(()) => {
                    let head = match session.response_header() {
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
        call.session.set_read_timeout(Some(self.read_timeout.min(remaining).max(Duration::from_millis(1))));
        match call.session.read_response_body().await {
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
            if session.response_done() {
                self.connector.release_http_session(session, &peer, Some(Duration::from_secs(60))).await;
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
