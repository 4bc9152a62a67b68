//! SDK keys and end users signing in (contract §15), on SQLite and PostgreSQL: keys stored,
//! found by name, changed and deleted within their environment; a first sign-in creates its
//! user and later ones merge attributes without touching tags; stream tickets are taken once,
//! before they expire, by their user only, and by one of two processes racing.

use std::collections::BTreeMap;

use adapters_diesel::{
    both_backends, Database, DieselEndUserRepository, DieselSdkKeyRepository,
    DieselStreamTicketRepository, DieselTenancyRepository,
};
use chrono::{Duration, TimeZone, Utc};
use domain::audience::{EndUser, EndUserRepository};
use domain::sdk::{
    SdkKey, SdkKeyKind, SdkKeyRepository, StreamTicket, StreamTicketRepository, TicketGrant,
    VerifyingKey,
};
use domain::secret::SecretHash;
use domain::{Environment, Organisation, StorageError, TenancyRepository, Timestamp};
use serde_json::{json, Map, Value};

fn t(seconds: i64) -> Timestamp {
    Utc.with_ymd_and_hms(2026, 11, 22, 10, 0, 0)
        .single()
        .expect("time")
        + Duration::milliseconds(seconds * 1000 + 123)
}

/// A database with one organisation and two environments, `env_a` and `env_b`.
async fn seeded(url: &str) -> Database {
    let db = Database::connect(url, 4).expect("connect and migrate");
    let repo = DieselTenancyRepository::new(db.clone());
    repo.insert_organisation(&Organisation {
        id: "org_1".into(),
        name: "default".into(),
        created: t(0),
    })
    .await
    .expect("org");
    for id in ["env_a", "env_b"] {
        repo.insert_environment(&Environment {
            id: id.into(),
            organisation_id: "org_1".into(),
            name: id.into(),
            created: t(1),
        })
        .await
        .expect("env");
    }
    db
}

fn sdk_key(id: &str, env: &str, name: &str) -> SdkKey {
    SdkKey {
        id: id.into(),
        environment_id: env.into(),
        name: name.into(),
        keys: vec![
            VerifyingKey {
                kind: SdkKeyKind::Rsa,
                pem: "-----BEGIN PUBLIC KEY-----\nRSA\n-----END PUBLIC KEY-----\n".into(),
            },
            VerifyingKey {
                kind: SdkKeyKind::EcP256,
                pem: "-----BEGIN PUBLIC KEY-----\nEC\n-----END PUBLIC KEY-----\n".into(),
            },
        ],
        max_token_expiry_days: 7,
        allowed_issuers: vec!["https://a.example".into(), "https://b.example".into()],
        claim_mappings: BTreeMap::from([("email".to_owned(), "email".to_owned())]),
        allowed_origins: vec!["https://app.example".into(), "http://localhost:3000".into()],
        created: t(2),
        updated: t(2),
    }
}

async fn keys_round_trip_within_their_environment(url: &str) {
    let repo = DieselSdkKeyRepository::new(seeded(url).await);
    let app = sdk_key("sdk_1", "env_a", "app");
    repo.insert(&app).await.expect("insert");
    repo.insert(&sdk_key("sdk_2", "env_a", "admin"))
        .await
        .expect("insert");
    // The same name in another environment is another key.
    repo.insert(&sdk_key("sdk_3", "env_b", "app"))
        .await
        .expect("insert");
    assert!(matches!(
        repo.insert(&sdk_key("sdk_4", "env_a", "app")).await,
        Err(StorageError::UniqueViolation(_))
    ));
    assert!(matches!(
        repo.insert(&sdk_key("sdk_5", "env_nope", "app")).await,
        Err(StorageError::ForeignKeyViolation(_))
    ));
    assert_eq!(
        repo.get("env_a", "sdk_1").await.expect("get"),
        Some(app.clone())
    );
    assert_eq!(repo.get("env_b", "sdk_1").await.expect("get"), None);
    assert_eq!(
        repo.find_by_name("env_a", "app").await.expect("find"),
        Some(app.clone())
    );
    assert_eq!(
        repo.find_by_name("env_a", "nope").await.expect("find"),
        None
    );
    let names: Vec<_> = repo
        .list("env_a")
        .await
        .expect("list")
        .into_iter()
        .map(|k| k.name)
        .collect();
    assert_eq!(names, ["admin", "app"]);

    let mut changed = app.clone();
    changed.name = "app-2".into();
    changed.keys.truncate(1);
    changed.max_token_expiry_days = 30;
    changed.allowed_issuers.clear();
    changed.claim_mappings.clear();
    changed.allowed_origins = vec!["https://other.example".into()];
    changed.updated = t(9);
    assert!(repo.update(&changed).await.expect("update"));
    assert_eq!(
        repo.get("env_a", "sdk_1").await.expect("get"),
        Some(changed.clone())
    );
    assert_eq!(repo.find_by_name("env_a", "app").await.expect("find"), None);
    changed.name = "admin".into();
    assert!(matches!(
        repo.update(&changed).await,
        Err(StorageError::UniqueViolation(_))
    ));
    let mut elsewhere = changed.clone();
    elsewhere.environment_id = "env_b".into();
    assert!(
        !repo.update(&elsewhere).await.expect("update"),
        "not env_b's"
    );

    assert!(!repo.delete("env_b", "sdk_1").await.expect("delete"));
    assert!(repo.delete("env_a", "sdk_1").await.expect("delete"));
    assert!(!repo.delete("env_a", "sdk_1").await.expect("again"));
    assert_eq!(
        repo.find_by_name("env_a", "app-2").await.expect("find"),
        None
    );
    assert!(repo
        .find_by_name("env_b", "app")
        .await
        .expect("find")
        .is_some());
}

