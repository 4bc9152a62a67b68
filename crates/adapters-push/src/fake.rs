//! A fake FCM, Google OAuth and APNs on loopback, for tests. It checks what the real ones
//! check: the RS256 assertion of a known service account (signature, audience, issuer), the
//! access token it issued on every send, APNs over HTTP/2 only, the ES256 provider token of a
//! known key (signature, key id, team), and the topic. Tokens marked dead are answered as the
//! providers answer them (FCM `UNREGISTERED`, APNs 410 `Unregistered`).

#![allow(clippy::unwrap_used)] // test helper: a failure here is a broken test setup

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode, Version};
use hyper_util::rt::{TokioExecutor, TokioIo};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{json, Value};

/// One request the fake received, and what it answered.
#[derive(Debug, Clone)]
pub struct FakeRequest {
    /// `token`, `fcm` or `apns`.
    pub kind: &'static str,
    /// Whether it came over HTTP/2 (APNs needs it).
    pub http2: bool,
    /// Its path.
    pub path: String,
    /// Lower-case names.
    pub headers: HashMap<String, String>,
    /// Its body.
    pub body: Vec<u8>,
    /// The status the fake answered.
    pub status: u16,
}

impl FakeRequest {
    /// Its body as JSON (`null` when it is not).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    /// A header's value (empty when absent), by its lower-case name.
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .map(String::as_str)
            .unwrap_or_default()
    }
}

#[derive(Default)]
struct State {
    token_url: String,
    /// client_email → (RSA public key PEM, project id).
    accounts: HashMap<String, (String, String)>,
    /// key id → (team id, EC public key PEM).
    apns_keys: HashMap<String, (String, String)>,
    /// access token → project id.
    issued: HashMap<String, String>,
    dead: HashSet<String>,
    /// Tokens answered 503 this many more times.
    unavailable: HashMap<String, u32>,
    received: Vec<FakeRequest>,
}

/// A fake FCM, Google token endpoint and APNs on loopback, for tests.
#[derive(Clone)]
pub struct FakeProviders {
    /// Its base URL.
    pub url: String,
    state: Arc<Mutex<State>>,
}

fn public_pem_of(private_pem: &str) -> String {
    use p256::pkcs8::{DecodePrivateKey, EncodePublicKey, LineEnding};
    if let Ok(k) = rsa::RsaPrivateKey::from_pkcs8_pem(private_pem) {
        return k.to_public_key().to_public_key_pem(LineEnding::LF).unwrap();
    }
    p256::SecretKey::from_pkcs8_pem(private_pem)
        .unwrap()
        .public_key()
        .to_public_key_pem(LineEnding::LF)
        .unwrap()
}

/// The claims of a JWT, unverified: to find which key should verify it.
fn peek_claims(jwt: &str) -> Value {
    use base64::Engine;
    let middle = jwt.split('.').nth(1).unwrap_or_default();
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(middle)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or(Value::Null)
}

fn reply(status: u16, body: Value) -> (u16, Value) {
    (status, body)
}

impl FakeProviders {
    /// Starts one on a free port.
    pub async fn start() -> FakeProviders {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let state = Arc::new(Mutex::new(State {
            token_url: format!("{url}/token"),
            ..State::default()
        }));
        let fake = FakeProviders { url, state };
        let serving = fake.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let fake = serving.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let fake = fake.clone();
                        async move { Ok::<_, Infallible>(fake.handle(req).await) }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        fake
    }

    /// The Google OAuth token endpoint of this fake.
    pub fn token_url(&self) -> String {
        format!("{}/token", self.url)
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap()
    }

    /// Accepts this service account's assertions (its public key, derived from the JSON).
    pub fn accept_service_account(&self, json: &str) {
        let v: Value = serde_json::from_str(json).unwrap();
        let email = v["client_email"].as_str().unwrap().to_owned();
        let public = public_pem_of(v["private_key"].as_str().unwrap());
        let project = v["project_id"].as_str().unwrap().to_owned();
        self.state().accounts.insert(email, (public, project));
    }

