//! SDK keys and end users signing in (contract §15), on SQLite and PostgreSQL: keys stored,
//! found by name, changed and deleted within their environment; a first sign-in creates its
//! user and later ones merge attributes without touching tags.

use std::collections::BTreeMap;

use adapters_diesel::{
    both_backends, Database, DieselEndUserRepository, DieselSdkKeyRepository,
    DieselTenancyRepository,
};
use chrono::{Duration, TimeZone, Utc};
use domain::audience::{EndUser, EndUserRepository};
use domain::sdk::{SdkKey, SdkKeyKind, SdkKeyRepository, VerifyingKey};
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

both_backends!(
    keys_round_trip_within_their_environment,
    a_sign_in_creates_its_user_and_merges_attributes_keeping_tags,
);
