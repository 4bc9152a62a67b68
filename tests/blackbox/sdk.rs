//! End users signing in as themselves (contract §15), over HTTP: SDK keys made in the test
//! (RSA and EC P-256), tokens signed with them reading and acting on their own user's cards
//! and devices, refused with their reason everywhere else, and failing within a second of
//! their key's deletion, through another process too.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use p256::pkcs8::{EncodePrivateKey, EncodePublicKey, LineEnding};
use serde_json::{json, Value};

use crate::support::{blackbox, call, Reply, Server};
use crate::trigger::{finished, fire, flow_publishing, invocation_id};

/// A key pair made for the test, and the algorithm its tokens are signed with.
pub(crate) struct Signer {
    algorithm: Algorithm,
    private_pem: String,
    pub(crate) public_pem: String,
}

impl Signer {
    pub(crate) fn ec() -> Signer {
        let secret = p256::SecretKey::random(&mut rand::rngs::OsRng);
        Signer {
            algorithm: Algorithm::ES256,
            private_pem: secret
                .to_pkcs8_pem(LineEnding::LF)
                .expect("EC private PEM")
                .to_string(),
            public_pem: secret
                .public_key()
                .to_public_key_pem(LineEnding::LF)
                .expect("EC public PEM"),
        }
    }

    pub(crate) fn rsa(bits: usize) -> Signer {
        let private = rsa::RsaPrivateKey::new(&mut rand::rngs::OsRng, bits).expect("RSA key");
        Signer {
            algorithm: Algorithm::RS256,
            private_pem: private
                .to_pkcs8_pem(LineEnding::LF)
                .expect("RSA private PEM")
                .to_string(),
            public_pem: rsa::RsaPublicKey::from(&private)
                .to_public_key_pem(LineEnding::LF)
                .expect("RSA public PEM"),
        }
    }

    /// A token with header `kid` and these claims, signed with the private key.
    pub(crate) fn sign(&self, kid: &str, claims: &Value) -> String {
        let key = match self.algorithm {
            Algorithm::RS256 => EncodingKey::from_rsa_pem(self.private_pem.as_bytes()),
            _ => EncodingKey::from_ec_pem(self.private_pem.as_bytes()),
        }
        .expect("encoding key");
        let mut header = Header::new(self.algorithm);
        header.kid = Some(kid.to_owned());
        jsonwebtoken::encode(&header, claims, &key).expect("signed")
    }
}

pub(crate) fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// Claims for `user`, issued a minute ago and valid for an hour.
pub(crate) fn claims(user: &str) -> Value {
    json!({"sub": user, "iat": now() - 60, "exp": now() + 3_600})
}

pub(crate) async fn add_key(s: &Server, body: Value) -> Reply {
    call(
        s,
        "POST",
        &format!("/v1/{}/sdk-keys", s.env),
        Some(&s.admin_secret),
        Some(body),
    )
    .await
}

async fn as_user(s: &Server, method: &str, path: &str, token: &str, body: Option<Value>) -> Reply {
    call(
        s,
        method,
        &format!("/v1/{}{path}", s.env),
        Some(token),
        body,
    )
    .await
}

/// Asserts a refused token: 401, its code, and the `invalid_token` challenge.
#[track_caller]
fn refused(reply: &Reply, code: &str) {
    reply.problem(401, code);
    assert_eq!(
        reply.header("www-authenticate"),
        Some("Bearer error=\"invalid_token\""),
        "{}",
        reply.text
    );
}