    /// Accepts provider tokens signed by this .p8 key for this key id and team.
    pub fn accept_apns_key(&self, key_id: &str, team_id: &str, p8: &str) {
        self.state()
            .apns_keys
            .insert(key_id.into(), (team_id.into(), public_pem_of(p8)));
    }

    /// Answers this device token as unregistered from now on.
    pub fn mark_dead(&self, token: &str) {
        self.state().dead.insert(token.into());
    }

    /// Answers this device token 503 (with `Retry-After: 1`) the next `times` times.
    pub fn fail(&self, token: &str, times: u32) {
        self.state().unavailable.insert(token.into(), times);
    }

    /// Every request it received, oldest first.
    pub fn received(&self) -> Vec<FakeRequest> {
        self.state().received.clone()
    }

    /// The pushes that reached a device (answered 200), FCM and APNs.
    pub fn delivered(&self) -> Vec<FakeRequest> {
        self.received()
            .into_iter()
            .filter(|r| r.kind != "token" && r.status == 200)
            .collect()
    }

    async fn handle(&self, req: Request<Incoming>) -> Response<Full<Bytes>> {
        let http2 = req.version() == Version::HTTP_2;
        let path = req.uri().path().to_owned();
        let headers: HashMap<String, String> = req
            .headers()
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_owned(),
                    v.to_str().unwrap_or_default().to_owned(),
                )
            })
            .collect();
        let body = req
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes().to_vec())
            .unwrap_or_default();
        let mut request = FakeRequest {
            kind: "",
            http2,
            path: path.clone(),
            headers,
            body,
            status: 0,
        };
        let (kind, (status, answer)) = if path == "/token" {
            ("token", self.token(&request))
        } else if path.starts_with("/v1/projects/") && path.ends_with("/messages:send") {
            ("fcm", self.fcm(&request))
        } else if let Some(device) = path.strip_prefix("/3/device/") {
            ("apns", self.apns(&request, device))
        } else {
            ("unknown", reply(404, json!({"error": "no such path"})))
        };
        request.kind = kind;
        request.status = status;
        self.state().received.push(request);
        let mut response = Response::new(Full::new(Bytes::from(answer.to_string())));
        *response.status_mut() = StatusCode::from_u16(status).unwrap();
        if status == 503 {
            response
                .headers_mut()
                .insert("retry-after", hyper::header::HeaderValue::from_static("1"));
        }
        response
    }

    fn token(&self, r: &FakeRequest) -> (u16, Value) {
        let form: HashMap<String, String> =
            url::form_urlencoded::parse(&r.body).into_owned().collect();
        if form.get("grant_type").map(String::as_str)
            != Some("urn:ietf:params:oauth:grant-type:jwt-bearer")
        {
            return reply(400, json!({"error": "unsupported_grant_type"}));
        }
        let assertion = form.get("assertion").cloned().unwrap_or_default();
        let claims = peek_claims(&assertion);
        let email = claims["iss"].as_str().unwrap_or_default().to_owned();
        let mut state = self.state();
        let Some((public, project)) = state.accounts.get(&email).cloned() else {
            return reply(
                400,
                json!({"error": "invalid_grant", "error_description": "Invalid JWT Signature."}),
            );
        };
        let mut validation = Validation::new(Algorithm::RS256);
        validation.set_audience(&[state.token_url.clone()]);
        validation.set_issuer(&[email]);
        let key = DecodingKey::from_rsa_pem(public.as_bytes()).unwrap();
        if let Err(e) = jsonwebtoken::decode::<Value>(&assertion, &key, &validation) {
            return reply(
                400,
                json!({"error": "invalid_grant", "error_description": e.to_string()}),
            );
        }
        if claims["scope"] != "https://www.googleapis.com/auth/firebase.messaging" {
            return reply(400, json!({"error": "invalid_scope"}));
        }
        let token = format!("fake-access-{}", state.issued.len() + 1);
        state.issued.insert(token.clone(), project);
        reply(
            200,
            json!({"access_token": token, "expires_in": 3599, "token_type": "Bearer"}),
        )
    }

    fn fcm(&self, r: &FakeRequest) -> (u16, Value) {
        let mut state = self.state();
        let bearer = r
            .header("authorization")
            .strip_prefix("Bearer ")
            .unwrap_or_default();
        let project = r
            .path
            .trim_start_matches("/v1/projects/")
            .trim_end_matches("/messages:send");
        if state.issued.get(bearer).map(String::as_str) != Some(project) {
            return reply(
                401,
                json!({"error": {"code": 401, "status": "UNAUTHENTICATED",
                    "message": "Request had invalid authentication credentials."}}),
            );
        }
        let message = r.json()["message"].clone();
        let token = message["token"].as_str().unwrap_or_default().to_owned();
        if state.dead.contains(&token) {
            return reply(
                404,
                json!({"error": {"code": 404, "status": "NOT_FOUND",
                    "message": "Requested entity was not found.",
                "details": [{"@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError",
                    "errorCode": "UNREGISTERED"}]}}),
            );
        }
        if let Some(n) = state.unavailable.get_mut(&token).filter(|n| **n > 0) {
            *n -= 1;
            return reply(
                503,
                json!({"error": {"code": 503, "status": "UNAVAILABLE",
                    "message": "The service is currently unavailable."}}),
            );
        }
        if !message["data"]
            .as_object()
            .is_some_and(|d| d.values().all(Value::is_string))
        {
            return reply(
                400,
                json!({"error": {"code": 400, "status": "INVALID_ARGUMENT",
                    "message": "data values must be strings"}}),
            );
        }
        reply(
            200,
            json!({"name": format!("projects/{project}/messages/{}", state.received.len())}),
        )
    }

    fn apns(&self, r: &FakeRequest, device: &str) -> (u16, Value) {
        let mut state = self.state();
        if !r.http2 {
            return reply(505, json!({"reason": "APNs speaks HTTP/2 only"}));
        }
        let Some(jwt) = r.header("authorization").strip_prefix("bearer ") else {
            return reply(403, json!({"reason": "MissingProviderToken"}));
        };
        let kid = jsonwebtoken::decode_header(jwt)
            .ok()
            .and_then(|h| h.kid)
            .unwrap_or_default();
        let Some((team, public)) = state.apns_keys.get(&kid).cloned() else {
            return reply(403, json!({"reason": "InvalidProviderToken"}));
        };
        let mut validation = Validation::new(Algorithm::ES256);
        validation.required_spec_claims = HashSet::new();
        validation.validate_exp = false;
        validation.set_issuer(&[team]);
        let key = DecodingKey::from_ec_pem(public.as_bytes()).unwrap();
        if jsonwebtoken::decode::<Value>(jwt, &key, &validation).is_err()
            || !peek_claims(jwt)["iat"].is_i64()
        {
            return reply(403, json!({"reason": "InvalidProviderToken"}));
        }
        if r.header("apns-topic").is_empty() {
            return reply(400, json!({"reason": "MissingTopic"}));
        }
        if state.dead.contains(device) {
            return reply(
                410,
                json!({"reason": "Unregistered", "timestamp": 1_700_000_000_000_i64}),
            );
        }
        if let Some(n) = state.unavailable.get_mut(device).filter(|n| **n > 0) {
            *n -= 1;
            return reply(503, json!({"reason": "ServiceUnavailable"}));
        }
        if r.json()["aps"]["alert"]["body"].as_str().is_none() {
            return reply(400, json!({"reason": "PayloadEmpty"}));
        }
        reply(200, Value::Null)
    }
}