fn attributes(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

async fn a_sign_in_creates_its_user_and_merges_attributes_keeping_tags(url: &str) {
    let repo = DieselEndUserRepository::new(seeded(url).await);
    repo.merge_attributes(
        "env_a",
        "u1",
        attributes(json!({"email": "a@x.example"})),
        t(5),
    )
    .await
    .expect("create");
    let created = repo.get("env_a", "u1").await.expect("get").expect("exists");
    assert_eq!(
        created,
        EndUser {
            environment_id: "env_a".into(),
            id: "u1".into(),
            test_user: false,
            tags: vec![],
            attributes: attributes(json!({"email": "a@x.example"})),
            created: t(5),
            updated: t(5),
        }
    );
    // A user put with tags and other attributes keeps them through a merge.
    repo.upsert(vec![EndUser {
        test_user: true,
        tags: vec!["vip".into()],
        attributes: attributes(json!({"email": "a@x.example", "plan": "gold"})),
        updated: t(6),
        ..created.clone()
    }])
    .await
    .expect("put");
    repo.merge_attributes(
        "env_a",
        "u1",
        attributes(json!({"email": "b@x.example"})),
        t(7),
    )
    .await
    .expect("merge");
    let merged = repo.get("env_a", "u1").await.expect("get").expect("exists");
    assert_eq!(merged.tags, ["vip"]);
    assert!(merged.test_user);
    assert_eq!(
        merged.attributes,
        attributes(json!({"email": "b@x.example", "plan": "gold"}))
    );
    assert_eq!((merged.created, merged.updated), (t(5), t(7)));
    // Nothing new: the row is not written (`updated` stays).
    repo.merge_attributes(
        "env_a",
        "u1",
        attributes(json!({"email": "b@x.example"})),
        t(8),
    )
    .await
    .expect("unchanged");
    repo.merge_attributes("env_a", "u1", Map::new(), t(9))
        .await
        .expect("nothing");
    let same = repo.get("env_a", "u1").await.expect("get").expect("exists");
    assert_eq!(same.updated, t(7));
    // Another environment's user of the same id is another user.
    assert_eq!(repo.get("env_b", "u1").await.expect("get"), None);
}

fn ticket(text: &str, user: &str, expires: Timestamp) -> StreamTicket {
    StreamTicket {
        hash: SecretHash::of(text),
        environment_id: "env_a".into(),
        end_user: user.into(),
        grant: TicketGrant {
            kid: "app".into(),
            key_id: "sdk_1".into(),
            key_updated: t(2),
            token_expires: t(3_600).timestamp(),
        },
        expires,
    }
}

async fn a_stream_ticket_is_taken_once_by_its_user_before_it_expires(url: &str) {
    let db = seeded(url).await;
    let repo = DieselStreamTicketRepository::new(db.clone());
    let one = ticket("wst_one", "u1", t(60));
    repo.insert(&one, t(0)).await.expect("insert");
    let hash = SecretHash::of("wst_one");
    for (env, user) in [("env_b", "u1"), ("env_a", "u2")] {
        let taken = repo.redeem(&hash, env, user, t(1)).await.expect("redeem");
        assert_eq!(taken, None, "{env} {user}");
    }
    let taken = repo
        .redeem(&hash, "env_a", "u1", t(1))
        .await
        .expect("redeem");
    assert_eq!(taken, Some(one.grant.clone()));
    let again = repo
        .redeem(&hash, "env_a", "u1", t(2))
        .await
        .expect("again");
    assert_eq!(again, None, "used once");
    // Expired: not taken.
    repo.insert(&ticket("wst_two", "u1", t(60)), t(0))
        .await
        .expect("insert");
    let late = repo
        .redeem(&SecretHash::of("wst_two"), "env_a", "u1", t(60))
        .await
        .expect("late");
    assert_eq!(late, None);
    // Minting removes the expired ones.
    repo.insert(&ticket("wst_three", "u1", t(200)), t(100))
        .await
        .expect("insert");
    let other = DieselStreamTicketRepository::new(db.clone());
    let kept = other
        .redeem(&SecretHash::of("wst_three"), "env_a", "u1", t(101))
        .await
        .expect("redeem");
    assert!(
        kept.is_some(),
        "minted through one repository, taken through another"
    );
    // Two processes at once: one takes it.
    repo.insert(&ticket("wst_race", "u1", t(300)), t(150))
        .await
        .expect("insert");
    let race = SecretHash::of("wst_race");
    let (a, b) = tokio::join!(
        repo.redeem(&race, "env_a", "u1", t(151)),
        other.redeem(&race, "env_a", "u1", t(151)),
    );
    let taken = [a.expect("a"), b.expect("b")];
    assert_eq!(taken.iter().filter(|g| g.is_some()).count(), 1);
}

both_backends!(
    keys_round_trip_within_their_environment,
    a_sign_in_creates_its_user_and_merges_attributes_keeping_tags,
    a_stream_ticket_is_taken_once_by_its_user_before_it_expires,
);