async fn sdk_keys_are_added_listed_changed_and_deleted(s: Server) {
    let ec = Signer::ec();
    let created = add_key(
        &s,
        json!({"name": "ios-app", "publicKey": ec.public_pem,
               "allowedIssuers": ["https://auth.example.com"],
               "claimMappings": {"email": "attributes.email"}}),
    )
    .await;
    assert_eq!(created.status, 201, "{}", created.text);
    let key = &created.body["data"];
    let id = key["id"].as_str().expect("id").to_owned();
    assert!(id.starts_with("sdk_"), "{id}");
    assert_eq!(
        created.header("location"),
        Some(format!("/v1/{}/sdk-keys/{id}", s.env).as_str())
    );
    assert_eq!(key["name"], "ios-app");
    assert_eq!(key["maxTokenExpiryDays"], 7, "the default");
    assert_eq!(key["publicKeys"][0]["type"], "EC");
    assert_eq!(key["publicKeys"][0]["pem"], ec.public_pem.as_str());
    assert_eq!(key["claimMappings"], json!({"email": "attributes.email"}));

    // A JWKS of one RSA key, in the form an identity provider publishes.
    let rsa = Signer::rsa(2048);
    let jwks = rsa_jwks(&rsa);
    let second = add_key(
        &s,
        json!({"name": "web", "jwks": jwks, "maxTokenExpiryDays": 1}),
    )
    .await;
    assert_eq!(second.status, 201, "{}", second.text);
    assert_eq!(second.body["data"]["publicKeys"][0]["type"], "RSA");

    let list = call(
        &s,
        "GET",
        &format!("/v1/{}/sdk-keys", s.env),
        Some(&s.admin_secret),
        None,
    )
    .await;
    assert_eq!(list.status, 200, "{}", list.text);
    let names: Vec<_> = list.body["data"]
        .as_array()
        .expect("keys")
        .iter()
        .map(|k| k["name"].as_str().expect("name").to_owned())
        .collect();
    assert_eq!(names, ["ios-app", "web"]);

    let path = format!("/v1/{}/sdk-keys/{id}", s.env);
    let one = call(&s, "GET", &path, Some(&s.admin_secret), None).await;
    assert_eq!(one.body["data"], created.body["data"]);
    let patched = call(
        &s,
        "PATCH",
        &path,
        Some(&s.admin_secret),
        Some(json!({"maxTokenExpiryDays": 30, "allowedIssuers": null})),
    )
    .await;
    assert_eq!(patched.status, 200, "{}", patched.text);
    assert_eq!(patched.body["data"]["maxTokenExpiryDays"], 30);
    assert_eq!(patched.body["data"]["allowedIssuers"], json!([]));
    assert_eq!(patched.body["data"]["name"], "ios-app", "kept");
    call(
        &s,
        "PATCH",
        &path,
        Some(&s.admin_secret),
        Some(json!({"name": "web"})),
    )
    .await
    .problem(409, "sdk_key_name_taken");

    // Refusals name their field.
    add_key(
        &s,
        json!({"name": "ios-app", "publicKey": Signer::ec().public_pem}),
    )
    .await
    .problem(409, "sdk_key_name_taken");
    let small = add_key(
        &s,
        json!({"name": "small", "publicKey": Signer::rsa(1024).public_pem}),
    )
    .await;
    assert_eq!(small.problem(400, "validation_failed"), ["publicKey"]);
    assert!(small.text.contains("1024 bits"), "{}", small.text);
    let fields = add_key(
        &s,
        json!({"name": "bad name", "publicKey": "not a key", "maxTokenExpiryDays": 31,
               "claimMappings": {"email": "profile.email"}}),
    )
    .await
    .problem(400, "validation_failed");
    assert_eq!(
        fields,
        [
            "name",
            "maxTokenExpiryDays",
            "claimMappings.email",
            "publicKey"
        ]
    );
    let both = add_key(
        &s,
        json!({"name": "both", "publicKey": ec.public_pem, "jwks": jwks}),
    )
    .await;
    assert_eq!(both.problem(400, "validation_failed"), ["jwks"]);
    assert_eq!(
        add_key(&s, json!({}))
            .await
            .problem(400, "validation_failed"),
        ["name", "publicKey"]
    );

    // Keys are the `workbench` role's (or `sdk_keys:*` scopes), not the `events` role's.
    let events = s.key(&["--role", "events"]);
    call(
        &s,
        "GET",
        &format!("/v1/{}/sdk-keys", s.env),
        Some(&events),
        None,
    )
    .await
    .problem(403, "forbidden");
    let reader = s.key(&["--scope", "sdk_keys:read"]);
    let read = call(&s, "GET", &path, Some(&reader), None).await;
    assert_eq!(read.status, 200, "{}", read.text);
    call(&s, "DELETE", &path, Some(&reader), None)
        .await
        .problem(403, "forbidden");

    let deleted = call(&s, "DELETE", &path, Some(&s.admin_secret), None).await;
    assert_eq!(deleted.status, 204, "{}", deleted.text);
    call(&s, "GET", &path, Some(&s.admin_secret), None)
        .await
        .problem(404, "not_found");
    call(&s, "DELETE", &path, Some(&s.admin_secret), None)
        .await
        .problem(404, "not_found");
}

