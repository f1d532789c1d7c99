//! Reading the request body, bounded: a declared or actual size over the limit is a 413 before
//! more than the limit is buffered.

use bytes::{Bytes, BytesMut};
use pingora::proxy::Session;

use crate::error::ProxyError;

pub async fn read_bounded(session: &mut Session, max: usize) -> Result<Bytes, ProxyError> {
    let declared = session
        .req_header()
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return Err(ProxyError::BodyTooLarge(max));
    }
    let mut buf = BytesMut::with_capacity(declared.map_or(4096, |n| n as usize));
    loop {
        match session.read_request_body().await {
            Ok(Some(chunk)) => {
                if buf.len() + chunk.len() > max {
                    return Err(ProxyError::BodyTooLarge(max));
                }
                buf.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(buf.freeze()),
            Err(e) => {
                return Err(ProxyError::BadRequest {
                    message: format!("Could not read the request body: {}", e.etype().as_str()),
                    param: None,
                })
            }
        }
    }
}
