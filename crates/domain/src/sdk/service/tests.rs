use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use chrono::Duration;
use serde_json::{json, Map, Value};

use super::*;
use crate::audience::MockEndUserRepository;
use crate::sdk::{MockSdkKeyRepository, MockTokenVerifier, SdkKeyKind, TokenHeader, VerifyingKey};
use crate::testing::{caller, t0};
use crate::time::MockClock;
use crate::{KeyAccess, Role, Scope};

const ENV: &str = "env_1";

fn key() -> SdkKey {
    SdkKey {
        id: "sdk_1".into(),
        environment_id: ENV.into(),
        name: "app".into(),
        keys: vec![VerifyingKey {
            kind: SdkKeyKind::Rsa,
            pem: "PEM".into(),
        }],
        max_token_expiry_days: 7,
        allowed_issuers: vec![],
        claim_mappings: BTreeMap::from([("email".to_owned(), "email".to_owned())]),
        allowed_origins: vec!["https://app.example".into()],
        created: t0(),
        updated: t0(),
    }
}

/// A clock the test moves.
fn moving_clock() -> (Arc<MockClock>, Arc<Mutex<Timestamp>>) {
    let now = Arc::new(Mutex::new(t0()));
    let read = Arc::clone(&now);
    let mut clock = MockClock::new();
    clock
        .expect_now()
        .returning(move || *read.lock().expect("lock"));
    (Arc::new(clock), now)
}

/// A verifier that reads every token as `app`'s, signed for `u1` with `email` set, and counts
/// its signature checks.
fn verifier(checks: Arc<Mutex<usize>>) -> MockTokenVerifier {
    let mut verifier = MockTokenVerifier::new();
    verifier
        .expect_header()
        .returning(|_| Ok(TokenHeader::new("app", "RS256")));
    verifier.expect_verify().returning(move |token, _| {
        *checks.lock().expect("lock") += 1;
        if token == "forged" {
            return Err(TokenRefusal::Signature);
        }
        let now = t0().timestamp();
        let mut other = Map::new();
        other.insert("email".into(), json!("ada@example.com"));
        other.insert("groups".into(), json!(["a"]));
        Ok(TokenClaims {
            sub: Some("u1".into()),
            iat: Some(now - 60),
            exp: Some(now + 3_600),
            other,
            ..TokenClaims::default()
        })
    });
    verifier
}

struct Fixture {
    service: SdkKeyService,
    now: Arc<Mutex<Timestamp>>,
    checks: Arc<Mutex<usize>>,
    reads: Arc<Mutex<usize>>,
    merged: Arc<Mutex<Vec<Map<String, Value>>>>,
    stored: Arc<Mutex<Option<SdkKey>>>,
}

/// A service over one stored key (`app`) that counts key reads and user writes.
fn fixture() -> Fixture {
    let stored = Arc::new(Mutex::new(Some(key())));
    let reads = Arc::new(Mutex::new(0));
    let mut keys = MockSdkKeyRepository::new();
    let (find, count) = (Arc::clone(&stored), Arc::clone(&reads));
    keys.expect_list().returning(move |env| {
        *count.lock().expect("lock") += 1;
        Ok(find
            .lock()
            .expect("lock")
            .clone()
            .filter(|k| k.environment_id == env)
            .into_iter()
            .collect())
    });
    let get = Arc::clone(&stored);
    keys.expect_get()
        .returning(move |_, id| Ok(get.lock().expect("lock").clone().filter(|k| k.id == id)));
    let delete = Arc::clone(&stored);
    keys.expect_delete()
        .returning(move |_, _| Ok(delete.lock().expect("lock").take().is_some()));
    let update = Arc::clone(&stored);
    keys.expect_update().returning(move |key| {
        *update.lock().expect("lock") = Some(key.clone());
        Ok(true)
    });
    let merged = Arc::new(Mutex::new(Vec::new()));
    let mut users = MockEndUserRepository::new();
    let record = Arc::clone(&merged);
    users
        .expect_merge_attributes()
        .returning(move |env, user, attributes, _| {
            assert_eq!((env, user), (ENV, "u1"));
            record.lock().expect("lock").push(attributes);
            Ok(())
        });
    let checks = Arc::new(Mutex::new(0));
    let (clock, now) = moving_clock();
    let service = SdkKeyService::new(
        Arc::new(keys),
        Arc::new(users),
        Arc::new(verifier(Arc::clone(&checks))),
        clock,
    );
    Fixture {
        service,
        now,
        checks,
        reads,
        merged,
        stored,
    }
}

