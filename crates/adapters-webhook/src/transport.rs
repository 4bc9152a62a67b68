//! The HTTP side of delivery.

use std::time::{Duration, Instant};

use async_trait::async_trait;
use domain::webhook::{CallFailure, OutgoingCall, TransportResponse, WebhookTransport};
use futures_util::StreamExt;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER, USER_AGENT};
use reqwest::Url;

use crate::signing::signature_header;
use crate::ssrf::{refusal, AddressPolicy, GuardedResolver, Refused};

/// The attempt log keeps this much of each answer.
pub const MAX_LOGGED_BODY_BYTES: usize = 20 * 1024;

/// How the transport calls receivers.
#[derive(Debug, Clone)]
pub struct TransportConfig {
    /// The addresses a receiver may resolve to (contract §7: no private ranges unless allowed).
    pub policy: AddressPolicy,
    /// The whole call (contract §7: 15 s).
    pub timeout: Duration,
    /// Connecting alone.
    pub connect_timeout: Duration,
}

impl Default for TransportConfig {
    fn default() -> Self {
        TransportConfig {
            policy: AddressPolicy::default(),
            timeout: Duration::from_secs(15),
            connect_timeout: Duration::from_secs(5),
        }
    }
}

/// Signs and sends over a shared, pooled reqwest client.
pub struct HttpTransport {
    client: reqwest::Client,
    policy: AddressPolicy,
}

impl HttpTransport {
    /// A transport of `config`, with redirects and proxies off; fails only when the TLS
    /// backend cannot start.
    pub fn new(config: TransportConfig) -> Result<Self, reqwest::Error> {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .timeout(config.timeout)
            .connect_timeout(config.connect_timeout)
            .pool_max_idle_per_host(64)
            .pool_idle_timeout(Duration::from_secs(60))
            .dns_resolver(std::sync::Arc::new(GuardedResolver(config.policy.clone())))
            .build()?;
        Ok(HttpTransport {
            client,
            policy: config.policy,
        })
    }

    /// The URL's host, when it may be called (scheme, and IP literals, which reqwest does not
    /// pass to the resolver).
    fn precheck(&self, url: &str) -> Result<Url, String> {
        let parsed = Url::parse(url).map_err(|e| format!("is not a valid URL: {e}"))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err("must be an http or https URL".into());
        }
        match parsed.host() {
            None => return Err("must name a host".into()),
            Some(url::Host::Ipv4(ip)) => {
                if let Some(why) = self.policy.refuse(ip.into()) {
                    return Err(refusal(&ip.to_string(), "is", why));
                }
            }
            Some(url::Host::Ipv6(ip)) => {
                if let Some(why) = self.policy.refuse(ip.into()) {
                    return Err(refusal(&ip.to_string(), "is", why));
                }
            }
            Some(url::Host::Domain(_)) => {}
        }
        Ok(parsed)
    }

    fn headers(call: &OutgoingCall, timestamp: i64) -> Result<HeaderMap, String> {
        let mut headers = HeaderMap::new();
        for (name, value) in &call.headers {
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| format!("header name {name:?} is invalid"))?;
            let value = HeaderValue::from_str(value)
                .map_err(|_| format!("header {name} has an invalid value"))?;
            headers.insert(name, value);
        }
        let signature = signature_header(&call.secrets, &call.message_id, timestamp, &call.body);
        let fixed = [
            ("webhook-id", call.message_id.clone()),
            ("webhook-timestamp", timestamp.to_string()),
            ("webhook-signature", signature),
        ];
        for (name, value) in fixed {
            let value = HeaderValue::from_str(&value).map_err(|_| format!("{name} is invalid"))?;
            headers.insert(HeaderName::from_static(name), value);
        }
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(USER_AGENT, HeaderValue::from_static("workbench-webhooks/1"));
        Ok(headers)
    }
}

fn retry_after(headers: &HeaderMap) -> Option<u64> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(seconds);
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(
        at.duration_since(std::time::SystemTime::now())
            .map(|d| d.as_secs())
            .unwrap_or(0),
    )
}

/// What went wrong with a call, in words and as one of the domain's [`CallFailure`]s.
fn describe(e: &reqwest::Error) -> (String, CallFailure) {
    use std::error::Error;
    // The innermost cause says what really happened (refused address, TLS, reset, ...).
    let mut cause: &dyn Error = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    let (kind, failure) = if e.is_timeout() {
        ("timed out", CallFailure::Timeout)
    } else if cause.is::<Refused>() {
        ("could not connect", CallFailure::Refused)
    } else if e.is_connect() {
        ("could not connect", CallFailure::Connect)
    } else {
        ("request failed", CallFailure::Other)
    };
    (format!("{kind}: {cause}"), failure)
}

