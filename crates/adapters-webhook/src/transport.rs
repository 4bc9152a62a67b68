//! The HTTP side of delivery.

use std::time::{Duration, Instant};

use async_trait::async_trait;
use domain::webhook::{OutgoingCall, TransportResponse, WebhookTransport};
use futures_util::StreamExt;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER, USER_AGENT};
use reqwest::Url;

use crate::signing::signature_header;
use crate::ssrf::{refusal, AddressPolicy, GuardedResolver};

/// The attempt log keeps this much of each answer.
pub const MAX_LOGGED_BODY_BYTES: usize = 20 * 1024;

#[derive(Debug, Clone)]
pub struct TransportConfig {
    pub policy: AddressPolicy,
    /// The whole call (contract §7: 15 s).
    pub timeout: Duration,
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

fn describe(e: &reqwest::Error) -> String {
    use std::error::Error;
    let kind = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "could not connect"
    } else {
        "request failed"
    };
    // The innermost cause says what really happened (refused address, TLS, reset, ...).
    let mut cause: &dyn Error = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    format!("{kind}: {cause}")
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
        let failed = |error: String, started: Instant| TransportResponse {
            status: None,
            retry_after_seconds: None,
            body: String::new(),
            error: Some(error),
            duration_ms: started.elapsed().as_millis() as u64,
        };
        let url = match self.precheck(&call.url) {
            Ok(url) => url,
            Err(e) => return failed(format!("refused: {e}"), started),
        };
        let headers = match Self::headers(&call, call.timestamp) {
            Ok(h) => h,
            Err(e) => return failed(e, started),
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
        let mut error = None;
        let mut stream = response.bytes_stream();
        while body.len() < MAX_LOGGED_BODY_BYTES {
            match stream.next().await {
                Some(Ok(chunk)) => body.extend_from_slice(&chunk),
                Some(Err(e)) => {
                    error = Some(describe(&e));
                    break;
                }
                None => break,
            }
        }
        body.truncate(MAX_LOGGED_BODY_BYTES);
        TransportResponse {
            status: Some(status),
            retry_after_seconds,
            body: String::from_utf8_lossy(&body).into_owned(),
            // A 2xx whose body broke off is still delivered: the receiver answered.
            error: if (200..300).contains(&status) {
                None
            } else {
                error
            },
            duration_ms: started.elapsed().as_millis() as u64,
        }
    }
}
