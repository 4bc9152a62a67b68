//! The [`PushSender`] port over HTTP (contract §8):
//! - FCM HTTP v1: an RS256 assertion signed with the service account's key is exchanged for an
//!   OAuth token (cached until a minute before it expires), then `messages:send`;
//! - APNs over HTTP/2: an ES256 provider token from the .p8 key (renewed every 40 minutes, as
//!   Apple asks for between 20 and 60), or the platform's certificate as the TLS client
//!   identity; the topic is the bundle id.
//!
//! What a provider's answer means (dead token, passing failure, refusal) is decided here, from
//! its documented error codes; what follows it is the domain's.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use domain::push::{
    provider_of, Provider, PushMessage, PushPlatform, PushSender, SendOutcome, SendReport,
    PAYLOAD_KEY,
};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use reqwest::header::HeaderMap;
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use crate::validate::{certificate_based, service_account_json};

/// The OAuth scope FCM HTTP v1 needs.
const FCM_SCOPE: &str = "https://www.googleapis.com/auth/firebase.messaging";
const JWT_BEARER: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";
/// APNs provider tokens are renewed after this (Apple: no sooner than 20, no later than 60 min).
const APNS_TOKEN_LIFETIME: Duration = Duration::from_secs(40 * 60);
/// FCM access tokens are renewed this long before they expire.
const OAUTH_MARGIN: Duration = Duration::from_secs(60);
/// FCM's longest time to live (4 weeks).
const FCM_MAX_TTL_SECONDS: i64 = 2_419_200;
/// How much of a provider's answer is kept in an error.
const MAX_REASON_CHARS: usize = 300;

/// Where the providers are. Production by default; tests point these at a local fake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderUrls {
    /// FCM's base: `{fcm}/v1/projects/{project}/messages:send`.
    pub fcm: String,
    /// Google's OAuth token endpoint, also the `aud` of the assertion. The service account's
    /// own `token_uri` is not followed: a credential must not choose where the service calls.
    pub google_token: String,
    /// APNs production (`APNS`) and development (`APNS_SANDBOX`) bases: `{base}/3/device/{token}`.
    pub apns: String,
    /// The APNs development base (`APNS_SANDBOX` platforms).
    pub apns_sandbox: String,
}

impl Default for ProviderUrls {
    fn default() -> Self {
        ProviderUrls {
            fcm: "https://fcm.googleapis.com".into(),
            google_token: "https://oauth2.googleapis.com/token".into(),
            apns: "https://api.push.apple.com".into(),
            apns_sandbox: "https://api.sandbox.push.apple.com".into(),
        }
    }
}