#[async_trait]
impl WebhookTransport for HttpTransport {
    async fn check_url(&self, url: &str) -> Result<(), String> {
        let parsed = self.precheck(url)?;
        if let Some(url::Host::Domain(host)) = parsed.host() {
            let port = parsed.port_or_known_default().unwrap_or(443);
            self.policy.resolve(host, port).await?;
        }
        Ok(())
    }

    async fn send(&self, call: OutgoingCall) -> TransportResponse {
        let started = Instant::now();
        let failed =
            |(error, failure): (String, CallFailure), started: Instant| TransportResponse {
                status: None,
                retry_after_seconds: None,
                body: String::new(),
                error: Some(error),
                failure: Some(failure),
                duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            };
        let url = match self.precheck(&call.url) {
            Ok(url) => url,
            Err(e) => return failed((format!("refused: {e}"), CallFailure::Refused), started),
        };
        let headers = match Self::headers(&call, call.timestamp) {
            Ok(h) => h,
            Err(e) => return failed((e, CallFailure::Other), started),
        };
        let method = match call.method {
            domain::webhook::HttpMethod::Post => reqwest::Method::POST,
            domain::webhook::HttpMethod::Put => reqwest::Method::PUT,
        };
        let response = match self
            .client
            .request(method, url)
            .headers(headers)
            .body(call.body)
            .send()
            .await
        {
            Ok(r) => r,
            Err(e) => return failed(describe(&e), started),
        };
        let status = response.status().as_u16();
        let retry_after_seconds = retry_after(response.headers());
        // Keep the start of the body; stop reading once there is enough.
        let mut body = Vec::new();
        let mut broke = None;
        let mut stream = response.bytes_stream();
        while body.len() < MAX_LOGGED_BODY_BYTES {
            match stream.next().await {
                Some(Ok(chunk)) => body.extend_from_slice(&chunk),
                Some(Err(e)) => {
                    broke = Some(describe(&e));
                    break;
                }
                None => break,
            }
        }
        body.truncate(MAX_LOGGED_BODY_BYTES);
        // A 2xx whose body broke off is still delivered: the receiver answered.
        let (error, failure) = match broke {
            Some((error, failure)) if !(200..300).contains(&status) => (Some(error), Some(failure)),
            _ => (None, None),
        };
        TransportResponse {
            status: Some(status),
            retry_after_seconds,
            body: String::from_utf8_lossy(&body).into_owned(),
            error,
            failure,
            duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn transport(allow: &str, timeout: Duration) -> HttpTransport {
        HttpTransport::new(TransportConfig {
            policy: AddressPolicy::parse(allow).expect("cidrs"),
            timeout,
            connect_timeout: timeout,
        })
        .expect("client")
    }

    fn call(url: String) -> OutgoingCall {
        OutgoingCall {
            url,
            method: domain::webhook::HttpMethod::Post,
            headers: Default::default(),
            message_id: "evt_1".into(),
            body: "{}".into(),
            secrets: vec![domain::webhook::new_secret()],
            timestamp: 1_700_000_000,
        }
    }

    /// A listener on loopback that does `serve` with each connection.
    async fn listener<F, Fut>(serve: F) -> String
    where
        F: Fn(tokio::net::TcpStream) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let address = listener.local_addr().expect("address");
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream));
            }
        });
        format!("http://{address}/hook")
    }

    #[tokio::test]
    async fn failed_calls_are_told_apart_so_that_attempts_are_counted_by_cause() {
        let quick = Duration::from_millis(300);
        // Refused by the address policy, as a literal and as a name: no call is made.
        let strict = transport("", quick);
        for url in ["http://127.0.0.1:9/hook", "http://localhost:9/hook"] {
            let got = strict.send(call(url.into())).await;
            assert_eq!(got.failure, Some(CallFailure::Refused), "{url}: {got:?}");
            assert_eq!(got.status, None);
        }
        let loopback = transport("127.0.0.0/8", quick);
        // Nothing listens: the connection is refused.
        let closed = {
            let socket = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            socket.local_addr().expect("address")
        };
        let got = loopback.send(call(format!("http://{closed}/hook"))).await;
        assert_eq!(got.failure, Some(CallFailure::Connect), "{got:?}");
        // A receiver that reads the request and never answers: the call times out.
        let silent = listener(|mut stream| async move {
            let mut buf = [0u8; 1024];
            while let Ok(n) = stream.read(&mut buf).await {
                if n == 0 {
                    break;
                }
            }
        })
        .await;
        let got = loopback.send(call(silent)).await;
        assert_eq!(got.failure, Some(CallFailure::Timeout), "{got:?}");
        assert!(got
            .error
            .as_deref()
            .is_some_and(|e| e.starts_with("timed out")));
        // An answer, whatever its status, is no failure of the call.
        let unavailable = listener(|mut stream| async move {
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf).await;
            let _ = stream
                .write_all(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 4\r\n\r\ndown")
                .await;
        })
        .await;
        let got = loopback.send(call(unavailable)).await;
        assert_eq!((got.status, got.failure), (Some(503), None), "{got:?}");
    }
}