fn admin() -> Principal {
    caller(ENV, KeyAccess::Roles(vec![Role::Workbench]))
}

fn refusal(result: Result<Principal, DomainError>) -> TokenRefusal {
    match result {
        Err(DomainError::TokenRefused(why)) => why,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn a_token_signs_its_user_in_and_is_verified_once_while_its_key_is_unchanged() {
    let f = fixture();
    let env = EnvironmentId::from(ENV);
    let me = f
        .service
        .authenticate_user(&env, "u1", "token")
        .await
        .expect("answer");
    assert_eq!(me.end_user.as_deref(), Some("u1"));
    assert!(me.authorize_user(ENV, Permission::CardsWrite, "u1").is_ok());
    assert!(me.authorize(ENV, Permission::CardsWrite).is_err());
    // The user was created with the one mapped claim that is a scalar.
    let merged = f.merged.lock().expect("lock").clone();
    assert_eq!(
        merged,
        vec![Map::from_iter([("email".into(), json!("ada@example.com"))])]
    );
    for _ in 0..5 {
        f.service
            .authenticate_user(&env, "u1", "token")
            .await
            .expect("answer");
    }
    // Presented again: no signature check, no key read within the TTL, no user write.
    assert_eq!(*f.checks.lock().expect("lock"), 1);
    assert_eq!(*f.reads.lock().expect("lock"), 1);
    assert_eq!(f.merged.lock().expect("lock").len(), 1);
    // After the TTL the key is read again (once), and the token still passes.
    *f.now.lock().expect("lock") += Duration::milliseconds(KEY_TTL_MS + 1);
    f.service
        .authenticate_user(&env, "u1", "token")
        .await
        .expect("answer");
    f.service
        .authenticate_user(&env, "u1", "token")
        .await
        .expect("answer");
    assert_eq!(*f.reads.lock().expect("lock"), 2);
    assert_eq!(*f.checks.lock().expect("lock"), 1);
}

#[tokio::test]
async fn a_token_is_refused_on_another_users_routes_before_and_after_it_is_remembered() {
    let f = fixture();
    let env = EnvironmentId::from(ENV);
    assert_eq!(
        refusal(f.service.authenticate_user(&env, "u2", "token").await),
        TokenRefusal::OtherUser
    );
    f.service
        .authenticate_user(&env, "u1", "token")
        .await
        .expect("answer");
    assert_eq!(
        refusal(f.service.authenticate_user(&env, "u2", "token").await),
        TokenRefusal::OtherUser
    );
    // Nor does it open another environment.
    let other = EnvironmentId::from("env_2");
    assert!(f
        .service
        .authenticate_user(&other, "u1", "token")
        .await
        .is_err());
}

#[tokio::test]
async fn deleting_a_key_through_the_service_refuses_its_tokens_at_once() {
    let f = fixture();
    let env = EnvironmentId::from(ENV);
    f.service
        .authenticate_user(&env, "u1", "token")
        .await
        .expect("answer");
    f.service
        .delete(&admin(), &env, &"sdk_1".into())
        .await
        .expect("answer");
    assert_eq!(
        refusal(f.service.authenticate_user(&env, "u1", "token").await),
        TokenRefusal::UnknownKey
    );
}

#[tokio::test]
async fn a_key_deleted_by_another_process_stops_verifying_within_the_ttl() {
    let f = fixture();
    let env = EnvironmentId::from(ENV);
    f.service
        .authenticate_user(&env, "u1", "token")
        .await
        .expect("answer");
    // Another process deletes it: storage has it no more, this process's memory still does.
    f.stored.lock().expect("lock").take();
    *f.now.lock().expect("lock") += Duration::milliseconds(KEY_TTL_MS + 1);
    assert_eq!(
        refusal(f.service.authenticate_user(&env, "u1", "token").await),
        TokenRefusal::UnknownKey
    );
    // A name that is no key is remembered too: no read per request.
    let reads = *f.reads.lock().expect("lock");
    let _ = f.service.authenticate_user(&env, "u1", "token").await;
    assert_eq!(*f.reads.lock().expect("lock"), reads);
}

#[tokio::test]
async fn a_changed_key_verifies_its_tokens_again() {
    let f = fixture();
    let env = EnvironmentId::from(ENV);
    f.service
        .authenticate_user(&env, "u1", "token")
        .await
        .expect("answer");
    let patch = SdkKeyInput {
        allowed_issuers: Some(vec!["https://issuer.example".into()]),
        ..SdkKeyInput::default()
    };
    f.service
        .update(&admin(), &env, &"sdk_1".into(), patch)
        .await
        .expect("answer");
    // The token has no `iss`: under the key as it is now, it is refused.
    assert_eq!(
        refusal(f.service.authenticate_user(&env, "u1", "token").await),
        TokenRefusal::Issuer
    );
    assert_eq!(*f.checks.lock().expect("lock"), 2);
}

/// Contract §10: a clock at the calendar's last instant (the database's, say) makes the
/// keys' freshness unrepresentable; the answer comes without remembering them.
#[tokio::test]
async fn a_clock_at_the_calendars_edge_answers_without_remembering_the_keys() {
    let f = fixture();
    let env = EnvironmentId::from(ENV);
    *f.now.lock().expect("lock") = chrono::DateTime::<chrono::Utc>::MAX_UTC;
    for _ in 0..2 {
        let answer = f.service.authenticate_user(&env, "u1", "token").await;
        assert!(
            matches!(answer, Ok(_) | Err(DomainError::TokenRefused(_))),
            "{answer:?}"
        );
    }
    assert_eq!(*f.reads.lock().expect("lock"), 2, "read again each time");
}

#[tokio::test]
async fn a_forged_token_is_refused_and_never_remembered() {
    let f = fixture();
    let env = EnvironmentId::from(ENV);
    for _ in 0..2 {
        assert_eq!(
            refusal(f.service.authenticate_user(&env, "u1", "forged").await),
            TokenRefusal::Signature
        );
    }
    assert_eq!(*f.checks.lock().expect("lock"), 2);
    assert!(f.merged.lock().expect("lock").is_empty());
}

#[tokio::test]
async fn adding_a_key_reports_every_problem_at_once() {
    let mut keys = MockSdkKeyRepository::new();
    keys.expect_insert().never();
    let mut verifier = MockTokenVerifier::new();
    verifier
        .expect_read_keys()
        .returning(|_| Err("is an RSA key of 1024 bits".into()));
    let service = SdkKeyService::new(
        Arc::new(keys),
        Arc::new(MockEndUserRepository::new()),
        Arc::new(verifier),
        crate::testing::clock(),
    );
    let input = SdkKeyInput {
        name: Some("has space".into()),
        public_key: Some(PublicKeyInput::Pem("x".into())),
        max_token_expiry_days: Some(31),
        allowed_issuers: Some(vec![String::new()]),
        claim_mappings: Some(BTreeMap::from([("email".into(), "profile.email".into())])),
        allowed_origins: Some(vec!["https://app.example/".into()]),
    };
    let Err(DomainError::Validation(errors)) = service.create(&admin(), &ENV.into(), input).await
    else {
        panic!("expected a validation error");
    };
    let fields: Vec<_> = errors.iter().map(|e| e.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "name",
            "maxTokenExpiryDays",
            "allowedIssuers[0]",
            "claimMappings.email",
            "allowedOrigins[0]",
            "publicKey"
        ]
    );
    assert!(errors[5].message.contains("1024"));
    // Nothing sent: both required fields named.
    let Err(DomainError::Validation(errors)) = service
        .create(&admin(), &ENV.into(), SdkKeyInput::default())
        .await
    else {
        panic!("expected a validation error");
    };
    assert_eq!(errors.len(), 2);
}

#[tokio::test]
async fn a_name_taken_is_a_conflict_and_keys_need_their_scopes() {
    let mut keys = MockSdkKeyRepository::new();
    keys.expect_list().returning(|_| Ok(vec![]));
    keys.expect_insert()
        .returning(|_| Err(StorageError::UniqueViolation("sdk_keys_name".into())));
    let mut verifier = MockTokenVerifier::new();
    verifier.expect_read_keys().returning(|_| {
        Ok(vec![VerifyingKey {
            kind: SdkKeyKind::EcP256,
            pem: "PEM".into(),
        }])
    });
    let service = SdkKeyService::new(
        Arc::new(keys),
        Arc::new(MockEndUserRepository::new()),
        Arc::new(verifier),
        crate::testing::clock(),
    );
    let input = || SdkKeyInput {
        name: Some("app".into()),
        public_key: Some(PublicKeyInput::Pem("x".into())),
        ..SdkKeyInput::default()
    };
    assert!(matches!(
        service.create(&admin(), &ENV.into(), input()).await,
        Err(DomainError::Conflict {
            kind: ConflictKind::SdkKeyNameTaken,
            ..
        })
    ));
    let events = caller(ENV, KeyAccess::Roles(vec![Role::Events]));
    assert!(matches!(
        service.create(&events, &ENV.into(), input()).await,
        Err(DomainError::Forbidden(_))
    ));
    let reader = caller(ENV, KeyAccess::Scopes(vec![Scope::SdkKeysRead]));
    assert!(matches!(
        service.create(&reader, &ENV.into(), input()).await,
        Err(DomainError::Forbidden(_))
    ));
    // A user token reaches no key route.
    let user = Principal::end_user("sdk_1", ENV, "u1");
    assert!(matches!(
        service.list(&user, &ENV.into()).await,
        Err(DomainError::Unauthenticated)
    ));
}

#[test]
fn only_scalar_mapped_claims_become_attributes() {
    let mut key = key();
    key.claim_mappings = BTreeMap::from([
        ("email".into(), "email".into()),
        ("age".into(), "age".into()),
        ("admin".into(), "admin".into()),
        ("groups".into(), "groups".into()),
        ("long".into(), "long".into()),
        ("absent".into(), "absent".into()),
    ]);
    let claims = json!({
        "email": "a@b.c", "age": 30, "admin": false, "groups": ["x"],
        "long": "x".repeat(crate::audience::ATTRIBUTE_VALUE_MAX_CHARS + 1), "unmapped": 1
    });
    let Value::Object(claims) = claims else {
        unreachable!()
    };
    let attributes = mapped_attributes(&key, &claims);
    assert_eq!(
        Value::Object(attributes),
        json!({"email": "a@b.c", "age": 30, "admin": false})
    );
}

/// Tickets in memory, as the storage port promises them: each taken once, before it expires.
#[derive(Default)]
struct Tickets(Mutex<Vec<(crate::sdk::StreamTicket, bool)>>);

#[async_trait::async_trait]
impl crate::sdk::StreamTicketRepository for Tickets {
    async fn insert(
        &self,
        ticket: &crate::sdk::StreamTicket,
        now: Timestamp,
    ) -> Result<(), StorageError> {
        let mut all = self.0.lock().expect("lock");
        all.retain(|(t, _)| t.expires >= now);
        all.push((ticket.clone(), false));
        Ok(())
    }

    async fn redeem(
        &self,
        hash: &SecretHash,
        environment_id: &str,
        end_user: &str,
        now: Timestamp,
    ) -> Result<Option<TicketGrant>, StorageError> {
        let mut all = self.0.lock().expect("lock");
        let found = all.iter_mut().find(|(t, used)| {
            !*used
                && t.hash == *hash
                && t.environment_id == environment_id
                && t.end_user == end_user
                && t.expires > now
        });
        Ok(found.map(|(t, used)| {
            *used = true;
            t.grant.clone()
        }))
    }
}

fn tickets(f: &Fixture) -> (crate::sdk::StreamTicketService, Arc<Tickets>) {
    let store = Arc::new(Tickets::default());
    let (clock, now) = (MockClock::new(), Arc::clone(&f.now));
    let mut clock = clock;
    clock
        .expect_now()
        .returning(move || *now.lock().expect("lock"));
    let service = crate::sdk::StreamTicketService::new(
        Arc::new(fixture_service(f)),
        store.clone(),
        Arc::new(clock),
    );
    (service, store)
}

/// A second service over the fixture's stored key, as another process would have.
fn fixture_service(f: &Fixture) -> SdkKeyService {
    let mut keys = MockSdkKeyRepository::new();
    let stored = Arc::clone(&f.stored);
    keys.expect_list()
        .returning(move |_| Ok(stored.lock().expect("lock").clone().into_iter().collect()));
    let mut users = MockEndUserRepository::new();
    users
        .expect_merge_attributes()
        .returning(|_, _, _, _| Ok(()));
    let now = Arc::clone(&f.now);
    let mut clock = MockClock::new();
    clock
        .expect_now()
        .returning(move || *now.lock().expect("lock"));
    SdkKeyService::new(
        Arc::new(keys),
        Arc::new(users),
        Arc::new(verifier(Arc::new(Mutex::new(0)))),
        Arc::new(clock),
    )
}

#[tokio::test]
async fn a_ticket_opens_one_stream_of_its_user_once_and_only_in_time() {
    let f = fixture();
    let (service, store) = tickets(&f);
    let env: EnvironmentId = ENV.into();
    let (ticket, expires) = service.mint(&env, "u1", "token").await.expect("mint");
    assert!(ticket.starts_with("wst_"));
    assert_eq!(
        expires,
        t0() + Duration::seconds(crate::sdk::STREAM_TICKET_SECONDS)
    );
    // Only its hash is stored.
    let stored = store.0.lock().expect("lock")[0].0.clone();
    assert_ne!(stored.hash.as_str(), ticket);
    assert!(stored.hash.verify(&ticket));
    // Another user's stream, another environment's: refused, and not used up.
    for (e, u) in [(ENV, "u2"), ("env_2", "u1")] {
        let refused = service.redeem(&e.into(), u, &ticket).await;
        assert!(
            matches!(refused, Err(DomainError::Unauthenticated)),
            "{e} {u}"
        );
    }
    let (principal, grant) = service.redeem(&env, "u1", &ticket).await.expect("redeem");
    assert_eq!(principal.end_user.as_deref(), Some("u1"));
    assert_eq!(grant.key_id.as_str(), "sdk_1");
    // Used once: never again.
    let again = service.redeem(&env, "u1", &ticket).await;
    assert!(matches!(again, Err(DomainError::Unauthenticated)));
    // Expired: refused.
    let (late, _) = service.mint(&env, "u1", "token").await.expect("mint");
    *f.now.lock().expect("lock") = t0() + Duration::seconds(61);
    let refused = service.redeem(&env, "u1", &late).await;
    assert!(matches!(refused, Err(DomainError::Unauthenticated)));
    // Text that is no ticket costs no read.
    for text in ["", "wbs_x", &format!("wst_{}", "a".repeat(100))] {
        let refused = service.redeem(&env, "u1", text).await;
        assert!(
            matches!(refused, Err(DomainError::Unauthenticated)),
            "{text}"
        );
    }
}

#[tokio::test]
async fn a_ticket_is_minted_only_with_a_token_that_signs_in() {
    let f = fixture();
    let (service, store) = tickets(&f);
    let forged = service.mint(&ENV.into(), "u1", "forged").await;
    assert!(matches!(
        forged,
        Err(DomainError::TokenRefused(TokenRefusal::Signature))
    ));
    let other = service.mint(&ENV.into(), "u2", "token").await;
    assert!(matches!(
        other,
        Err(DomainError::TokenRefused(TokenRefusal::OtherUser))
    ));
    assert!(store.0.lock().expect("lock").is_empty());
}

#[tokio::test]
async fn a_ticket_stream_holds_while_its_token_would() {
    let f = fixture();
    let (service, _) = tickets(&f);
    let env: EnvironmentId = ENV.into();
    let (ticket, _) = service.mint(&env, "u1", "token").await.expect("mint");
    let (_, grant) = service.redeem(&env, "u1", &ticket).await.expect("redeem");
    assert!(service.holds(&env, &grant).await.expect("holds"));
    // The token expired (beyond the leeway): the stream ends.
    *f.now.lock().expect("lock") = t0() + Duration::seconds(3_600 + 61);
    assert!(!service.holds(&env, &grant).await.expect("holds"));
    // Its key changed, or deleted: the stream ends.
    *f.now.lock().expect("lock") = t0() + Duration::seconds(10);
    let mut changed = key();
    changed.updated = t0() + Duration::seconds(1);
    *f.stored.lock().expect("lock") = Some(changed);
    assert!(!service.holds(&env, &grant).await.expect("holds"));
    *f.stored.lock().expect("lock") = None;
    assert!(!service.holds(&env, &grant).await.expect("holds"));
}

#[tokio::test]
async fn only_an_origin_a_key_lists_is_allowed() {
    let f = fixture();
    let env: EnvironmentId = ENV.into();
    assert!(f
        .service
        .allows_origin(&env, "https://app.example")
        .await
        .expect("read"));
    for other in [
        "https://app.example.evil",
        "http://app.example",
        "https://APP.example",
        "",
    ] {
        assert!(
            !f.service.allows_origin(&env, other).await.expect("read"),
            "{other}"
        );
    }
    assert!(!f
        .service
        .allows_origin(&"env_2".into(), "https://app.example")
        .await
        .expect("read"));
}

/// Keys whose every read waits once before answering, as storage does, and counts itself.
struct SlowKeys(Mutex<usize>);

#[async_trait::async_trait]
impl SdkKeyRepository for SlowKeys {
    async fn insert(&self, _: &SdkKey) -> Result<(), StorageError> {
        Ok(())
    }
    async fn get(&self, _: &str, _: &str) -> Result<Option<SdkKey>, StorageError> {
        Ok(None)
    }
    async fn find_by_name(&self, _: &str, _: &str) -> Result<Option<SdkKey>, StorageError> {
        Ok(None)
    }
    async fn list(&self, _: &str) -> Result<Vec<SdkKey>, StorageError> {
        *self.0.lock().expect("lock") += 1;
        let mut waited = false;
        futures_util::future::poll_fn(|cx| {
            if waited {
                std::task::Poll::Ready(())
            } else {
                waited = true;
                cx.waker().wake_by_ref();
                std::task::Poll::Pending
            }
        })
        .await;
        Ok(vec![key()])
    }
    async fn update(&self, _: &SdkKey) -> Result<bool, StorageError> {
        Ok(false)
    }
    async fn delete(&self, _: &str, _: &str) -> Result<bool, StorageError> {
        Ok(false)
    }
}

#[tokio::test]
async fn stale_keys_are_read_again_once_however_many_wait_for_them() {
    let keys = Arc::new(SlowKeys(Mutex::new(0)));
    let (clock, now) = moving_clock();
    let service = SdkKeyService::new(
        keys.clone(),
        Arc::new(MockEndUserRepository::new()),
        Arc::new(verifier(Arc::new(Mutex::new(0)))),
        clock,
    );
    let env: EnvironmentId = ENV.into();
    let grant = TicketGrant {
        kid: "app".into(),
        key_id: "sdk_1".into(),
        key_updated: t0(),
        token_expires: t0().timestamp() + 3_600,
    };
    for round in 1..=2 {
        let checks = (0..50).map(|_| service.grant_holds(&env, &grant));
        let held = futures_util::future::join_all(checks).await;
        assert!(held.into_iter().all(|h| h.expect("read")), "round {round}");
        assert_eq!(
            *keys.0.lock().expect("lock"),
            round,
            "one read for 50 checks"
        );
        // Stale after KEY_TTL_MS.
        *now.lock().expect("lock") = t0() + Duration::milliseconds(KEY_TTL_MS * round as i64 + 1);
    }
}