/// The JWKS of an RSA key pair's public half.
fn rsa_jwks(signer: &Signer) -> Value {
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine;
    use rsa::pkcs8::DecodePublicKey;
    use rsa::traits::PublicKeyParts;
    let public = rsa::RsaPublicKey::from_public_key_pem(&signer.public_pem).expect("public");
    json!({"keys": [{"kty": "RSA", "alg": "RS256", "use": "sig",
        "n": URL_SAFE_NO_PAD.encode(public.n().to_bytes_be()),
        "e": URL_SAFE_NO_PAD.encode(public.e().to_bytes_be())}]})
}

/// A flow that puts one card in each user's feed; answers its id after carding `users`.
async fn cards_for(s: &Server, users: &[&str]) -> String {
    let flow = flow_publishing(
        s,
        "Welcome",
        json!({"type": "card", "initialSteps": ["s1"],
            "steps": {"s1": {"id": "s1", "type": "create-card", "properties": {"cardTemplateId": "t1"}}},
            "cardTemplates": {"t1": {"metadata": {"cardName": "Welcome"},
                "defaultView": {"content": [{"key": "h", "type": "headline", "attributes": {"text": "Hi"}}],
                    "actions": [{"key": "ok", "type": "submitButton", "attributes": {"text": "OK"}}]}}}}),
    )
    .await;
    let fired = fire(
        s,
        &flow,
        "start",
        json!({"flows": [{"target": {"type": "user", "targetUserIds": users}}]}),
    )
    .await;
    finished(s, &flow, &invocation_id(&fired)).await;
    flow
}

