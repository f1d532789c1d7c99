//! A provider's base URL, split into what a connector needs.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamUrl {
    pub tls: bool,
    pub host: String,
    pub port: u16,
    /// Path prefix without a trailing slash, e.g. `/v1`.
    pub base_path: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UrlError(String);

impl fmt::Display for UrlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid base_url: {}", self.0)
    }
}

impl std::error::Error for UrlError {}

impl UpstreamUrl {
    pub fn parse(text: &str) -> Result<Self, UrlError> {
        let uri: http::Uri = text.parse().map_err(|e| UrlError(format!("{text:?}: {e}")))?;
        let tls = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => return Err(UrlError(format!("{text:?}: scheme must be http or https"))),
        };
        let host = uri.host().ok_or_else(|| UrlError(format!("{text:?}: no host")))?;
        let host = host.trim_start_matches('[').trim_end_matches(']').to_string();
        let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
        if uri.query().is_some() {
            return Err(UrlError(format!("{text:?}: must not carry a query")));
        }
        let base_path = uri.path().trim_end_matches('/').to_string();
        Ok(Self { tls, host, port, base_path })
    }

    /// `host:port` for connecting (IPv6 literals bracketed).
    pub fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// Value of the `Host` header: the port is omitted when it is the scheme's default.
    pub fn host_header(&self) -> String {
        let default = if self.tls { 443 } else { 80 };
        if self.port == default {
            self.host.clone()
        } else {
            self.authority()
        }
    }

    pub fn path(&self, endpoint: &str) -> String {
        format!("{}{}", self.base_path, endpoint)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses() {
        let u = UpstreamUrl::parse("https://api.openai.com/v1/").unwrap();
        assert_eq!((u.tls, u.host.as_str(), u.port, u.base_path.as_str()), (true, "api.openai.com", 443, "/v1"));
        assert_eq!(u.host_header(), "api.openai.com");
        assert_eq!(u.path("/chat/completions"), "/v1/chat/completions");
        let u = UpstreamUrl::parse("http://127.0.0.1:9000").unwrap();
        assert_eq!((u.tls, u.port, u.base_path.as_str()), (false, 9000, ""));
        assert_eq!(u.authority(), "127.0.0.1:9000");
        assert_eq!(u.host_header(), "127.0.0.1:9000");
        assert!(UpstreamUrl::parse("ftp://x/v1").is_err());
        assert!(UpstreamUrl::parse("/v1").is_err());
        assert!(UpstreamUrl::parse("http://x/v1?a=b").is_err());
    }
}
