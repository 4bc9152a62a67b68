//! Requests refused before they reach actix-web (contract §10): a malformed request line or
//! header, headers too large, or headers that never finish. actix-http's HTTP/1 dispatcher
//! answers them itself with an empty-bodied `400`, `431` or `408` and closes the connection,
//! with no hook to render that answer. [`Guarded`] wraps each connection and rewrites such an
//! answer, as it is written, into a problem document with an `X-Request-Id`, logged at WARN.
//!
//! The dispatcher's own answer is recognised by its head: a 4xx status line followed by
//! `content-length: 0` and `connection: close`. The application never answers a 4xx without
//! a body (every error is a problem document), so nothing it writes is mistaken for one.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use actix_web::http::StatusCode;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::problem::ApiError;

/// The fixed part of the dispatcher's own answer after its status line.
const BARE_HEADERS: &[u8] = b"\r\ncontent-length: 0\r\nconnection: close\r\n";

/// A connection whose dispatcher-made error answers are rewritten into problem documents.
pub struct Guarded<IO> {
    io: IO,
    /// The rewritten answer, still to be written: once a rewrite happened the connection is
    /// closing, and everything the dispatcher wrote after it is dropped.
    pending: Option<Vec<u8>>,
}

impl<IO> Guarded<IO> {
    /// `io`, nothing rewritten yet.
    pub fn new(io: IO) -> Self {
        Self { io, pending: None }
    }
}

/// Where in `buf` the dispatcher's own error answer starts, its status, and where its head
/// ends.
fn bare_error(buf: &[u8]) -> Option<(usize, StatusCode, usize)> {
    let mut from = 0;
    while let Some(at) = find(&buf[from..], b"HTTP/1.1 4").map(|i| i + from) {
        from = at + 1;
        let line_end = match find(&buf[at..], b"\r\n") {
            Some(i) => at + i,
            None => continue,
        };
        if !buf[line_end..].starts_with(BARE_HEADERS) {
            continue;
        }
        let status = std::str::from_utf8(&buf[at + 9..at + 12])
            .ok()
            .and_then(|code| code.parse::<u16>().ok())
            .and_then(|code| StatusCode::from_u16(code).ok());
        let head_end = find(&buf[line_end..], b"\r\n\r\n").map(|i| line_end + i + 4);
        if let (Some(status), Some(head_end)) = (status, head_end) {
            return Some((at, status, head_end));
        }
    }
    None
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The problem answer that replaces the dispatcher's `status`, logged at WARN.
fn problem_answer(status: StatusCode) -> Vec<u8> {
    let request_id = ulid::Ulid::new().to_string().to_ascii_lowercase();
    let (code, title, detail) = match status {
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => (
            "headers_too_large",
            "Request headers too large",
            "the request line and headers are too large to read",
        ),
        StatusCode::REQUEST_TIMEOUT => (
            "request_timeout",
            "Request timeout",
            "the request headers did not arrive in time",
        ),
        _ => (
            "malformed_request",
            "Malformed request",
            "the request line or a header is not valid HTTP/1.1",
        ),
    };
    tracing::warn!(request_id = %request_id, status = status.as_u16(), code,
        "request refused before routing: {detail}");
    let body = ApiError::new(status, code, title, detail).json();
    let mut answer = format!(
        "HTTP/1.1 {} {}\r\ncontent-type: application/problem+json\r\ncontent-length: \
            {}\r\nx-request-id: {request_id}\r\nx-content-type-options: nosniff\r\nconnection: \
                close\r\n\r\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or("Client Error"),
        body.len()
    )
    .into_bytes();
    answer.extend_from_slice(&body);
    answer
}

impl<IO: AsyncRead + Unpin> AsyncRead for Guarded<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> Guarded<IO> {
    /// Writes what is pending; Ready once none is left.
    fn drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some(pending) = self.pending.as_mut().filter(|p| !p.is_empty()) {
            match Pin::new(&mut self.io).poll_write(cx, pending) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => {
                    pending.drain(..n);
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Guarded<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.pending.is_some() {
            // The rewritten answer ends the connection: nothing after it is sent.
            return match self.drain(cx) {
                Poll::Ready(Ok(())) => Poll::Ready(Ok(buf.len())),
                Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                Poll::Pending => Poll::Pending,
            };
        }
        if let Some((at, status, head_end)) = bare_error(buf) {
            let mut rewritten = buf[..at].to_vec();
            rewritten.extend_from_slice(&problem_answer(status));
            // Its empty body has nothing after the head; anything else is dropped.
            let _ = head_end;
            self.pending = Some(rewritten);
            return match self.drain(cx) {
                Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                // Taken whole: the rest is written from `pending` by the next calls.
                _ => Poll::Ready(Ok(buf.len())),
            };
        }
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.drain(cx) {
            Poll::Ready(Ok(())) => Pin::new(&mut self.io).poll_flush(cx),
            other => other,
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.drain(cx) {
            Poll::Ready(Ok(())) => Pin::new(&mut self.io).poll_shutdown(cx),
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dispatchers_own_answers_are_recognised_and_nothing_else() {
        let bare = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\ndate: \
            Wed, 25 Nov 2026 11:04:01 GMT\r\n\r\n";
        assert_eq!(
            bare_error(bare).map(|(at, s, end)| (at, s.as_u16(), end)),
            Some((0, 400, bare.len()))
        );
        let mut pipelined = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}".to_vec();
        let at = pipelined.len();
        pipelined.extend_from_slice(bare);
        assert_eq!(bare_error(&pipelined).map(|(a, _, _)| a), Some(at));
        let problem = b"HTTP/1.1 400 Bad Request\r\ncontent-type: \
            application/problem+json\r\ncontent-length: 10\r\n\r\n{\"a\":\"b\"}";
        assert_eq!(bare_error(problem), None);
        let too_large = b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: \
            0\r\nconnection: close\r\ndate: x\r\n\r\n";
        assert_eq!(bare_error(too_large).map(|(_, s, _)| s.as_u16()), Some(431));
    }

    #[test]
    fn a_rewritten_answer_is_a_problem_document_with_a_request_id() {
        let answer = String::from_utf8(problem_answer(StatusCode::BAD_REQUEST)).expect("utf-8");
        let (head, body) = answer.split_once("\r\n\r\n").expect("head");
        assert!(head.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{head}");
        assert!(head.contains("content-type: application/problem+json"));
        assert!(head.contains("x-request-id: "));
        assert!(head.contains(&format!("content-length: {}", body.len())));
        let doc: serde_json::Value = serde_json::from_str(body).expect("json");
        assert_eq!(doc["code"], "malformed_request");
        assert_eq!(doc["status"], 400);
    }
}