async fn user_tokens_reach_their_own_user_and_nothing_else(s: Server) {
    let (rsa, ec) = (Signer::rsa(2048), Signer::ec());
    for (name, signer) in [("rsa-app", &rsa), ("ec-app", &ec)] {
        let added = add_key(
            &s,
            json!({"name": name, "publicKey": signer.public_pem,
                   "claimMappings": {"email": "attributes.email"}}),
        )
        .await;
        assert_eq!(added.status, 201, "{}", added.text);
    }
    let flow = cards_for(&s, &["u1", "u2"]).await;

    // Each key's tokens read and act on their own user's cards and devices.
    for (name, signer) in [("rsa-app", &rsa), ("ec-app", &ec)] {
        let token = signer.sign(name, &claims("u1"));
        let feed = as_user(&s, "GET", "/users/u1/cards", &token, None).await;
        assert_eq!(feed.status, 200, "{name}: {}", feed.text);
        assert_eq!(
            feed.body["data"].as_array().map(Vec::len),
            Some(1),
            "{}",
            feed.text
        );
        let device = as_user(
            &s,
            "PUT",
            &format!("/users/u1/devices/token-{name}"),
            &token,
            Some(json!({"appId": "com.example.app", "platform": "FCM"})),
        )
        .await;
        assert_eq!(device.status, 200, "{}", device.text);
        let devices = as_user(&s, "GET", "/users/u1/devices", &token, None).await;
        assert_eq!(devices.status, 200, "{}", devices.text);
        // Another user's routes: 403, the token is good but not theirs.
        as_user(&s, "GET", "/users/u2/cards", &token, None)
            .await
            .problem(403, "forbidden");
        as_user(&s, "GET", "/users/u2/devices", &token, None)
            .await
            .problem(403, "forbidden");
    }
    let token = rsa.sign("rsa-app", &claims("u1"));
    let card = as_user(&s, "GET", "/users/u1/cards", &token, None)
        .await
        .body["data"][0]["id"]
        .as_str()
        .expect("card")
        .to_owned();
    let acted = as_user(
        &s,
        "POST",
        &format!("/users/u1/cards/{card}/actions"),
        &token,
        Some(json!({"action": "submit", "values": {"ok": true}})),
    )
    .await;
    assert_eq!(acted.status, 200, "{}", acted.text);
    assert_eq!(acted.body["data"]["status"], "completed");
    let u2_card = call(
        &s,
        "GET",
        &format!("/v1/{}/users/u2/cards", s.env),
        Some(&s.admin_secret),
        None,
    )
    .await
    .body["data"][0]["id"]
        .as_str()
        .expect("u2's card")
        .to_owned();
    as_user(
        &s,
        "POST",
        &format!("/users/u2/cards/{u2_card}/actions"),
        &token,
        Some(json!({"action": "dismiss"})),
    )
    .await
    .problem(403, "forbidden");

    // Every other route family answers 401 to a user token.
    let env = s.env.clone();
    for (method, path) in [
        ("GET", format!("/v1/{env}/action-flow")),
        ("POST", format!("/v1/{env}/action-flow/{flow}/start")),
        ("GET", format!("/v1/{env}/workbench-folder")),
        ("GET", format!("/v1/{env}/users/u1")),
        ("GET", format!("/v1/{env}/users/u1/cards/{card}/events")),
        ("GET", format!("/v1/{env}/segments")),
        ("GET", format!("/v1/{env}/webhook")),
        ("GET", format!("/v1/{env}/notification-platforms")),
        ("GET", format!("/v1/{env}/sdk-keys")),
        ("GET", format!("/v1/{env}/credentials")),
        ("GET", "/v1/environments".to_owned()),
    ] {
        let body = (method == "POST")
            .then(|| json!({"flows": [{"target": {"type": "user", "targetUserIds": ["u1"]}}]}));
        let reply = call(&s, method, &path, Some(&token), body).await;
        reply.problem(401, "unauthorized");
    }
    // Customer keys keep working on the end-user routes.
    let key = call(
        &s,
        "GET",
        &format!("/v1/{env}/users/u1/cards"),
        Some(&s.admin_secret),
        None,
    )
    .await;
    assert_eq!(key.status, 200, "{}", key.text);

    // The first verified request of an unknown user creates it, with its mapped claims.
    let mut first = claims("new-user");
    first["email"] = json!("ada@example.com");
    first["groups"] = json!(["not", "a", "scalar"]);
    let fresh = as_user(
        &s,
        "GET",
        "/users/new-user/cards",
        &ec.sign("ec-app", &first),
        None,
    )
    .await;
    assert_eq!(fresh.status, 200, "{}", fresh.text);
    let user = call(
        &s,
        "GET",
        &format!("/v1/{env}/users/new-user"),
        Some(&s.admin_secret),
        None,
    )
    .await;
    assert_eq!(user.status, 200, "{}", user.text);
    assert_eq!(
        user.body["data"]["attributes"],
        json!({"email": "ada@example.com"})
    );
}