/// The push HTTP client could not be built (the TLS backend did not start).
#[derive(Debug, thiserror::Error)]
#[error("cannot build the push HTTP client: {0}")]
pub struct SenderError(#[from] reqwest::Error);

/// Sends pushes through FCM and APNs with the platform's credentials.
pub struct HttpPushSender {
    urls: ProviderUrls,
    timeout: Duration,
    /// FCM and Google's token endpoint.
    http: reqwest::Client,
    /// APNs with provider tokens: HTTP/2 only, one connection per host, kept open.
    apns: reqwest::Client,
    /// APNs with certificates: a client per certificate (the TLS identity is per connection).
    apns_by_certificate: Mutex<HashMap<String, reqwest::Client>>,
    /// FCM access tokens by credential; held across the fetch so one is fetched at a time.
    google_tokens: tokio::sync::Mutex<HashMap<String, (String, Instant)>>,
    /// APNs provider tokens by credential, with when they were signed.
    apns_tokens: Mutex<HashMap<String, (String, Instant)>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Identifies a credential without holding it: a change of credentials is a new cache entry.
fn fingerprint(parts: &[&str]) -> String {
    let mut hash = Sha256::new();
    for p in parts {
        hash.update(p.as_bytes());
        hash.update([0]);
    }
    hash.finalize()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn report(status: Option<u16>, outcome: SendOutcome) -> SendReport {
    SendReport { status, outcome }
}

fn refused(status: Option<u16>, why: impl Into<String>) -> SendReport {
    report(status, SendOutcome::Refused(why.into()))
}

fn transient(status: Option<u16>, why: impl Into<String>, retry_after: Option<u64>) -> SendReport {
    report(
        status,
        SendOutcome::Transient {
            reason: why.into(),
            retry_after_seconds: retry_after,
        },
    )
}

fn retry_after(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

fn clip(text: &str) -> String {
    text.chars().take(MAX_REASON_CHARS).collect()
}

fn unix_now() -> i64 {
    chrono::Utc::now().timestamp()
}

/// What a call answered: status, `Retry-After`, body (or why there was no answer).
async fn answer(
    request: reqwest::RequestBuilder,
) -> Result<(u16, Option<u64>, String), reqwest::Error> {
    let response = request.send().await?;
    let status = response.status().as_u16();
    let after = retry_after(response.headers());
    let body = response.text().await.unwrap_or_default();
    Ok((status, after, body))
}

/// The fields of a service account the sender needs.
struct ServiceAccount {
    project_id: String,
    client_email: String,
    private_key: String,
    private_key_id: Option<String>,
}

impl ServiceAccount {
    fn parse(credential: &str) -> Result<Self, String> {
        let obj = service_account_json(credential)
            .map_err(|_| "the platform's credential is not service-account JSON".to_owned())?;
        let text = |key: &str| obj.get(key).and_then(Value::as_str).map(str::to_owned);
        Ok(ServiceAccount {
            project_id: text("project_id").ok_or("the service account has no project_id")?,
            client_email: text("client_email").ok_or("the service account has no client_email")?,
            private_key: text("private_key").ok_or("the service account has no private_key")?,
            private_key_id: text("private_key_id"),
        })
    }
}

impl HttpPushSender {
    /// A sender to the providers at `urls`, each call within `timeout`.
    pub fn new(urls: ProviderUrls, timeout: Duration) -> Result<Self, SenderError> {
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .build()?;
        let apns = Self::apns_client(timeout, None)?;
        Ok(HttpPushSender {
            urls,
            timeout,
            http,
            apns,
            apns_by_certificate: Mutex::default(),
            google_tokens: tokio::sync::Mutex::default(),
            apns_tokens: Mutex::default(),
        })
    }

    /// HTTP/2 only (APNs speaks nothing else): ALPN `h2` over TLS, prior knowledge in clear.
    fn apns_client(
        timeout: Duration,
        identity: Option<reqwest::Identity>,
    ) -> Result<reqwest::Client, reqwest::Error> {
        let mut builder = reqwest::Client::builder()
            .http2_prior_knowledge()
            .timeout(timeout)
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy();
        if let Some(identity) = identity {
            builder = builder.identity(identity);
        }
        builder.build()
    }

    /// An FCM access token for this service account: cached, or fetched with a signed assertion.
    async fn google_token(
        &self,
        key: &str,
        account: &ServiceAccount,
    ) -> Result<String, SendReport> {
        let mut cache = self.google_tokens.lock().await;
        if let Some((token, until)) = cache.get(key) {
            if *until > Instant::now() {
                return Ok(token.clone());
            }
        }
        let now = unix_now();
        let mut header = Header::new(Algorithm::RS256);
        header.kid = account.private_key_id.clone();
        let claims = json!({
            "iss": account.client_email,
            "scope": FCM_SCOPE,
            "aud": self.urls.google_token,
            "iat": now,
            "exp": now + 3600,
        });
        let key_pem = EncodingKey::from_rsa_pem(account.private_key.as_bytes())
            .map_err(|_| refused(None, "the service account's private_key cannot sign"))?;
        let assertion = jsonwebtoken::encode(&header, &claims, &key_pem)
            .map_err(|e| refused(None, format!("cannot sign the OAuth assertion: {e}")))?;
        let request = self.http.post(&self.urls.google_token).form(&[
            ("grant_type", JWT_BEARER),
            ("assertion", assertion.as_str()),
        ]);
        let (status, after, body) = answer(request)
            .await
            .map_err(|e| transient(None, format!("Google's token endpoint: {e}"), None))?;
        let parsed: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        match status {
            200..=299 => {
                let token = parsed
                    .get("access_token")
                    .and_then(Value::as_str)
                    .ok_or_else(|| {
                        transient(Some(status), "Google answered no access_token", None)
                    })?;
                let lifetime = parsed
                    .get("expires_in")
                    .and_then(Value::as_u64)
                    .unwrap_or(3600);
                let until =
                    Instant::now() + Duration::from_secs(lifetime).saturating_sub(OAUTH_MARGIN);
                cache.insert(key.to_owned(), (token.to_owned(), until));
                Ok(token.to_owned())
            }
            400 | 401 | 403 => {
                let why = parsed
                    .get("error_description")
                    .or_else(|| parsed.get("error"))
                    .and_then(Value::as_str)
                    .unwrap_or("no reason given");
                Err(refused(
                    Some(status),
                    format!("Google refused the service account: {}", clip(why)),
                ))
            }
            _ => Err(transient(
                Some(status),
                format!("Google's token endpoint answered {status}"),
                after,
            )),
        }
    }

    async fn fcm(&self, platform: &PushPlatform, token: &str, message: &PushMessage) -> SendReport {
        let account = match ServiceAccount::parse(&platform.credential) {
            Ok(a) => a,
            Err(why) => return refused(None, why),
        };
        let key = fingerprint(&[&platform.id, &platform.credential]);
        let bearer = match self.google_token(&key, &account).await {
            Ok(t) => t,
            Err(report) => return report,
        };
        let url = format!(
            "{}/v1/projects/{}/messages:send",
            self.urls.fcm.trim_end_matches('/'),
            account.project_id
        );
        let request = self
            .http
            .post(url)
            .bearer_auth(bearer)
            .json(&fcm_body(platform, token, message));
        let (status, after, body) = match answer(request).await {
            Ok(a) => a,
            Err(e) => return transient(None, format!("FCM: {e}"), None),
        };
        let report = classify_fcm(status, after, &body);
        if status == 401 {
            // An access token revoked or expired early: fetch another for the retry.
            self.google_tokens.lock().await.remove(&key);
        }
        report
    }

    fn apns_provider_token(
        &self,
        key_id: &str,
        team_id: &str,
        p8: &str,
    ) -> Result<String, SendReport> {
        let key = fingerprint(&[key_id, team_id, p8]);
        let mut cache = lock(&self.apns_tokens);
        if let Some((token, signed)) = cache.get(&key) {
            if signed.elapsed() < APNS_TOKEN_LIFETIME {
                return Ok(token.clone());
            }
        }
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(key_id.to_owned());
        header.typ = None;
        let signing = EncodingKey::from_ec_pem(p8.as_bytes())
            .map_err(|_| refused(None, "the platform's .p8 key cannot sign"))?;
        let token = jsonwebtoken::encode(
            &header,
            &json!({"iss": team_id, "iat": unix_now()}),
            &signing,
        )
        .map_err(|e| refused(None, format!("cannot sign the APNs provider token: {e}")))?;
        cache.insert(key, (token.clone(), Instant::now()));
        Ok(token)
    }

    fn forget_apns_provider_token(&self, key_id: &str, team_id: &str, p8: &str) {
        lock(&self.apns_tokens).remove(&fingerprint(&[key_id, team_id, p8]));
    }

    fn apns_certificate_client(
        &self,
        platform: &PushPlatform,
        certificate: &str,
    ) -> Result<reqwest::Client, SendReport> {
        let key = fingerprint(&[&platform.id, certificate, &platform.credential]);
        if let Some(client) = lock(&self.apns_by_certificate).get(&key) {
            return Ok(client.clone());
        }
        let bundle = format!("{}\n{}", certificate.trim(), platform.credential.trim());
        let identity = reqwest::Identity::from_pem(bundle.as_bytes()).map_err(|e| {
            refused(
                None,
                format!("the platform's certificate and key are not a TLS identity: {e}"),
            )
        })?;
        let client = Self::apns_client(self.timeout, Some(identity)).map_err(|e| {
            refused(
                None,
                format!("cannot build an APNs client for the certificate: {e}"),
            )
        })?;
        lock(&self.apns_by_certificate).insert(key, client.clone());
        Ok(client)
    }

    async fn apns(
        &self,
        platform: &PushPlatform,
        token: &str,
        message: &PushMessage,
        sandbox: bool,
    ) -> SendReport {
        let base = if sandbox {
            &self.urls.apns_sandbox
        } else {
            &self.urls.apns
        };
        let mut url = match reqwest::Url::parse(base) {
            Ok(u) => u,
            Err(e) => return refused(None, format!("the APNs URL {base:?} is invalid: {e}")),
        };
        match url.path_segments_mut() {
            Ok(mut path) => {
                path.pop_if_empty().extend(["3", "device", token]);
            }
            Err(()) => return refused(None, format!("the APNs URL {base:?} cannot take a path")),
        }
        let principal = platform.principal.as_deref().unwrap_or_default();
        let property = |k: &str| {
            platform
                .properties
                .get(k)
                .and_then(Value::as_str)
                .unwrap_or_default()
        };
        let with_certificate = certificate_based(principal);
        let (request, topic) = if with_certificate {
            let client = match self.apns_certificate_client(platform, principal) {
                Ok(c) => c,
                Err(report) => return report,
            };
            let topic = platform.facts.get("BundleId").cloned().unwrap_or_default();
            (client.post(url), topic)
        } else {
            let jwt =
                match self.apns_provider_token(principal, property("teamId"), &platform.credential)
                {
                    Ok(t) => t,
                    Err(report) => return report,
                };
            let request = self
                .apns
                .post(url)
                .header("authorization", format!("bearer {jwt}"));
            (request, property("bundleId").to_owned())
        };
        let mut request = request
            .header("apns-push-type", "alert")
            .header("apns-priority", "10")
            .header("apns-collapse-id", &message.collapse_id)
            .json(&apns_body(message));
        if !topic.is_empty() {
            request = request.header("apns-topic", topic);
        }
        if let Some(expires) = message.expires_at {
            request = request.header("apns-expiration", expires.timestamp().max(1).to_string());
        }
        let (status, after, body) = match answer(request).await {
            Ok(a) => a,
            Err(e) => return transient(None, format!("APNs: {e}"), None),
        };
        let report = classify_apns(status, after, &body);
        if !with_certificate
            && matches!(&report.outcome, SendOutcome::Transient { reason,
                .. } if reason.contains("ExpiredProviderToken"))
        {
            self.forget_apns_provider_token(principal, property("teamId"), &platform.credential);
        }
        report
    }
}

#[async_trait]
impl PushSender for HttpPushSender {
    async fn send(
        &self,
        platform: &PushPlatform,
        token: &str,
        message: &PushMessage,
    ) -> SendReport {
        match provider_of(&platform.platform) {
            Some(Provider::Fcm) => self.fcm(platform, token, message).await,
            Some(Provider::Apns { sandbox }) => self.apns(platform, token, message, sandbox).await,
            None => refused(
                None,
                format!(
                    "{:?} is not a platform this service sends to",
                    platform.platform
                ),
            ),
        }
    }
}

/// The FCM HTTP v1 `messages:send` body. Data values must be strings: the service's object
/// travels as JSON text under [`PAYLOAD_KEY`].
fn fcm_body(platform: &PushPlatform, token: &str, message: &PushMessage) -> Value {
    let mut notification = Map::new();
    if let Some(title) = &message.title {
        notification.insert("title".into(), json!(title));
    }
    notification.insert("body".into(), json!(message.body));
    let property = |k: &str| {
        platform
            .properties
            .get(k)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    let mut android = Map::new();
    android.insert("priority".into(), json!("HIGH"));
    android.insert("collapse_key".into(), json!(message.collapse_id));
    if let Some(expires) = message.expires_at {
        let ttl = (expires.timestamp() - unix_now()).clamp(0, FCM_MAX_TTL_SECONDS);
        android.insert("ttl".into(), json!(format!("{ttl}s")));
    }
    if let Some(package) = property("restrictedPackageName") {
        android.insert("restricted_package_name".into(), json!(package));
    }
    if let Some(channel) = property("channelId") {
        android.insert("notification".into(), json!({"channel_id": channel}));
    }
    json!({
        "message": {
            "token": token,
            "notification": notification,
            "data": {PAYLOAD_KEY: message.data.to_string()},
            "android": android,
        }
    })
}

/// The APNs payload: the alert in `aps`, the service's object beside it.
fn apns_body(message: &PushMessage) -> Value {
    let mut alert = Map::new();
    if let Some(title) = &message.title {
        alert.insert("title".into(), json!(title));
    }
    alert.insert("body".into(), json!(message.body));
    json!({"aps": {"alert": alert}, PAYLOAD_KEY: message.data})
}

/// FCM HTTP v1 answers (firebase.google.com/docs/reference/fcm/rest/v1/ErrorCode).
fn classify_fcm(status: u16, retry_after: Option<u64>, body: &str) -> SendReport {
    if (200..=299).contains(&status) {
        return report(Some(status), SendOutcome::Delivered);
    }
    let parsed: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    let error = parsed.get("error").cloned().unwrap_or(Value::Null);
    let code = error
        .get("details")
        .and_then(Value::as_array)
        .and_then(|d| {
            d.iter()
                .find_map(|x| x.get("errorCode").and_then(Value::as_str))
        })
        .or_else(|| error.get("status").and_then(Value::as_str))
        .unwrap_or_default()
        .to_owned();
    let text = error
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let why = clip(&format!("FCM {status} {code}: {text}"));
    let outcome = match (status, code.as_str()) {
        (_, "UNREGISTERED" | "SENDER_ID_MISMATCH") | (404, _) => SendOutcome::DeadToken(why),
        (400, _) if text.contains("registration token") => SendOutcome::DeadToken(why),
        (_, "THIRD_PARTY_AUTH_ERROR") => SendOutcome::Refused(why),
        (401 | 429 | 500 | 502 | 503 | 504, _)
        | (_, "QUOTA_EXCEEDED" | "UNAVAILABLE" | "INTERNAL") => SendOutcome::Transient {
            reason: why,
            retry_after_seconds: retry_after,
        },
        _ => SendOutcome::Refused(why),
    };
    report(Some(status), outcome)
}

/// APNs answers (developer.apple.com, "Handling notification responses from APNs").
fn classify_apns(status: u16, retry_after: Option<u64>, body: &str) -> SendReport {
    if status == 200 {
        return report(Some(status), SendOutcome::Delivered);
    }
    let reason = serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| v.get("reason").and_then(Value::as_str).map(str::to_owned))
        .unwrap_or_default();
    let why = clip(&format!("APNs {status} {reason}"));
    let outcome = match (status, reason.as_str()) {
        (410, _) | (400, "BadDeviceToken" | "DeviceTokenNotForTopic") => {
            SendOutcome::DeadToken(why)
        }
        (403, "ExpiredProviderToken") | (429 | 500 | 502 | 503 | 504, _) => {
            SendOutcome::Transient {
                reason: why,
                retry_after_seconds: retry_after,
            }
        }
        _ => SendOutcome::Refused(why),
    };
    report(Some(status), outcome)
}

#[cfg(test)]
#[path = "send_tests.rs"]
mod tests;