async fn every_refusal_has_its_reason(s: Server) {
    let rsa = Signer::rsa(2048);
    add_key(
        &s,
        json!({"name": "app", "publicKey": rsa.public_pem, "maxTokenExpiryDays": 1,
               "allowedIssuers": ["https://auth.example.com"]}),
    )
    .await;
    let feed = |token: String| {
        let s = &s;
        async move { as_user(s, "GET", "/users/u1/cards", &token, None).await }
    };
    let good = json!({"sub": "u1", "iat": now() - 60, "exp": now() + 3_600,
                      "iss": "https://auth.example.com"});
    let ok = feed(rsa.sign("app", &good)).await;
    assert_eq!(ok.status, 200, "{}", ok.text);

    let with = |field: &str, value: Value| {
        let mut claims = good.clone();
        claims[field] = value;
        claims
    };
    refused(
        &feed(rsa.sign("app", &with("exp", json!(now() - 120)))).await,
        "token_expired",
    );
    refused(
        &feed(rsa.sign("app", &with("nbf", json!(now() + 600)))).await,
        "token_expired",
    );
    refused(
        &feed(rsa.sign("app", &with("exp", json!(now() + 2 * 86_400)))).await,
        "token_lifetime",
    );
    refused(
        &feed(rsa.sign("app", &with("iss", json!("https://evil.example")))).await,
        "token_issuer",
    );
    refused(&feed(rsa.sign("nope", &good)).await, "token_unknown_key");
    // Signed by another key under the right name.
    refused(
        &feed(Signer::rsa(2048).sign("app", &good)).await,
        "token_signature",
    );
    // Algorithm confusion: an EC token, an HMAC keyed with the public key, and `none`.
    refused(
        &feed(Signer::ec().sign("app", &good)).await,
        "token_signature",
    );
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some("app".into());
    let hmac = jsonwebtoken::encode(
        &header,
        &good,
        &EncodingKey::from_secret(rsa.public_pem.as_bytes()),
    )
    .expect("hmac");
    refused(&feed(hmac).await, "token_signature");
    let none = {
        use base64::engine::general_purpose::URL_SAFE_NO_PAD;
        use base64::Engine;
        let head = URL_SAFE_NO_PAD.encode(br#"{"alg":"none","kid":"app","typ":"JWT"}"#);
        let body = URL_SAFE_NO_PAD.encode(good.to_string());
        format!("{head}.{body}.")
    };
    refused(&feed(none).await, "token_signature");
    refused(&feed("eyJhbGciOi.not.json".into()).await, "token_malformed");
    let mut no_exp = good.clone();
    no_exp.as_object_mut().expect("claims").remove("exp");
    refused(&feed(rsa.sign("app", &no_exp)).await, "token_malformed");
}

async fn a_deleted_key_stops_its_tokens_at_once(s: Server) {
    let ec = Signer::ec();
    let id = add_key(&s, json!({"name": "app", "publicKey": ec.public_pem}))
        .await
        .body["data"]["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let token = ec.sign("app", &claims("u1"));
    assert_eq!(
        as_user(&s, "GET", "/users/u1/cards", &token, None)
            .await
            .status,
        200
    );
    let deleted = call(
        &s,
        "DELETE",
        &format!("/v1/{}/sdk-keys/{id}", s.env),
        Some(&s.admin_secret),
        None,
    )
    .await;
    assert_eq!(deleted.status, 204);
    refused(
        &as_user(&s, "GET", "/users/u1/cards", &token, None).await,
        "token_unknown_key",
    );
}

/// Found by an outside probe: u1's own token moved u2's device to u1, and u1's pushes went to
/// u2's phone. A user token registers new tokens and its own; another user's is 409 and stays
/// where it is. A key still moves it (a shared device changes hands).
async fn a_user_token_cannot_take_another_users_device(s: Server) {
    let signer = Signer::ec();
    let added = add_key(&s, json!({"name": "app", "publicKey": signer.public_pem})).await;
    assert_eq!(added.status, 201, "{}", added.text);
    let (u1, u2) = (
        signer.sign("app", &claims("u1")),
        signer.sign("app", &claims("u2")),
    );
    let body = json!({"appId": "com.example.app", "platform": "FCM"});
    let put = |token: &str, user: &str| {
        let (token, user, body) = (token.to_owned(), user.to_owned(), body.clone());
        let s = &s;
        async move {
            as_user(
                s,
                "PUT",
                &format!("/users/{user}/devices/phone-2"),
                &token,
                Some(body),
            )
            .await
        }
    };
    assert_eq!(put(&u2, "u2").await.status, 200, "u2 registers its phone");
    assert_eq!(put(&u2, "u2").await.status, 200, "and again");
    put(&u1, "u1").await.problem(409, "device_taken");
    let of = |user: &str, token: &str| {
        let (user, token) = (user.to_owned(), token.to_owned());
        let s = &s;
        async move {
            let listed = as_user(s, "GET", &format!("/users/{user}/devices"), &token, None).await;
            assert_eq!(listed.status, 200, "{}", listed.text);
            listed.body["data"].as_array().map_or(0, Vec::len)
        }
    };
    assert_eq!(
        (of("u1", &u1).await, of("u2", &u2).await),
        (0, 1),
        "nothing moved"
    );
    // A customer's key moves it.
    let moved = call(
        &s,
        "PUT",
        &format!("/v1/{}/users/u1/devices/phone-2", s.env),
        Some(&s.admin_secret),
        Some(body.clone()),
    )
    .await;
    assert_eq!(moved.status, 200, "{}", moved.text);
    assert_eq!((of("u1", &u1).await, of("u2", &u2).await), (1, 0));
}

blackbox!(
    a_user_token_cannot_take_another_users_device,
    sdk_keys_are_added_listed_changed_and_deleted,
    user_tokens_reach_their_own_user_and_nothing_else,
    every_refusal_has_its_reason,
    a_deleted_key_stops_its_tokens_at_once,
);

/// Two processes on one PostgreSQL: a key deleted through one stops its tokens on the other
/// within a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_deleted_through_one_process_fails_on_another_within_a_second() {
    let Some(db) = adapters_diesel::testing::TestDatabase::postgres() else {
        return;
    };
    let a = Server::start(db).await;
    let b = a.replica(&[]);
    let rsa = Signer::rsa(2048);
    let id = add_key(&a, json!({"name": "app", "publicKey": rsa.public_pem}))
        .await
        .body["data"]["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let token = rsa.sign("app", &claims("u1"));
    let before = as_user(&b, "GET", "/users/u1/cards", &token, None).await;
    assert_eq!(before.status, 200, "{}", before.text);
    let deleted = call(
        &a,
        "DELETE",
        &format!("/v1/{}/sdk-keys/{id}", a.env),
        Some(&a.admin_secret),
        None,
    )
    .await;
    assert_eq!(deleted.status, 204);
    let at = Instant::now();
    loop {
        let reply = as_user(&b, "GET", "/users/u1/cards", &token, None).await;
        if reply.status == 401 {
            refused(&reply, "token_unknown_key");
            break;
        }
        assert!(
            at.elapsed() < Duration::from_secs(1),
            "the other process still lets the token in after {:?}",
            at.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Contract §16: each signed-in user has a bucket of its own (`WORKBENCH_RATE_LIMIT_USER`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_signed_in_user_has_a_rate_limit_of_its_own() {
    let s = Server::start_with(
        adapters_diesel::testing::TestDatabase::sqlite(),
        &[("WORKBENCH_RATE_LIMIT_USER", Some("1/min"))],
    )
    .await;
    let ec = Signer::ec();
    let added = add_key(&s, json!({"name": "app", "publicKey": ec.public_pem})).await;
    assert_eq!(added.status, 201, "{}", added.text);
    let (u1, u2) = (ec.sign("app", &claims("u1")), ec.sign("app", &claims("u2")));
    // A burst of twice the rate, then 429.
    for _ in 0..2 {
        let ok = as_user(&s, "GET", "/users/u1/cards", &u1, None).await;
        assert_eq!(ok.status, 200, "{}", ok.text);
    }
    let limited = as_user(&s, "GET", "/users/u1/cards", &u1, None).await;
    limited.problem(429, "rate_limited");
    assert!(limited.header("retry-after").is_some());
    // Another user, and the customer key, are not limited by it.
    assert_eq!(
        as_user(&s, "GET", "/users/u2/cards", &u2, None)
            .await
            .status,
        200
    );
    let key = call(
        &s,
        "GET",
        &format!("/v1/{}/users/u1/cards", s.env),
        Some(&s.admin_secret),
        None,
    )
    .await;
    assert_eq!(key.status, 200, "{}", key.text);
}
