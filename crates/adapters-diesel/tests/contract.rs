//! Repository contract tests: every test body runs on SQLite and on PostgreSQL
//! (`sqlite::name`, `postgres::name`), each on its own fresh database.

use adapters_diesel::{both_backends, Database, DieselHealthProbe, DieselTenancyRepository};
use chrono::{Duration, TimeZone, Utc};
use domain::secret::SecretHash;
use domain::{
    AccessTokenGrant, ApiKey, Environment, EnvironmentGrant, HealthProbe, KeyAccess, Organisation,
    Role, Scope, StorageError, TenancyRepository, Timestamp,
};

fn t(seconds: i64) -> Timestamp {
    Utc.with_ymd_and_hms(2026, 11, 22, 10, 0, 0)
        .single()
        .expect("time")
        + Duration::milliseconds(seconds * 1000 + 123)
}

/// `record_run` without runs, as most tests record: every invocation left to the workers.
#[async_trait::async_trait]
trait Record {
    async fn record(
        &self,
        invocations: Vec<domain::trigger::Invocation>,
    ) -> Result<Vec<Option<domain::trigger::Invocation>>, StorageError>;
}

#[async_trait::async_trait]
impl<R: domain::trigger::InvocationRepository> Record for R {
    async fn record(
        &self,
        invocations: Vec<domain::trigger::Invocation>,
    ) -> Result<Vec<Option<domain::trigger::Invocation>>, StorageError> {
        self.record_run(invocations.into_iter().map(|i| (i, None)).collect())
            .await
    }
}

fn connect(url: &str) -> Database {
    Database::connect(url, 4).expect("connect and migrate")
}

fn org(id: &str, name: &str) -> Organisation {
    Organisation {
        id: id.into(),
        name: name.into(),
        created: t(0),
    }
}

fn env(id: &str, org: &str, name: &str) -> Environment {
    Environment {
        id: id.into(),
        organisation_id: org.into(),
        name: name.into(),
        created: t(1),
    }
}

fn key(id: &str, secret: &str, access: KeyAccess, environments: EnvironmentGrant) -> ApiKey {
    ApiKey {
        id: id.into(),
        organisation_id: "org_1".into(),
        name: Some("ci".into()),
        secret_hash: SecretHash::of(secret),
        access,
        environments,
        created: t(2),
        revoked: None,
    }
}

/// A database with one organisation and two environments.
async fn seeded(url: &str) -> (Database, DieselTenancyRepository) {
    let db = connect(url);
    let repo = DieselTenancyRepository::new(db.clone());
    repo.insert_organisation(&org("org_1", "default"))
        .await
        .expect("org");
    repo.insert_environment(&env("env_a", "org_1", "a"))
        .await
        .expect("env a");
    repo.insert_environment(&env("env_b", "org_1", "b"))
        .await
        .expect("env b");
    (db, repo)
}

async fn migrations_apply_once_and_readiness_reports_them(url: &str) {
    let db = connect(url);
    DieselHealthProbe::new(db).ready().await.expect("ready");
    // A second process starting on the same database finds nothing to do.
    let again = connect(url);
    DieselHealthProbe::new(again)
        .ready()
        .await
        .expect("still ready");
}

async fn a_checkpoint_leaves_the_wal_copied_and_the_data_readable(url: &str) {
    let (db, repo) = seeded(url).await;
    // SQLite: every committed page is copied into the database file (nothing else reads or
    // writes here). PostgreSQL: a no-op that reports nothing left.
    assert_eq!(db.checkpoint().await.expect("checkpoint"), 0);
    assert_eq!(db.checkpoint().await.expect("again"), 0, "idempotent");
    // Contract §18: at rest (nothing added since the last checkpoint) the WAL is truncated.
    if let Some(file) = url.strip_prefix("sqlite://") {
        let wal = std::fs::metadata(format!("{file}-wal"))
            .expect("the WAL file")
            .len();
        assert!(wal <= adapters_diesel::WAL_LIMIT_BYTES, "{wal} bytes");
        assert_eq!(wal, 0, "truncated at rest");
    }
    assert_eq!(
        repo.list_environments("org_1").await.expect("list").len(),
        2
    );
}

async fn organisations_and_environments_round_trip(url: &str) {
    let (_db, repo) = seeded(url).await;
    assert_eq!(
        repo.find_organisation_by_name("default")
            .await
            .expect("find"),
        Some(org("org_1", "default"))
    );
    assert_eq!(
        repo.find_organisation_by_name("other").await.expect("find"),
        None
    );
    let envs = repo.list_environments("org_1").await.expect("list");
    assert_eq!(
        envs,
        vec![env("env_a", "org_1", "a"), env("env_b", "org_1", "b")]
    );
    assert!(repo
        .list_environments("org_2")
        .await
        .expect("list")
        .is_empty());
    assert!(matches!(
        repo.insert_environment(&env("env_c", "org_1", "a")).await,
        Err(StorageError::UniqueViolation(_))
    ));
    assert!(matches!(
        repo.insert_organisation(&org("org_2", "default")).await,
        Err(StorageError::UniqueViolation(_))
    ));
}

async fn keys_round_trip_with_roles_scopes_and_grants(url: &str) {
    let (_db, repo) = seeded(url).await;
    let legacy = key(
        "key_l",
        "wbs_l",
        KeyAccess::Roles(vec![Role::Events, Role::Auth]),
        EnvironmentGrant::Only(vec!["env_a".into(), "env_b".into()]),
    );
    let scoped = ApiKey {
        name: None,
        ..key(
            "key_s",
            "wbs_s",
            KeyAccess::Scopes(Scope::ALL.to_vec()),
            EnvironmentGrant::All,
        )
    };
    repo.insert_key(&legacy).await.expect("legacy");
    repo.insert_key(&scoped).await.expect("scoped");
    assert_eq!(
        repo.find_key("key_l").await.expect("find"),
        Some(legacy.clone())
    );
    assert_eq!(
        repo.find_key_by_secret_hash(&SecretHash::of("wbs_s"))
            .await
            .expect("find"),
        Some(scoped)
    );
    assert_eq!(
        repo.find_key_by_secret_hash(&SecretHash::of("wbs_nope"))
            .await
            .expect("find"),
        None
    );
    assert_eq!(repo.find_key("key_nope").await.expect("find"), None);
}

/// Migration 18 gives `environment_settings:write` to the keys that held every scope before it
/// existed, and to no other. Its statement is run again here on keys stored as they were.
/// Migration 19: a key that may create and revoke keys may list them too; no other key gains
/// anything.
async fn the_credentials_read_scope_goes_to_keys_that_may_write_credentials(url: &str) {
    let (_db, repo) = seeded(url).await;
    let writer = key(
        "key_writer",
        "wbs_writer",
        KeyAccess::Scopes(vec![Scope::UsersRead, Scope::CredentialsWrite]),
        EnvironmentGrant::All,
    );
    let other = key(
        "key_other",
        "wbs_other",
        KeyAccess::Scopes(vec![Scope::UsersRead]),
        EnvironmentGrant::All,
    );
    repo.insert_key(&writer).await.expect("writer");
    repo.insert_key(&other).await.expect("other");
    let sql = include_str!("../../../migrations/sqlite/20261125000019_key_lists/up.sql");
    let update = &sql[sql.find("UPDATE").expect("the update")..];
    let changed = adapters_diesel::testing::raw_texts(
        url,
        &format!("{} RETURNING id AS v", update.trim().trim_end_matches(';')),
    );
    assert_eq!(changed, ["key_writer"]);
    assert_eq!(
        repo_key(url, "key_writer").await,
        KeyAccess::Scopes(vec![
            Scope::UsersRead,
            Scope::CredentialsWrite,
            Scope::CredentialsRead
        ])
    );
    assert_eq!(
        repo_key(url, "key_other").await,
        KeyAccess::Scopes(vec![Scope::UsersRead])
    );
}

/// A migration that gives `added` to the keys that held every scope before them (all but
/// `later`, which did not exist yet): run it on a key with all of those and on one lacking the
/// first, and check who gained what.
async fn scopes_go_to_keys_that_held_every_scope(
    url: &str,
    migration: &str,
    added: &[Scope],
    later: &[Scope],
) {
    let (_db, repo) = seeded(url).await;
    let before: Vec<Scope> = Scope::ALL
        .into_iter()
        .filter(|s| !added.contains(s) && !later.contains(s))
        .collect();
    let all = key(
        "key_all",
        "wbs_all",
        KeyAccess::Scopes(before.clone()),
        EnvironmentGrant::All,
    );
    let some = key(
        "key_some",
        "wbs_some",
        KeyAccess::Scopes(before[1..].to_vec()),
        EnvironmentGrant::All,
    );
    repo.insert_key(&all).await.expect("all");
    repo.insert_key(&some).await.expect("some");
    let statement: String = migration
        .lines()
        .filter(|l| !l.starts_with("--"))
        .collect::<Vec<_>>()
        .join("\n");
    let changed = adapters_diesel::testing::raw_texts(
        url,
        &format!(
            "{} RETURNING id AS v",
            statement.trim().trim_end_matches(';')
        ),
    );
    assert_eq!(changed, ["key_all"]);
    let access = |id| async move { repo_key(url, id).await };
    let mut gained = before.clone();
    gained.extend_from_slice(added);
    assert_eq!(
        access("key_all").await,
        KeyAccess::Scopes(gained),
        "every scope, the new ones last"
    );
    assert_eq!(
        access("key_some").await,
        KeyAccess::Scopes(before[1..].to_vec())
    );
}

async fn the_settings_scope_goes_to_keys_that_held_every_scope(url: &str) {
    scopes_go_to_keys_that_held_every_scope(
        url,
        include_str!("../../../migrations/sqlite/20261125000018_settings_scope/up.sql"),
        &[Scope::EnvironmentSettingsWrite],
        &[Scope::SdkKeysRead, Scope::SdkKeysWrite],
    )
    .await;
}

async fn the_sdk_key_scopes_go_to_keys_that_held_every_scope(url: &str) {
    scopes_go_to_keys_that_held_every_scope(
        url,
        include_str!("../../../migrations/sqlite/20261126000041_sdk_key_scopes/up.sql"),
        &[Scope::SdkKeysRead, Scope::SdkKeysWrite],
        &[],
    )
    .await;
}

async fn repo_key(url: &str, id: &str) -> KeyAccess {
    let repo = DieselTenancyRepository::new(connect(url));
    repo.find_key(id)
        .await
        .expect("find")
        .expect("stored")
        .access
}

async fn a_key_granted_an_unknown_environment_is_refused_whole(url: &str) {
    let (_db, repo) = seeded(url).await;
    let bad = key(
        "key_x",
        "wbs_x",
        KeyAccess::Roles(vec![Role::Events]),
        EnvironmentGrant::Only(vec!["env_a".into(), "env_zz".into()]),
    );
    assert!(matches!(
        repo.insert_key(&bad).await,
        Err(StorageError::ForeignKeyViolation(_))
    ));
    assert_eq!(
        repo.find_key("key_x").await.expect("find"),
        None,
        "nothing of it was stored"
    );
}

async fn revoking_a_key_kills_its_tokens(url: &str) {
    let (_db, repo) = seeded(url).await;
    repo.insert_key(&key(
        "key_1",
        "wbs_1",
        KeyAccess::Roles(vec![Role::Events]),
        EnvironmentGrant::All,
    ))
    .await
    .expect("key");
    let token = AccessTokenGrant {
        token_hash: SecretHash::of("wbt_1"),
        key_id: "key_1".into(),
        created: t(10),
        expires: t(3610),
    };
    repo.insert_access_token(&token).await.expect("token");
    assert_eq!(
        repo.find_access_token(&SecretHash::of("wbt_1"))
            .await
            .expect("find"),
        Some(token)
    );
    assert!(repo.revoke_key("key_1", t(20)).await.expect("revoke"));
    assert_eq!(
        repo.find_key("key_1")
            .await
            .expect("find")
            .and_then(|k| k.revoked),
        Some(t(20))
    );
    assert_eq!(
        repo.find_access_token(&SecretHash::of("wbt_1"))
            .await
            .expect("find"),
        None
    );
    // Revoking again keeps the first revocation time; an unknown key is reported.
    assert!(repo.revoke_key("key_1", t(30)).await.expect("again"));
    assert_eq!(
        repo.find_key("key_1")
            .await
            .expect("find")
            .and_then(|k| k.revoked),
        Some(t(20))
    );
    assert!(!repo.revoke_key("key_nope", t(30)).await.expect("unknown"));
}

async fn expired_tokens_are_swept_when_new_ones_are_issued(url: &str) {
    let (_db, repo) = seeded(url).await;
    repo.insert_key(&key(
        "key_1",
        "wbs_1",
        KeyAccess::Roles(vec![Role::Events]),
        EnvironmentGrant::All,
    ))
    .await
    .expect("key");
    let old = AccessTokenGrant {
        token_hash: SecretHash::of("wbt_old"),
        key_id: "key_1".into(),
        created: t(0),
        expires: t(5),
    };
    let new = AccessTokenGrant {
        token_hash: SecretHash::of("wbt_new"),
        key_id: "key_1".into(),
        created: t(10),
        expires: t(3610),
    };
    repo.insert_access_token(&old).await.expect("old");
    repo.insert_access_token(&new).await.expect("new");
    assert_eq!(
        repo.find_access_token(&SecretHash::of("wbt_old"))
            .await
            .expect("find"),
        None
    );
    assert!(repo
        .find_access_token(&SecretHash::of("wbt_new"))
        .await
        .expect("find")
        .is_some());
}

async fn bootstrap_happens_once_even_when_racing(url: &str) {
    let db = connect(url);
    let repo = std::sync::Arc::new(DieselTenancyRepository::new(db));
    let mut tasks = Vec::new();
    for i in 0..4 {
        let repo = repo.clone();
        tasks.push(tokio::spawn(async move {
            let o = org(&format!("org_{i}"), "default");
            let e = Environment {
                organisation_id: o.id.clone().into(),
                ..env(&format!("env_{i}"), "", "development")
            };
            let k = ApiKey {
                organisation_id: o.id.clone().into(),
                ..key(
                    &format!("key_{i}"),
                    &format!("wbs_{i}"),
                    KeyAccess::Scopes(Scope::ALL.to_vec()),
                    EnvironmentGrant::All,
                )
            };
            repo.bootstrap_if_empty(&o, &e, &k).await
        }));
    }
    let mut created = 0;
    for task in tasks {
        match task.await.expect("join") {
            Ok(true) => created += 1,
            Ok(false) | Err(StorageError::UniqueViolation(_)) => {}
            Err(other) => panic!("{other:?}"),
        }
    }
    assert_eq!(created, 1);
    let org = repo
        .find_organisation_by_name("default")
        .await
        .expect("find")
        .expect("exists");
    assert_eq!(
        repo.list_environments(&org.id).await.expect("list").len(),
        1
    );
}

/// Contract §11: keys are listed by client id, filtered by organisation and by the
/// environment they may use (granted it, or every one), revoked ones included, with when they
/// were last used; paging goes strictly after the cursor.
async fn keys_are_listed_by_environment_with_their_last_use(url: &str) {
    let (_db, repo) = seeded(url).await;
    let roles = || KeyAccess::Roles(vec![Role::Events]);
    let only = |ids: &[&str]| EnvironmentGrant::Only(ids.iter().map(|s| (*s).into()).collect());
    repo.insert_key(&key("key_1", "wbs_1", roles(), only(&["env_a"])))
        .await
        .expect("1");
    repo.insert_key(&key("key_2", "wbs_2", roles(), EnvironmentGrant::All))
        .await
        .expect("2");
    repo.insert_key(&key("key_3", "wbs_3", roles(), only(&["env_b"])))
        .await
        .expect("3");
    repo.insert_key(&key("key_4", "wbs_4", roles(), only(&["env_a", "env_b"])))
        .await
        .expect("4");
    repo.insert_organisation(&org("org_2", "other"))
        .await
        .expect("org 2");
    let mut elsewhere = key("key_5", "wbs_5", roles(), EnvironmentGrant::All);
    elsewhere.organisation_id = "org_2".into();
    repo.insert_key(&elsewhere).await.expect("5");
    repo.revoke_key("key_4", t(50)).await.expect("revoke");
    repo.mark_key_used("key_1", t(60)).await.expect("used");
    repo.mark_key_used("key_unknown", t(60))
        .await
        .expect("an unknown key is no error");
    // Written in the background: wait for it.
    for _ in 0..100 {
        let listed = repo
            .list_keys(None, None, &domain::PageRequest::default())
            .await
            .expect("list");
        if listed.iter().any(|k| k.last_used.is_some()) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }

    let page = |limit: u32, after: Option<&str>| domain::PageRequest {
        limit,
        after: after.map(str::to_owned),
    };
    let ids = |keys: &[domain::KeySummary]| -> Vec<String> {
        keys.iter().map(|k| k.key.id.as_str().to_owned()).collect()
    };
    let in_a = repo
        .list_keys(Some("org_1".into()), Some("env_a".into()), &page(50, None))
        .await
        .expect("env a");
    assert_eq!(ids(&in_a), ["key_1", "key_2", "key_4"]);
    assert_eq!(in_a[0].last_used, Some(t(60)));
    assert_eq!(in_a[0].key.environments, only(&["env_a"]));
    assert_eq!(in_a[1].last_used, None);
    assert_eq!(in_a[2].key.revoked, Some(t(50)));
    assert_eq!(in_a[2].key.environments, only(&["env_a", "env_b"]));
    let first = repo
        .list_keys(Some("org_1".into()), Some("env_a".into()), &page(1, None))
        .await
        .expect("first");
    assert_eq!(ids(&first), ["key_1", "key_2"], "limit + 1");
    let next = repo
        .list_keys(
            Some("org_1".into()),
            Some("env_a".into()),
            &page(1, Some("key_1")),
        )
        .await
        .expect("next");
    assert_eq!(ids(&next), ["key_2", "key_4"]);
    let org_1 = repo
        .list_keys(Some("org_1".into()), None, &page(50, None))
        .await
        .expect("org 1");
    assert_eq!(ids(&org_1), ["key_1", "key_2", "key_3", "key_4"]);
    let every = repo
        .list_keys(None, None, &page(50, None))
        .await
        .expect("all");
    assert_eq!(ids(&every), ["key_1", "key_2", "key_3", "key_4", "key_5"]);
}

both_backends!(
    keys_are_listed_by_environment_with_their_last_use,
    the_credentials_read_scope_goes_to_keys_that_may_write_credentials,
    migrations_apply_once_and_readiness_reports_them,
    a_checkpoint_leaves_the_wal_copied_and_the_data_readable,
    organisations_and_environments_round_trip,
    keys_round_trip_with_roles_scopes_and_grants,
    the_settings_scope_goes_to_keys_that_held_every_scope,
    the_sdk_key_scopes_go_to_keys_that_held_every_scope,
    a_key_granted_an_unknown_environment_is_refused_whole,
    revoking_a_key_kills_its_tokens,
    expired_tokens_are_swept_when_new_ones_are_issued,
    bootstrap_happens_once_even_when_racing,
);

// ---- Folders, flows and settings: the domain's port contract ----

/// The cases of `domain::contract`, which the in-memory stores pass too, each on a fresh
/// database of each backend.
mod ports {
    use std::sync::Arc;

    use adapters_diesel::testing::TestDatabase;
    use adapters_diesel::{DieselFlowRepository, DieselFolderRepository, DieselSettingsRepository};
    use domain::contract::{check, Stores};

    use super::seeded;

    async fn stores(db: TestDatabase) -> (Stores, TestDatabase) {
        let (database, _) = seeded(db.url()).await;
        let stores = Stores {
            folders: Arc::new(DieselFolderRepository::new(database.clone())),
            flows: Arc::new(DieselFlowRepository::new(database.clone())),
            settings: Arc::new(DieselSettingsRepository::new(database)),
        };
        (stores, db)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite_keeps_the_port_contract() {
        check(|| stores(TestDatabase::sqlite())).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_keeps_the_port_contract() {
        if TestDatabase::postgres().is_none() {
            return;
        }
        check(|| async {
            let db = TestDatabase::postgres().expect("it was there a moment ago");
            stores(db).await
        })
        .await;
    }
}

// ---- Audience ----

mod audience {
    use adapters_diesel::{
        both_backends, DieselEndUserRepository, DieselSegmentRepository, DieselStreamRepository,
    };
    use domain::audience::{
        EndUser, EndUserRepository, Filter, Segment, SegmentRepository, Stream, StreamRepository,
        UserQuery,
    };
    use domain::PageRequest;
    use serde_json::{json, Map};

    use super::{seeded, t};

    fn user(env: &str, id: &str, test: bool, tags: &[&str], at: i64) -> EndUser {
        let mut attributes = Map::new();
        attributes.insert("country".into(), json!("NZ"));
        attributes.insert("age".into(), json!(42));
        EndUser {
            environment_id: env.into(),
            id: id.into(),
            test_user: test,
            tags: tags.iter().map(|t| (*t).to_owned()).collect(),
            attributes,
            created: t(at),
            updated: t(at),
        }
    }

    fn default_stream(env: &str, id: &str) -> Stream {
        Stream {
            id: id.into(),
            environment_id: env.into(),
            name: "All cards".into(),
            is_default: true,
            created: t(1),
        }
    }

    async fn users_upsert_replace_and_delete_with_their_tags(url: &str) {
        let (db, _) = seeded(url).await;
        let repo = DieselEndUserRepository::new(db);
        repo.upsert(vec![
            user("env_a", "u1", false, &["a", "vip"], 1),
            user("env_b", "u1", true, &[], 1),
        ])
        .await
        .expect("insert");
        assert_eq!(
            repo.get("env_a", "u1").await.expect("get"),
            Some(user("env_a", "u1", false, &["a", "vip"], 1))
        );
        assert_eq!(
            repo.get("env_b", "u1")
                .await
                .expect("get")
                .map(|u| u.test_user),
            Some(true),
            "same id, other environment"
        );

        let mut replaced = user("env_a", "u1", true, &["b"], 9);
        replaced.attributes.remove("age");
        repo.upsert(vec![replaced.clone()]).await.expect("replace");
        let stored = repo.get("env_a", "u1").await.expect("get").expect("exists");
        assert_eq!(stored.created, t(1), "created is kept");
        assert_eq!(
            stored,
            EndUser {
                created: t(1),
                ..replaced
            }
        );

        assert!(repo.delete("env_a", "u1").await.expect("delete"));
        assert!(!repo.delete("env_a", "u1").await.expect("again"));
        assert_eq!(repo.get("env_a", "u1").await.expect("get"), None);
        let tagged = repo
            .list(
                "env_a",
                &UserQuery {
                    tag: Some("b".into()),
                    test_user: None,
                },
                &PageRequest::default(),
            )
            .await
            .expect("list");
        assert!(tagged.is_empty(), "its tags went with it");
    }

    async fn users_list_by_tag_and_test_flag_in_id_order(url: &str) {
        let (db, _) = seeded(url).await;
        let repo = DieselEndUserRepository::new(db);
        let mut batch = Vec::new();
        for i in 0..30 {
            let tags: &[&str] = if i % 3 == 0 { &["vip"] } else { &[] };
            batch.push(user("env_a", &format!("u{i:02}"), i % 2 == 0, tags, 1));
        }
        batch.push(user("env_b", "u99", true, &["vip"], 1));
        repo.upsert(batch).await.expect("batch");
        let ids = |users: Vec<EndUser>| users.into_iter().map(|u| u.id).collect::<Vec<_>>();
        let vip = UserQuery {
            tag: Some("vip".into()),
            test_user: None,
        };
        let page = PageRequest {
            limit: 4,
            after: None,
        };
        assert_eq!(
            ids(repo.list("env_a", &vip, &page).await.expect("vip")),
            ["u00", "u03", "u06", "u09", "u12"]
        );
        let next = PageRequest {
            limit: 4,
            after: Some("u09".into()),
        };
        assert_eq!(
            ids(repo.list("env_a", &vip, &next).await.expect("vip 2")),
            ["u12", "u15", "u18", "u21", "u24"]
        );
        let test_vip = UserQuery {
            tag: Some("vip".into()),
            test_user: Some(true),
        };
        assert_eq!(
            ids(repo
                .list("env_a", &test_vip, &PageRequest::default())
                .await
                .expect("test vip")),
            ["u00", "u06", "u12", "u18", "u24"]
        );
        let all = repo
            .list(
                "env_a",
                &UserQuery::default(),
                &PageRequest {
                    limit: 500,
                    after: None,
                },
            )
            .await
            .expect("all");
        assert_eq!(all.len(), 30);
        assert_eq!(all[3].tags, ["vip"], "tags come with the page");

        // The ids-only read answers what the full read answers, for every kind of query.
        let tests = UserQuery {
            tag: None,
            test_user: Some(true),
        };
        for query in [&vip, &test_vip, &tests, &UserQuery::default()] {
            for page in [&page, &next, &PageRequest::default()] {
                assert_eq!(
                    repo.ids("env_a", query, page).await.expect("ids"),
                    ids(repo.list("env_a", query, page).await.expect("list")),
                    "{query:?} {page:?}"
                );
            }
        }
        assert_eq!(
            repo.ids("env_b", &vip, &PageRequest::default())
                .await
                .expect("other environment"),
            ["u99"]
        );
    }

    async fn segments_round_trip_with_their_filter(url: &str) {
        let (db, _) = seeded(url).await;
        let repo = DieselSegmentRepository::new(db);
        let source = json!({"match": "any", "conditions": [{"field": "attributes.country",
            "op": "in", "value": ["NZ", "AU"]}]});
        let segment = Segment {
            id: "seg_1".into(),
            environment_id: "env_a".into(),
            name: "ANZ".into(),
            filter: Filter::parse(&source, "filter").expect("filter"),
            created: t(1),
            updated: t(1),
        };
        repo.insert(&segment).await.expect("insert");
        assert_eq!(
            repo.get("env_a", "seg_1").await.expect("get"),
            Some(segment.clone())
        );
        assert_eq!(repo.get("env_b", "seg_1").await.expect("get"), None);
        let renamed = Segment {
            name: "Oceania".into(),
            updated: t(2),
            ..segment.clone()
        };
        assert!(repo.update(&renamed).await.expect("update"));
        assert_eq!(repo.list("env_a").await.expect("list"), vec![renamed]);
        assert!(!repo
            .update(&Segment {
                environment_id: "env_b".into(),
                ..segment
            })
            .await
            .expect("other env"));
        assert!(repo.delete("env_a", "seg_1").await.expect("delete"));
        assert!(repo.list("env_a").await.expect("list").is_empty());
    }

    async fn the_default_stream_appears_once_even_when_racing(url: &str) {
        let (db, _) = seeded(url).await;
        let repo = std::sync::Arc::new(DieselStreamRepository::new(db));
        let mut tasks = Vec::new();
        for i in 0..6 {
            let repo = repo.clone();
            tasks.push(tokio::spawn(async move {
                repo.list("env_a", default_stream("env_a", &format!("str_{i}")))
                    .await
            }));
        }
        for task in tasks {
            let streams = task.await.expect("join").expect("list");
            assert_eq!(streams.len(), 1);
            assert!(streams[0].is_default);
        }
        let custom = Stream {
            id: "str_c".into(),
            environment_id: "env_a".into(),
            name: "Promotions".into(),
            is_default: false,
            created: t(2),
        };
        repo.insert(&custom).await.expect("custom");
        assert!(
            repo.insert(&Stream {
                id: "str_d".into(),
                ..custom.clone()
            })
            .await
            .is_err(),
            "names are unique"
        );
        let listed = repo
            .list("env_a", default_stream("env_a", "str_new"))
            .await
            .expect("list");
        assert_eq!(
            listed.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
            ["All cards", "Promotions"]
        );
        let default_id = listed[0].id.clone();
        assert!(
            !repo.delete("env_a", &default_id).await.expect("default"),
            "the default is never deleted"
        );
        assert!(repo.delete("env_a", "str_c").await.expect("custom"));
        assert_eq!(
            repo.get("env_a", &default_id)
                .await
                .expect("get")
                .map(|s| s.is_default),
            Some(true)
        );
    }

    both_backends!(
        users_upsert_replace_and_delete_with_their_tags,
        users_list_by_tag_and_test_flag_in_id_order,
        segments_round_trip_with_their_filter,
        the_default_stream_appears_once_even_when_racing,
    );
}

// ---- Invocations and cards ----

mod engine {
    use super::Record;

    use adapters_diesel::DieselCancelRepository;
    use adapters_diesel::{
        both_backends, DieselCardRepository, DieselFlowRepository, DieselInvocationRepository,
    };
    use domain::cancel::{CancelFilter, CancelRepository, CancelTask};
    use domain::card::{card_event, CardInstance, CardRepository, CardStatus, Transition};
    use domain::trigger::Mode;
    use domain::trigger::{
        BatchResult, Invocation, InvocationRepository, InvocationStatus, SaveTurn,
    };
    use domain::{Flow, FlowRepository};
    use serde_json::{json, Map};

    use super::{seeded, t};

    pub(super) async fn with_flow(url: &str) -> adapters_diesel::Database {
        let (db, _) = seeded(url).await;
        let flow = Flow {
            id: "flw_1".into(),
            environment_id: "env_a".into(),
            organisation_id: "org_1".into(),
            name: "F".into(),
            description: String::new(),
            folder_id: None,
            archived: false,
            latest_version: 1,
            published_version: Some(1),
            draft_version: None,
            variables: Map::new(),
            revision: 0,
            created: t(1),
            updated: t(1),
        };
        DieselFlowRepository::new(db.clone())
            .insert(&flow, None)
            .await
            .expect("flow");
        db
    }

    /// The flow of [`with_flow`] with one live invocation of it, `inv_1`, recorded; its
    /// invocations and cards.
    pub(super) async fn with_invocation(
        url: &str,
    ) -> (DieselInvocationRepository, DieselCardRepository) {
        let db = with_flow(url).await;
        let repo = DieselInvocationRepository::new(db.clone());
        repo.record(vec![invocation("inv_1", Mode::Live, "fp", false)])
            .await
            .expect("record");
        (repo, DieselCardRepository::new(db))
    }

    pub(super) fn invocation(id: &str, mode: Mode, fingerprint: &str, bulk: bool) -> Invocation {
        Invocation {
            environment_id: "env_a".into(),
            id: id.into(),
            flow_id: "flw_1".into(),
            mode,
            flow_version: 1,
            fingerprint: fingerprint.into(),
            target: json!({"type": "user", "targetUserIds": ["u1"]}).into(),
            payload: json!({}).into(),
            strict_variables: false,
            bulk,
            status: InvocationStatus::Pending,
            users_targeted: 0,
            cards_created: 0,
            errors: Vec::new(),
            cursor: None,
            created: t(2),
            updated: t(2),
        }
    }

    pub(super) fn card(
        id: &str,
        instance: &str,
        user: &str,
        priority: u8,
        at: i64,
    ) -> CardInstance {
        CardInstance {
            id: id.into(),
            environment_id: "env_a".into(),
            user_id: user.into(),
            flow_instance_id: instance.into(),
            invocation_id: "inv_1".into(),
            flow_id: "flw_1".into(),
            flow_version: 1,
            step_id: format!("step-{id}"),
            template_id: "t1".into(),
            template_name: "T".into(),
            status: CardStatus::Active,
            priority,
            stream_ids: vec!["str_all".into()],
            platforms: vec!["Web".into()],
            content: Map::new().into(),
            context: json!({"variables": {}}).into(),
            embargo_until: None,
            expires_at: None,
            snoozed_until: None,
            published_at: Some(t(at)),
            created: t(at),
            updated: t(at),
        }
    }

    pub(super) fn batch(
        from: Option<&str>,
        to: Option<&str>,
        cards: Vec<CardInstance>,
    ) -> BatchResult {
        let cards: Vec<std::sync::Arc<CardInstance>> = cards.into_iter().map(Into::into).collect();
        let instances: std::collections::HashSet<&str> =
            cards.iter().map(|c| c.flow_instance_id.as_str()).collect();
        BatchResult {
            environment_id: "env_a".into(),
            invocation_id: "inv_1".into(),
            from_cursor: from.map(Into::into),
            cursor: to.map(Into::into),
            status: if to.is_some() {
                InvocationStatus::Running
            } else {
                InvocationStatus::Completed
            },
            users_targeted: instances.len() as u64,
            cards_created: cards.len() as u64,
            errors: Vec::new(),
            events: cards
                .iter()
                .map(|c| card_event(c.clone(), None, None, t(3)))
                .collect(),
            cards,
            instances: Vec::new(),
            updated: t(3),
            lease_until: None,
        }
    }

    async fn record_is_idempotent_and_all_or_nothing(url: &str) {
        let repo = DieselInvocationRepository::new(with_flow(url).await);
        let first = repo
            .record(vec![invocation("inv_1", Mode::Live, "fp1", false)])
            .await
            .expect("record");
        assert_eq!(first, vec![None], "new ids are inserted");
        let replay = repo
            .record(vec![invocation("inv_1", Mode::Live, "fp1", false)])
            .await
            .expect("replay");
        assert_eq!(
            replay[0].as_ref().map(|i| i.fingerprint.as_str()),
            Some("fp1")
        );
        // One element conflicting: the new one beside it is not inserted either.
        let mixed = repo
            .record(vec![
                invocation("inv_2", Mode::Live, "fp2", false),
                invocation("inv_1", Mode::Test, "fp1", false),
            ])
            .await
            .expect("mixed");
        assert_eq!(mixed[1].as_ref().map(|i| i.mode), Some(Mode::Live));
        assert_eq!(repo.get("env_a", "inv_2").await.expect("get"), None);
        assert_eq!(
            repo.get("env_b", "inv_1").await.expect("get"),
            None,
            "ids are per environment"
        );
    }

    async fn racing_records_of_one_id_insert_it_once(url: &str) {
        let repo = std::sync::Arc::new(DieselInvocationRepository::new(with_flow(url).await));
        let mut tasks = Vec::new();
        for _ in 0..10 {
            let repo = repo.clone();
            tasks.push(tokio::spawn(async move {
                repo.record(vec![invocation("inv_r", Mode::Live, "fp", true)])
                    .await
            }));
        }
        let mut inserted = 0;
        for task in tasks {
            if task.await.expect("join").expect("record")[0].is_none() {
                inserted += 1;
            }
        }
        assert_eq!(inserted, 1);
        assert_eq!(repo.running_bulk("env_a").await.expect("count"), 1);
    }

    /// Contract §10: a bulk invocation (segment, tag or filter target) holds a slot while
    /// pending or running, never once it ended; invocations that name their users hold none.
    async fn only_pending_and_running_bulk_invocations_hold_slots(url: &str) {
        let db = with_flow(url).await;
        let repo = DieselInvocationRepository::new(db);
        let mut all = Vec::new();
        for (id, status, bulk) in [
            ("inv_p", InvocationStatus::Pending, true),
            ("inv_r", InvocationStatus::Running, true),
            ("inv_c", InvocationStatus::Completed, true),
            ("inv_f", InvocationStatus::Failed, true),
            ("inv_x", InvocationStatus::Cancelled, true),
            ("inv_n", InvocationStatus::Pending, false),
        ] {
            let mut i = invocation(id, Mode::Live, id, bulk);
            i.status = status;
            all.push(i);
        }
        repo.record(all).await.expect("record");
        assert_eq!(repo.running_bulk("env_a").await.expect("slots"), 2);
        assert_eq!(repo.running_bulk("env_b").await.expect("slots"), 0);
        adapters_diesel::testing::raw_execute(
            url,
            "UPDATE invocations SET status = 'completed' WHERE id = 'inv_r'",
        );
        assert_eq!(repo.running_bulk("env_a").await.expect("slots"), 1);
    }

    /// Concurrent calls are written together (group commit); each is still decided alone, in
    /// order: per id exactly one call inserts and the others find its row, and a call that
    /// clashes inserts none of its ids while the calls beside it go ahead.
    async fn records_written_together_are_each_decided_alone(url: &str) {
        let repo = std::sync::Arc::new(DieselInvocationRepository::new(with_flow(url).await));
        repo.record(vec![invocation("inv_a", Mode::Live, "fp", false)])
            .await
            .expect("first");
        let mut tasks = Vec::new();
        for n in 0..30 {
            let repo = repo.clone();
            let id = ["inv_b", "inv_c", "inv_d"][n % 3];
            let fingerprint = if n % 2 == 0 { "even" } else { "odd" };
            tasks.push(tokio::spawn(async move {
                let asked = vec![invocation(id, Mode::Live, fingerprint, false)];
                (id, fingerprint, repo.record(asked).await.expect("record"))
            }));
        }
        let clashing = {
            let repo = repo.clone();
            tokio::spawn(async move {
                repo.record(vec![
                    invocation("inv_x", Mode::Live, "fp", false),
                    invocation("inv_a", Mode::Live, "other", false),
                ])
                .await
                .expect("record")
            })
        };
        let mut winners = std::collections::HashMap::new();
        let mut found = Vec::new();
        for task in tasks {
            let (id, fingerprint, answer) = task.await.expect("join");
            match &answer[0] {
                None => assert!(
                    winners.insert(id, fingerprint).is_none(),
                    "{id} inserted twice"
                ),
                Some(stored) => found.push((id, stored.fingerprint.clone())),
            }
        }
        assert_eq!(winners.len(), 3, "each id inserted once");
        for (id, fingerprint) in found {
            assert_eq!(
                winners[id], fingerprint,
                "{id}: the others find the winner's row"
            );
        }
        let clash = clashing.await.expect("join");
        assert_eq!(
            clash[1].as_ref().map(|i| i.fingerprint.as_str()),
            Some("fp")
        );
        assert_eq!(
            repo.get("env_a", "inv_x").await.expect("get"),
            None,
            "a clashing call inserts nothing"
        );
    }

    async fn a_claim_is_exclusive_until_its_lease_runs_out(url: &str) {
        let repo = DieselInvocationRepository::new(with_flow(url).await);
        repo.record(vec![invocation("inv_1", Mode::Live, "fp", false)])
            .await
            .expect("record");
        let claimed = repo.claim(t(10), t(40), 10).await.expect("claim");
        assert_eq!(claimed.len(), 1);
        assert_eq!(claimed[0].status, InvocationStatus::Running);
        assert_eq!(
            repo.claim(t(20), t(50), 10).await.expect("claim"),
            [],
            "leased"
        );
        let again = repo.claim(t(41), t(71), 10).await.expect("claim");
        assert_eq!(again.len(), 1, "lease expired");
        assert_eq!(again[0].id, "inv_1");
    }

    /// A host clock this many milliseconds off the system's, as a replica's may be.
    pub(super) struct Skewed(pub(super) i64);

    impl domain::Clock for Skewed {
        fn now(&self) -> domain::Timestamp {
            chrono::Utc::now() + chrono::Duration::milliseconds(self.0)
        }
    }

    /// Two replicas' clocks over hosts five minutes ahead and behind, each measured against
    /// `db` as the service does: (ahead, behind).
    pub(super) async fn skewed_replicas(
        db: &adapters_diesel::Database,
    ) -> (
        adapters_diesel::DatabaseClock,
        adapters_diesel::DatabaseClock,
    ) {
        use adapters_diesel::clock::measure;
        use adapters_diesel::DatabaseClock;
        let ahead = DatabaseClock::over(std::sync::Arc::new(Skewed(300_000)));
        let behind = DatabaseClock::over(std::sync::Arc::new(Skewed(-300_000)));
        for clock in [&ahead, &behind] {
            let offset = measure(db, clock).await.expect("measure");
            clock.set_offset_ms(offset);
        }
        (ahead, behind)
    }

    /// Contract §19: two processes whose clocks are five minutes apart either way, each on
    /// the database's time through its measured offset, share no lease; the skew alone would
    /// have let the one ahead take the other's.
    async fn replicas_with_skewed_clocks_share_no_lease_on_the_databases_time(url: &str) {
        use domain::Clock;
        let db = with_flow(url).await;
        let repo = DieselInvocationRepository::new(db.clone());
        repo.record(vec![invocation("inv_1", Mode::Live, "fp", false)])
            .await
            .expect("record");
        let (ahead, behind) = skewed_replicas(&db).await;
        let (_, database, _) = db.clock_reading().await.expect("read");
        for clock in [&ahead, &behind] {
            let off = (clock.now() - database).num_milliseconds().abs();
            assert!(off < 1_000, "{off} ms off the database's time");
        }
        let lease = chrono::Duration::seconds(30);
        let now = behind.now();
        assert_eq!(
            repo.claim(now, now + lease, 10).await.expect("claim").len(),
            1
        );
        let now = ahead.now();
        assert!(
            repo.claim(now, now + lease, 10)
                .await
                .expect("claim")
                .is_empty(),
            "the lease is live on the database's time"
        );
        let raw = Skewed(300_000).now();
        assert_eq!(
            repo.claim(raw, raw + lease, 10).await.expect("claim").len(),
            1,
            "the host's skewed clock alone would have taken it"
        );
    }

    /// A claim takes the oldest claimable invocations whatever their status (pending, or
    /// running with a lapsed lease) and environment, and never one still leased.
    async fn claims_take_the_oldest_across_statuses_and_environments(url: &str) {
        let repo = DieselInvocationRepository::new(with_flow(url).await);
        let at = |id: &str, env: &str, created: i64| Invocation {
            environment_id: env.into(),
            created: t(created),
            ..invocation(id, Mode::Live, id, false)
        };
        // inv_old and inv_leased become running (claimed at 10, leased to 20 and 100).
        repo.record(vec![at("inv_old", "env_a", 1)])
            .await
            .expect("old");
        assert_eq!(repo.claim(t(10), t(20), 1).await.expect("claim").len(), 1);
        repo.record(vec![at("inv_leased", "env_a", 2)])
            .await
            .expect("leased");
        assert_eq!(repo.claim(t(10), t(100), 1).await.expect("claim").len(), 1);
        repo.record(vec![
            at("inv_b", "env_b", 3),
            at("inv_a", "env_a", 4),
            at("inv_b", "env_a", 5),
        ])
        .await
        .expect("pending");
        let keys = |claimed: &[Invocation]| -> Vec<(String, String)> {
            claimed
                .iter()
                .map(|i| (i.environment_id.clone(), i.id.as_str().to_owned()))
                .collect()
        };
        let pair = |env: &str, id: &str| (env.to_owned(), id.to_owned());
        let claimed = repo.claim(t(30), t(60), 3).await.expect("claim");
        assert_eq!(
            keys(&claimed),
            [
                pair("env_a", "inv_old"),
                pair("env_b", "inv_b"),
                pair("env_a", "inv_a")
            ],
            "oldest first: a lapsed running one, then pending ones of both environments"
        );
        assert!(claimed
            .iter()
            .all(|i| i.status == InvocationStatus::Running));
        let last = repo.claim(t(30), t(60), 10).await.expect("claim");
        assert_eq!(
            keys(&last),
            [pair("env_a", "inv_b")],
            "the same id in another environment is its own invocation; a leased one is skipped"
        );
    }

    async fn several_invocations_are_claimed_and_saved_together(url: &str) {
        let db = with_flow(url).await;
        let repo = DieselInvocationRepository::new(db.clone());
        let cards = DieselCardRepository::new(db);
        let mut three: Vec<_> = ["inv_1", "inv_2", "inv_3"]
            .into_iter()
            .map(|id| invocation(id, Mode::Live, id, false))
            .collect();
        for (i, inv) in three.iter_mut().enumerate() {
            inv.created = t(2 + i as i64);
        }
        repo.record(three).await.expect("record");
        let first_two = repo.claim(t(10), t(40), 2).await.expect("claim");
        let ids: Vec<&str> = first_two.iter().map(|i| i.id.as_str()).collect();
        assert_eq!(ids, ["inv_1", "inv_2"], "oldest first, at most the limit");
        let rest = repo.claim(t(10), t(40), 10).await.expect("claim");
        assert_eq!(rest.len(), 1);
        assert_eq!(rest[0].id, "inv_3");
        let of = |inv: &str, card_id: &str, user: &str| {
            let mut b = batch(
                None,
                None,
                vec![CardInstance {
                    invocation_id: inv.into(),
                    ..card(card_id, &format!("fin_{card_id}"), user, 5, 3)
                }],
            );
            b.invocation_id = inv.into();
            b
        };
        // inv_2's batch is stale (it was taken over and saved meanwhile): skipped, the others
        // saved.
        repo.save_batches(vec![of("inv_2", "crd_2", "u2")])
            .await
            .expect("taken over and saved");
        repo.save_batches(vec![
            of("inv_1", "crd_1", "u1"),
            of("inv_2", "crd_x", "u2"),
            of("inv_3", "crd_3", "u3"),
        ])
        .await
        .expect("saved together");
        for (inv, card, user) in [
            ("inv_1", "crd_1", "u1"),
            ("inv_2", "crd_2", "u2"),
            ("inv_3", "crd_3", "u3"),
        ] {
            let done = repo.get("env_a", inv).await.expect("get").expect("exists");
            assert_eq!(
                (done.status, done.cards_created),
                (InvocationStatus::Completed, 1),
                "{inv}"
            );
            assert!(
                cards.get("env_a", user, card).await.expect("get").is_some(),
                "{card}"
            );
        }
        assert_eq!(cards.get("env_a", "u2", "crd_x").await.expect("get"), None);
        assert_eq!(repo.claim(t(50), t(80), 10).await.expect("claim"), []);
    }

    /// On SQLite the invocations of a recording are inserted in runs that share all but their
    /// ids, fingerprints, targets, payloads and times (see `packed`), first as if all were new
    /// under a savepoint: every field must come back as asked, times must order with those
    /// bound by diesel, and a call refused for one stored id must insert none of the others.
    async fn recorded_invocations_written_in_runs_come_back_as_asked(url: &str) {
        let repo = DieselInvocationRepository::new(with_flow(url).await);
        let asked: Vec<Invocation> = (0..8)
            .map(|i| Invocation {
                target: json!({"type": "user", "targetUserIds": [format!("u\"{i}\\é")]}).into(),
                payload: json!({"variables": {"name": format!("N\u{1}{i}")}}).into(),
                strict_variables: true,
                created: t(10 + i),
                updated: t(20 + i),
                ..invocation(
                    &format!("inv_\"{i}"),
                    Mode::Test,
                    &format!("fp{i}"),
                    i % 2 == 0,
                )
            })
            .collect();
        // Two runs of four (bulk differs), none short enough to be left to diesel.
        let mut sorted = asked.clone();
        sorted.sort_by_key(|i| i.bulk);
        let stored = repo.record(sorted).await.expect("record");
        assert_eq!(stored, vec![None; 8]);
        for inv in &asked {
            let back = repo.get("env_a", &inv.id).await.expect("get");
            assert_eq!(back.as_ref(), Some(inv), "{}", inv.id);
        }
        // An older invocation bound by diesel is claimed first; then the packed ones by time.
        let older = Invocation {
            created: t(5),
            ..invocation("inv_older", Mode::Live, "fp", false)
        };
        repo.record(vec![older]).await.expect("record");
        let claimed = repo.claim(t(30), t(60), 3).await.expect("claim");
        let ids: Vec<&str> = claimed.iter().map(|i| i.id.as_str()).collect();
        assert_eq!(ids, ["inv_older", "inv_\"0", "inv_\"1"]);
        // Five new ids and one stored with another fingerprint: the call is refused whole.
        let mut refused: Vec<Invocation> = (0..5)
            .map(|i| invocation(&format!("inv_new{i}"), Mode::Test, "fp", false))
            .collect();
        refused.push(invocation("inv_\"3", Mode::Test, "other", false));
        let stored = repo.record(refused).await.expect("record");
        assert!(stored[..5].iter().all(Option::is_none));
        assert!(stored[5].is_some());
        for i in 0..5 {
            let id = format!("inv_new{i}");
            assert_eq!(repo.get("env_a", &id).await.expect("get"), None, "{id}");
        }
    }

    /// On SQLite rows are inserted in runs that share all but their ids (see `packed`): every
    /// column of every row must come back as written, whatever the runs.
    async fn a_save_stores_every_column_of_rows_written_in_runs(url: &str) {
        let (repo, cards) = with_invocation(url).await;
        repo.claim(t(10), t(40), 1).await.expect("claim");
        // Four cards sharing all but their ids, with user ids JSON must escape (a run packed on
        // SQLite); a card with other content, times and status, and one like the first again
        // (runs too short to pack).
        let first = card("crd_a", "fin_a", "u\"1", 5, 3);
        let second = CardInstance {
            id: "crd_b".into(),
            flow_instance_id: "fin_b".into(),
            user_id: "ü\\2 ' \n".into(),
            ..first.clone()
        };
        let other = CardInstance {
            id: "crd_c".into(),
            flow_instance_id: "fin_c".into(),
            user_id: "u3".into(),
            status: CardStatus::Embargoed,
            priority: 9,
            stream_ids: vec!["str_all".into(), "str_x".into()],
            platforms: vec!["iOS".into(), "Android".into()],
            content: json!({"Web": {"title": "Hi \"there\""}})
                .as_object()
                .cloned()
                .unwrap_or_default()
                .into(),
            context: json!({"variables": {"name": "Zoë"}, "metadata": {"k": [1, 2]}}).into(),
            embargo_until: Some(t(100)),
            expires_at: Some(t(200)),
            published_at: None,
            ..first.clone()
        };
        let fourth = CardInstance {
            id: "crd_d".into(),
            flow_instance_id: "fin_d".into(),
            user_id: "u4".into(),
            ..first.clone()
        };
        let like_first = |id: &str| CardInstance {
            id: format!("crd_{id}").into(),
            flow_instance_id: format!("fin_{id}"),
            user_id: format!("u{id}"),
            ..first.clone()
        };
        // Cards and instances of several invocations pack together too.
        let of_another = CardInstance {
            invocation_id: "inv_9".into(),
            ..like_first("f")
        };
        // Cards of the first's frame, each with its own content and context (a CSV task's rows):
        // a run packed with its content on SQLite.
        let own_content = |id: &str| CardInstance {
            content: json!({"Web": {"title": format!("Hello \"{id}\" ü\\ \u{0}"), "n": id.len()}})
                .as_object()
                .cloned()
                .unwrap_or_default()
                .into(),
            context: json!({"variables": {"firstName": id}}).into(),
            ..like_first(id)
        };
        let written = vec![
            first.clone(),
            second,
            like_first("e"),
            of_another,
            own_content("g"),
            own_content("h"),
            own_content("i"),
            own_content("j"),
            other,
            fourth,
        ];
        let saved = batch(None, None, written.clone());
        let events = saved.events.clone();
        repo.save_batches(vec![saved]).await.expect("save");
        for c in &written {
            let stored = cards.get("env_a", &c.user_id, &c.id).await.expect("get");
            assert_eq!(stored.as_ref(), Some(c), "{}", c.id);
            let expected: Vec<_> = events
                .iter()
                .filter(|e| e.card.id == c.id)
                .cloned()
                .collect();
            assert_eq!(
                cards.events_of("env_a", &c.id).await.expect("events"),
                expected
            );
        }
        // Each card's flow instance is stored on it, active.
        let instances = adapters_diesel::testing::raw_texts(
            url,
            "SELECT flow_instance_id || '|' || user_id || '|' || environment_id || '|' \
             || invocation_id || '|' || flow_id || '|' || instance_status AS v \
             FROM card_instances ORDER BY id",
        );
        assert_eq!(
            instances,
            [
                "fin_a|u\"1|env_a|inv_1|flw_1|active",
                "fin_b|ü\\2 ' \n|env_a|inv_1|flw_1|active",
                "fin_c|u3|env_a|inv_1|flw_1|active",
                "fin_d|u4|env_a|inv_1|flw_1|active",
                "fin_e|ue|env_a|inv_1|flw_1|active",
                "fin_f|uf|env_a|inv_9|flw_1|active",
                "fin_g|ug|env_a|inv_1|flw_1|active",
                "fin_h|uh|env_a|inv_1|flw_1|active",
                "fin_i|ui|env_a|inv_1|flw_1|active",
                "fin_j|uj|env_a|inv_1|flw_1|active",
            ]
        );
    }

    async fn batches_apply_from_their_cursor_only(url: &str) {
        let (repo, cards) = with_invocation(url).await;
        repo.save_batches(vec![batch(
            None,
            Some("u1"),
            vec![card("crd_1", "fin_1", "u1", 5, 3)],
        )])
        .await
        .expect("first");
        let next = repo
            .claim(t(11), t(41), 10)
            .await
            .expect("claim")
            .pop()
            .expect("claimable at once");
        assert_eq!(
            (next.status, next.cursor.as_deref()),
            (InvocationStatus::Running, Some("u1")),
            "a saved batch releases its claim"
        );
        // An overtaken worker saving the same batch again changes nothing.
        repo.save_batches(vec![batch(
            None,
            Some("u1"),
            vec![card("crd_x", "fin_x", "u1", 5, 3)],
        )])
        .await
        .expect("stale is ignored");
        // A batch saved by a worker that goes on with the next one keeps the claim until the
        // time it gives.
        let mut kept = batch(
            Some("u1"),
            Some("um"),
            vec![card("crd_m", "fin_m", "um", 5, 3)],
        );
        kept.lease_until = Some(t(60));
        repo.save_batches(vec![kept]).await.expect("kept");
        assert_eq!(repo.claim(t(50), t(80), 10).await.expect("claim"), []);
        let resumed = repo.claim(t(61), t(91), 10).await.expect("claim");
        assert_eq!(
            resumed
                .iter()
                .map(|i| i.cursor.as_deref())
                .collect::<Vec<_>>(),
            [Some("um")],
            "claimable once that time has passed"
        );
        repo.save_batches(vec![batch(
            Some("um"),
            None,
            vec![card("crd_2", "fin_2", "u2", 5, 3)],
        )])
        .await
        .expect("second");
        let done = repo
            .get("env_a", "inv_1")
            .await
            .expect("get")
            .expect("exists");
        assert_eq!(
            (done.status, done.users_targeted, done.cards_created),
            (InvocationStatus::Completed, 3, 3)
        );
        assert_eq!(cards.get("env_a", "u1", "crd_x").await.expect("get"), None);
        assert_eq!(
            cards
                .events_of("env_a", "crd_1")
                .await
                .expect("events")
                .len(),
            1
        );
        assert_eq!(
            repo.claim(t(100), t(130), 10).await.expect("claim"),
            [],
            "a completed invocation is never claimed"
        );
    }

    async fn followed_batches_are_saved_after_the_one_before_and_fenced(url: &str) {
        let db = with_flow(url).await;
        let repo = std::sync::Arc::new(DieselInvocationRepository::new(db.clone()));
        let cards = DieselCardRepository::new(db.clone());
        let postgres = !url.starts_with("sqlite");
        repo.record(vec![invocation("inv_1", Mode::Live, "fp", false)])
            .await
            .expect("record");
        let followed = |from: &str, to: &str, id: &str, user: &str| {
            let mut b = batch(
                Some(from),
                Some(to),
                vec![card(id, &format!("fin_{id}"), user, 5, 3)],
            );
            b.lease_until = Some(t(60));
            b
        };
        let saved = |id: &'static str, user: &'static str| {
            let cards = &cards;
            async move { cards.get("env_a", user, id).await.expect("get").is_some() }
        };
        let at = || {
            let repo = &repo;
            async move {
                let at = repo
                    .get("env_a", "inv_1")
                    .await
                    .expect("get")
                    .expect("exists");
                (at.cursor, at.cards_created)
            }
        };
        let first = vec![card("crd_1", "fin_1", "u1", 5, 3)];
        let first = repo.save_batches(vec![batch(None, Some("u1"), first)]);
        assert_eq!(first.await.expect("first"), 0);
        // A followed batch's save, under way and waiting for the turn returned with it.
        let spawn_after = |batch: BatchResult| {
            let (turn, repo) = (SaveTurn::default(), repo.clone());
            let after = turn.clone();
            let save = tokio::spawn(async move { repo.save_after(batch, after).await });
            (turn, save)
        };
        // The second writes its progress once the first's turn has ended, as the engine ends
        // it. On PostgreSQL both are under way at once; SQLite takes one writer at a time (its
        // engine has one save under way at most).
        let (ended, first) = spawn_after(followed("u1", "u2", "crd_2", "u2"));
        ended.end();
        let first = if postgres {
            Some(first)
        } else {
            assert_eq!(first.await.expect("join").expect("first"), 0);
            None
        };
        let (turn, second) = spawn_after(followed("u2", "u3", "crd_3", "u3"));
        if let Some(first) = first {
            assert_eq!(first.await.expect("join").expect("first"), 0);
        }
        turn.end();
        assert_eq!(second.await.expect("join").expect("second"), 0);
        assert_eq!(at().await, (Some("u3".into()), 3));
        assert!(saved("crd_2", "u2").await && saved("crd_3", "u3").await);
        // A batch whose batch before was not saved: nothing of it is written.
        assert_eq!(
            repo.save_after(followed("u5", "u6", "crd_6", "u6"), SaveTurn::ended())
                .await
                .expect("stale"),
            1
        );
        assert!(!saved("crd_6", "u6").await);
        let taken = repo.save_after(followed("u3", "u4", "crd_4", "u4"), SaveTurn::ended());
        assert_eq!(taken.await.expect("saved"), 0);
        // The same invocation, user and step as a card already saved: the unique card key
        // refuses it. The invocation moved on from where this batch starts (another worker
        // saved these users): stale. Still where it starts: an error, not hidden as stale.
        let same_step = |from: &str, to: &str, id: &str| {
            let mut b = followed(from, to, id, "u4");
            let card = CardInstance {
                step_id: "step-crd_4".into(),
                ..b.cards[0].as_ref().clone()
            };
            b.events = vec![card_event(card.clone().into(), None, None, t(3))];
            b.cards = vec![card.into()];
            b
        };
        let late = repo.save_after(same_step("u3", "u4", "crd_4b"), SaveTurn::ended());
        assert_eq!(late.await.expect("refused as stale"), 1);
        let wrong = repo.save_after(same_step("u4", "u5", "crd_4c"), SaveTurn::ended());
        assert!(
            matches!(wrong.await, Err(domain::StorageError::UniqueViolation(_))),
            "a refused card where the invocation is"
        );
        assert!(!saved("crd_4b", "u4").await && !saved("crd_4c", "u4").await);
        assert_eq!(at().await, (Some("u4".into()), 4));
        // A cancel of the flow recorded before a batch's save covers some of it: the batch is
        // written after the cancel, without what it covers. (On PostgreSQL, below, a cancel
        // recorded while a batch waits for its turn.)
        let cancel = |id: &str, user: &str| {
            let filter = CancelFilter {
                end_user_id: Some(user.into()),
                cancel_cards: true,
                ..Default::default()
            };
            CancelTask::new(id.into(), "env_a", "flw_1", filter, t(4))
        };
        let cancels = DieselCancelRepository::new(db.clone());
        let of_u5 = cancel("00000000-0000-4000-8000-000000000055", "u5");
        cancels.create(&of_u5).await.expect("cancel");
        let covered = repo.save_after(followed("u4", "u5", "crd_5", "u5"), SaveTurn::ended());
        assert_eq!(covered.await.expect("saved"), 0);
        assert!(
            !saved("crd_5", "u5").await,
            "the cancel applies to the batch"
        );
        assert_eq!(at().await, (Some("u5".into()), 4));
        if !postgres {
            return;
        }
        // PostgreSQL: the next batch's writes go on while the save before it has not begun,
        // and its progress waits for that one's turn.
        let (turn, next) = spawn_after(followed("u6", "u7", "crd_7", "u7"));
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        assert!(
            !next.is_finished(),
            "waiting for the turn of the save before"
        );
        let before = repo.save_after(followed("u5", "u6", "crd_6", "u6"), SaveTurn::ended());
        assert_eq!(before.await.expect("before"), 0);
        turn.end();
        assert_eq!(next.await.expect("join").expect("next"), 0);
        assert_eq!(at().await, (Some("u7".into()), 6));
        // A cancel recorded while a batch waits for its turn is not held by it (the flow's
        // lock is taken after the wait), and applies to that batch.
        let (turn, next) = spawn_after(followed("u7", "u8", "crd_8", "u8"));
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        let of_u8 = cancel("00000000-0000-4000-8000-000000000088", "u8");
        tokio::time::timeout(std::time::Duration::from_secs(2), cancels.create(&of_u8))
            .await
            .expect("recorded while the batch waits")
            .expect("cancel");
        assert!(!next.is_finished());
        turn.end();
        assert_eq!(next.await.expect("join").expect("next"), 0);
        assert!(
            !saved("crd_8", "u8").await,
            "the cancel applies to the batch"
        );
        assert_eq!(at().await, (Some("u8".into()), 6));
        // Cancels of the flow that cover none of a batch leave it whole.
        let uncovered = repo.save_after(followed("u8", "u9", "crd_9", "u9"), SaveTurn::ended());
        assert_eq!(uncovered.await.expect("saved"), 0);
        assert!(saved("crd_9", "u9").await);
        assert_eq!(at().await, (Some("u9".into()), 7));
    }

    /// The scheduler's read: embargoes and snoozes that ended and expiries that came, of open
    /// cards only, each card once, at most `limit`.
    async fn due_cards_are_those_whose_time_came_each_once(url: &str) {
        let (repo, cards) = with_invocation(url).await;
        // (card, status, embargo until, snoozed until, expires at), in seconds.
        let all = [
            ("crd_e1", CardStatus::Embargoed, Some(50), None, None),
            ("crd_e2", CardStatus::Embargoed, Some(70), None, None),
            ("crd_s1", CardStatus::Snoozed, None, Some(60), None),
            ("crd_s2", CardStatus::Snoozed, None, Some(61), None),
            ("crd_x1", CardStatus::Active, None, None, Some(10)),
            ("crd_x2", CardStatus::Active, None, None, Some(90)),
            ("crd_x3", CardStatus::Snoozed, None, Some(99), Some(20)),
            // An embargo and an expiry both past: due once.
            ("crd_x4", CardStatus::Embargoed, Some(30), None, Some(40)),
            // Expired while still embargoed.
            ("crd_x5", CardStatus::Embargoed, Some(90), None, Some(40)),
            // Closed cards are never due.
            ("crd_c1", CardStatus::Completed, None, None, Some(10)),
            ("crd_c2", CardStatus::Dismissed, None, Some(10), None),
            ("crd_c3", CardStatus::Cancelled, Some(10), None, None),
        ]
        .map(|(id, status, embargo, snooze, expiry)| {
            let mut c = card(id, &format!("fin_{id}"), &format!("u_{id}"), 5, 1);
            c.status = status;
            c.embargo_until = embargo.map(t);
            c.snoozed_until = snooze.map(t);
            c.expires_at = expiry.map(t);
            c
        })
        .to_vec();
        repo.save_batches(vec![batch(None, None, all)])
            .await
            .expect("batch");
        let mut due: Vec<String> = cards
            .due(t(60), 100)
            .await
            .expect("due")
            .into_iter()
            .map(|c| c.id.to_string())
            .collect();
        due.sort();
        assert_eq!(
            due,
            ["crd_e1", "crd_s1", "crd_x1", "crd_x3", "crd_x4", "crd_x5"]
        );
        assert_eq!(cards.due(t(60), 2).await.expect("due").len(), 2);
        assert!(cards.due(t(0), 100).await.expect("due").is_empty());
    }

    async fn feeds_order_by_priority_then_recency_and_transitions_are_compare_and_swap(url: &str) {
        let (repo, cards) = with_invocation(url).await;
        let mut snoozed = card("crd_4", "fin_1", "u1", 9, 8);
        snoozed.status = CardStatus::Snoozed;
        snoozed.snoozed_until = Some(t(50));
        let mut other_stream = card("crd_5", "fin_1", "u1", 1, 9);
        other_stream.stream_ids = vec!["str_all".into(), "str_promo".into()];
        let all = vec![
            card("crd_1", "fin_1", "u1", 5, 1),
            card("crd_2", "fin_1", "u1", 8, 2),
            card("crd_3", "fin_1", "u1", 5, 3),
            snoozed,
            other_stream,
        ];
        repo.save_batches(vec![batch(None, None, all)])
            .await
            .expect("batch");
        let ids = |cs: Vec<CardInstance>| cs.into_iter().map(|c| c.id).collect::<Vec<_>>();
        assert_eq!(
            ids(cards.feed("env_a", "u1", None).await.expect("feed")),
            ["crd_2", "crd_3", "crd_1", "crd_5"]
        );
        assert_eq!(
            ids(cards
                .feed("env_a", "u1", Some("str_promo".into()))
                .await
                .expect("stream")),
            ["crd_5"]
        );
        assert_eq!(ids(cards.due(t(60), 10).await.expect("due")), ["crd_4"]);

        let active = cards
            .get("env_a", "u1", "crd_1")
            .await
            .expect("get")
            .expect("card");
        let completed = CardInstance {
            status: CardStatus::Completed,
            ..active.clone()
        };
        let event = card_event(
            completed.into(),
            Some(CardStatus::Active),
            Some(json!({"a": 1})),
            t(70),
        );
        let t1 = Transition {
            from: CardStatus::Active,
            event: event.clone(),
        };
        assert_eq!(cards.transition(vec![t1.clone()]).await.expect("first"), 1);
        let mut again = t1;
        again.event.id = "evt_other".into();
        assert_eq!(
            cards.transition(vec![again]).await.expect("stale"),
            0,
            "the card is no longer active"
        );
        let events = cards.events_of("env_a", "crd_1").await.expect("events");
        assert_eq!(
            events.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(),
            ["card-published", "card-completed"]
        );
        // Stored as its change, read back whole: the card as the event left it.
        assert_eq!(events[1], event);
        assert_eq!(events[1].data()["properties"]["values"], json!({"a": 1}));
        assert_eq!(events[0].card.status, CardStatus::Active);
        assert_eq!(
            events[0].data()["cardContext"]["previousStatus"],
            serde_json::Value::Null
        );
        assert!(matches!(cards.transition(vec![]).await, Ok(0)));
    }

    both_backends!(
        record_is_idempotent_and_all_or_nothing,
        racing_records_of_one_id_insert_it_once,
        only_pending_and_running_bulk_invocations_hold_slots,
        records_written_together_are_each_decided_alone,
        a_claim_is_exclusive_until_its_lease_runs_out,
        replicas_with_skewed_clocks_share_no_lease_on_the_databases_time,
        claims_take_the_oldest_across_statuses_and_environments,
        several_invocations_are_claimed_and_saved_together,
        a_save_stores_every_column_of_rows_written_in_runs,
        recorded_invocations_written_in_runs_come_back_as_asked,
        batches_apply_from_their_cursor_only,
        followed_batches_are_saved_after_the_one_before_and_fenced,
        feeds_order_by_priority_then_recency_and_transitions_are_compare_and_swap,
        due_cards_are_those_whose_time_came_each_once,
    );
}

mod webhooks {
    use super::Record;
    use std::sync::Arc;

    use adapters_diesel::testing::raw_texts;
    use adapters_diesel::{
        both_backends, DieselInvocationRepository, DieselWebhookRepository, SecretBox,
    };
    use chrono::Duration;
    use domain::trigger::InvocationRepository;
    use domain::webhook::{
        AttemptOutcome, AttemptRecord, HttpMethod, NextStep, Subscription, SubscriptionChange,
        WebhookRepository,
    };
    use domain::PageRequest;

    use domain::trigger::Mode;

    use super::engine::{batch, card, invocation, with_flow};
    use super::t;

    pub(super) fn subscription(id: &str, types: &[&str], flow: Option<&str>) -> Subscription {
        Subscription {
            id: id.into(),
            environment_id: "env_a".into(),
            url: "https://example.com/hook".into(),
            method: HttpMethod::Post,
            headers: [("X-Token".to_owned(), "abc".to_owned())].into(),
            types: types.iter().map(|t| (*t).to_owned()).collect(),
            card_template_id: None,
            flow_id: flow.map(Into::into),
            description: Some(format!("Subscription {id}\nsecond line")),
            secret: format!("whsec_secret-of-{id}"),
            previous_secret: None,
            previous_secret_until: None,
            enabled: true,
            disabled_reason: None,
            failing_since: None,
            created: t(1),
            updated: t(1),
        }
    }

    pub(super) async fn setup(url: &str) -> (adapters_diesel::Database, DieselWebhookRepository) {
        let db = with_flow(url).await;
        let secrets = Arc::new(SecretBox::new(&SecretBox::generate_key(), &[]).expect("key"));
        let repo = DieselWebhookRepository::new(db.clone(), secrets);
        (db, repo)
    }

    /// Three published cards for u1..u3, through the engine's batch write.
    pub(super) async fn publish_three(db: &adapters_diesel::Database) {
        let cards = vec![
            card("crd_1", "fin_1", "u1", 5, 10),
            card("crd_2", "fin_2", "u2", 5, 10),
            card("crd_3", "fin_3", "u3", 5, 10),
        ];
        let repo = DieselInvocationRepository::new(db.clone());
        repo.record(vec![invocation("inv_1", Mode::Live, "fp", false)])
            .await
            .expect("invocation");
        repo.save_batches(vec![batch(None, None, cards)])
            .await
            .expect("batch");
    }

    pub(super) fn record(
        job: &domain::webhook::DeliveryJob,
        status: u16,
        next: NextStep,
    ) -> AttemptRecord {
        AttemptRecord {
            delivery_id: Some(job.delivery_id.clone()),
            subscription_id: job.subscription.id.clone().into(),
            environment_id: "env_a".into(),
            event_id: job.event_id.clone(),
            event_name: job.event_name.clone(),
            attempt: job.attempt,
            trigger: job.trigger.clone(),
            outcome: AttemptOutcome {
                status_code: Some(status),
                error: None,
                duration_ms: 4,
                response_body: "ok".into(),
                retry_after_seconds: None,
                failure: None,
            },
            next,
            subscription: None,
            at: t(20),
            lease: Some(job.lease_until),
        }
    }

    /// Contract §19: replicas whose clocks are five minutes apart share no delivery lease
    /// once each is on the database's time; the skewed host clock alone would take it.
    async fn skewed_replicas_share_no_delivery_lease(url: &str) {
        use domain::Clock;
        let (db, repo) = setup(url).await;
        repo.create(&subscription("whk_1", &["card-published"], None), 100)
            .await
            .expect("a");
        publish_three(&db).await;
        let (ahead, behind) = super::engine::skewed_replicas(&db).await;
        let lease = chrono::Duration::seconds(30);
        let now = behind.now();
        let held = repo
            .claim(now, now + lease, 10, vec![], 10)
            .await
            .expect("claim");
        assert_eq!(held.len(), 3);
        let now = ahead.now();
        assert!(
            repo.claim(now, now + lease, 10, vec![], 10)
                .await
                .expect("claim")
                .is_empty(),
            "leased on the database's time"
        );
        let raw = super::engine::Skewed(300_000).now();
        assert_eq!(
            repo.claim(raw, raw + lease, 10, vec![], 10)
                .await
                .expect("claim")
                .len(),
            3,
            "the host's skewed clock alone would have taken them"
        );
    }

    /// Contract §19: an outcome is recorded only by the claim that holds the delivery; a
    /// holder whose lease ran out (the delivery was claimed again) changes nothing.
    async fn a_stale_holders_outcome_changes_nothing(url: &str) {
        let (db, repo) = setup(url).await;
        repo.create(&subscription("whk_1", &["card-published"], None), 100)
            .await
            .expect("a");
        publish_three(&db).await;
        let first = repo
            .claim(t(30), t(40), 10, vec![], 10)
            .await
            .expect("claim");
        assert_eq!(first.len(), 3);
        // The first holder's lease runs out; another claims the same deliveries.
        let second: Vec<_> = repo
            .claim(t(41), t(60), 10, vec![], 10)
            .await
            .expect("claim again")
            .into_iter()
            .filter(|j| j.delivery_id == first[0].delivery_id)
            .collect();
        assert_eq!(second.len(), 1);
        assert_eq!(
            second[0].attempt, first[0].attempt,
            "the same attempt, another claim"
        );
        // The late first holder reports: refused, nothing logged.
        let stale = repo
            .record(vec![record(&first[0], 200, NextStep::Done)])
            .await
            .expect("record");
        assert_eq!(stale, 1);
        assert!(raw_texts(url, "SELECT id AS v FROM webhook_attempts").is_empty());
        // The holder's outcome counts, once.
        let held = repo
            .record(vec![record(&second[0], 200, NextStep::Done)])
            .await
            .expect("record");
        assert_eq!(held, 0);
        assert_eq!(
            raw_texts(url, "SELECT id AS v FROM webhook_attempts").len(),
            1
        );
        // The same outcome again (a retried save) changes nothing more.
        let again = repo
            .record(vec![record(&second[0], 200, NextStep::Done)])
            .await
            .expect("record");
        assert_eq!(again, 1);
        assert_eq!(
            raw_texts(url, "SELECT id AS v FROM webhook_attempts").len(),
            1
        );
        // A retry outcome is fenced the same way.
        let third = repo
            .claim(t(70), t(90), 10, vec![], 10)
            .await
            .expect("claim");
        assert_eq!(third.len(), 2, "the two not delivered");
        let late: Vec<_> = repo
            .claim(t(91), t(120), 10, vec![], 10)
            .await
            .expect("claim again")
            .into_iter()
            .filter(|j| j.delivery_id == third[0].delivery_id)
            .collect();
        assert_eq!(late.len(), 1, "claimed again");
        assert_eq!(
            repo.record(vec![record(&third[0], 500, NextStep::RetryAt(t(200)))])
                .await
                .expect("record"),
            1
        );
        assert_eq!(
            repo.record(vec![record(&late[0], 500, NextStep::RetryAt(t(200)))])
                .await
                .expect("record"),
            0
        );
    }

    async fn subscriptions_round_trip_with_secrets_sealed_and_a_limit(url: &str) {
        let (_db, repo) = setup(url).await;
        let mut s = subscription("whk_1", &["card-published"], None);
        s.previous_secret = Some("whsec_previous".into());
        s.previous_secret_until = Some(t(100));
        assert!(repo.create(&s, 2).await.expect("create"));
        assert!(repo
            .create(&subscription("whk_2", &["card-completed"], None), 2)
            .await
            .expect("create"));
        assert!(!repo
            .create(&subscription("whk_3", &["card-completed"], None), 2)
            .await
            .expect("limit"));
        assert_eq!(
            repo.get("env_a", "whk_1").await.expect("get"),
            Some(s.clone())
        );
        assert_eq!(repo.get("env_b", "whk_1").await.expect("other env"), None);
        assert_eq!(repo.list("env_a").await.expect("list").len(), 2);
        let stored = raw_texts(
            url,
            "SELECT secret || ' ' || previous_secret AS v FROM webhook_subscriptions WHERE id = \
                'whk_1'",
        );
        assert_eq!(stored.len(), 1);
        assert!(
            !stored[0].contains("whsec_"),
            "sealed at rest: {}",
            stored[0]
        );
        assert!(stored[0].starts_with("v1."));
    }

    /// An edit saves only what an edit may change: a secret rotated and a state changed
    /// between its read and its write are kept.
    async fn an_edit_keeps_a_secret_and_a_state_changed_meanwhile(url: &str) {
        let (_db, repo) = setup(url).await;
        let read = subscription("whk_e", &["card-published"], None);
        assert!(repo.create(&read, 10).await.expect("create"));
        let created = repo
            .get("env_a", "whk_e")
            .await
            .expect("get")
            .expect("found");
        assert_eq!(created.description, read.description, "stored as given");
        // Meanwhile: rotated and disabled.
        let mut changed = read.clone();
        changed.secret = "whsec_rotated".into();
        changed.enabled = false;
        changed.disabled_reason = Some("api".into());
        repo.update(&changed).await.expect("update");
        // The edit, made from what was read before.
        let mut edited = read.clone();
        edited.url = "https://example.com/other".into();
        edited.types = vec!["card-completed".into()];
        edited.description = None;
        edited.updated = t(9);
        repo.edit(&edited).await.expect("edit");
        let stored = repo
            .get("env_a", "whk_e")
            .await
            .expect("get")
            .expect("found");
        assert_eq!(stored.url, "https://example.com/other");
        assert_eq!(stored.types, ["card-completed"]);
        assert_eq!(stored.description, None, "an edit clears the description");
        assert_eq!(stored.secret, "whsec_rotated");
        assert!(!stored.enabled);
        assert_eq!(stored.disabled_reason.as_deref(), Some("api"));
    }

    /// Contract §16: custom header values (a receiver's credentials) are sealed at rest like
    /// the signing secret; rows written in plain text before are sealed by
    /// `seal_plain_headers`, and open the same either way.
    async fn custom_header_values_are_sealed_at_rest(url: &str) {
        let (_db, repo) = setup(url).await;
        let mut s = subscription("whk_h", &["card-published"], None);
        s.headers = [(
            "Authorization".to_owned(),
            "Bearer receiver-credential".to_owned(),
        )]
        .into();
        assert!(repo.create(&s, 10).await.expect("create"));
        let mut none = subscription("whk_none", &["card-published"], None);
        none.headers.clear();
        assert!(repo.create(&none, 10).await.expect("create"));
        let stored = raw_texts(
            url,
            "SELECT headers AS v FROM webhook_subscriptions ORDER BY id",
        );
        assert!(stored[0].starts_with("v1."), "sealed: {}", stored[0]);
        assert!(!stored[0].contains("receiver-credential"));
        assert_eq!(stored[1], "{}", "no headers: nothing to seal");
        assert_eq!(
            repo.get("env_a", "whk_h").await.expect("get"),
            Some(s.clone())
        );

        // A row of an older version, in plain text.
        adapters_diesel::testing::raw_execute(
            url,
            r#"UPDATE webhook_subscriptions
               SET headers = '{"Authorization":"Bearer receiver-credential"}' WHERE id = 'whk_h'"#,
        );
        assert_eq!(
            repo.get("env_a", "whk_h").await.expect("get"),
            Some(s.clone())
        );
        assert_eq!(repo.seal_plain_headers().await.expect("seal"), 1);
        assert_eq!(repo.seal_plain_headers().await.expect("again"), 0);
        let stored = raw_texts(
            url,
            "SELECT headers AS v FROM webhook_subscriptions WHERE id = 'whk_h'",
        );
        assert!(stored[0].starts_with("v1."), "sealed: {}", stored[0]);
        assert_eq!(repo.get("env_a", "whk_h").await.expect("get"), Some(s));
    }

    async fn events_enqueue_matching_deliveries_in_their_transaction(url: &str) {
        let (db, repo) = setup(url).await;
        repo.create(&subscription("whk_all", &["card-published"], None), 100)
            .await
            .expect("a");
        repo.create(
            &subscription("whk_flow", &["card-published"], Some("flw_1")),
            100,
        )
        .await
        .expect("b");
        repo.create(
            &subscription("whk_other_flow", &["card-published"], Some("flw_9")),
            100,
        )
        .await
        .expect("c");
        repo.create(
            &subscription("whk_completed", &["card-completed"], None),
            100,
        )
        .await
        .expect("d");
        let mut disabled = subscription("whk_disabled", &["card-published"], None);
        disabled.enabled = false;
        repo.create(&disabled, 100).await.expect("e");
        publish_three(&db).await;
        let jobs = repo
            .claim(t(30), t(90), 10, vec![], 100)
            .await
            .expect("claim");
        let mut per_sub: std::collections::BTreeMap<String, usize> = Default::default();
        for j in &jobs {
            *per_sub.entry(j.subscription.id.clone().into()).or_default() += 1;
            assert_eq!(j.attempt, 1);
            assert_eq!(j.event_name, "card-published");
            assert_eq!(j.data["analyticsEvent"], "card-published");
            assert_eq!(j.data["id"], j.event_id);
            assert_eq!(
                j.subscription.secret,
                format!("whsec_secret-of-{}", j.subscription.id)
            );
        }
        assert_eq!(
            per_sub.into_iter().collect::<Vec<_>>(),
            [("whk_all".to_owned(), 3), ("whk_flow".to_owned(), 3)]
        );
        // Leased: not claimable again until the lease runs out.
        assert!(repo
            .claim(t(31), t(91), 10, vec![], 100)
            .await
            .expect("again")
            .is_empty());
        assert_eq!(
            repo.claim(t(90), t(150), 10, vec![], 100)
                .await
                .expect("expired")
                .len(),
            6
        );
    }

    /// Whether `queued` was notified, or is within 50 ms.
    /// Whether `queued` is notified within 50 ms (a permit kept counts).
    pub(super) async fn woken(queued: &tokio::sync::Notify) -> bool {
        tokio::time::timeout(std::time::Duration::from_millis(50), queued.notified())
            .await
            .is_ok()
    }

    /// A committed transaction that queued deliveries wakes the delivery loop; the writes
    /// that queue none do not.
    async fn committed_deliveries_wake_the_delivery_loop(url: &str) {
        let (db, repo) = setup(url).await;
        let queued = db.queued(adapters_diesel::Work::Deliveries);
        repo.create(&subscription("whk_all", &["card-published"], None), 100)
            .await
            .expect("create");
        assert!(!woken(&queued).await, "a subscription queues nothing");
        publish_three(&db).await;
        assert!(woken(&queued).await, "the events queued deliveries");
        let job = repo
            .claim(t(30), t(90), 10, vec![], 100)
            .await
            .expect("claim")
            .remove(0);
        assert!(!woken(&queued).await, "a claim queues nothing");
        let event = job.event_id.to_string();
        assert!(repo
            .resend("env_a", "whk_all", &event, t(40))
            .await
            .expect("resend"));
        assert!(woken(&queued).await, "a resend queued one");
    }

    async fn claims_cap_each_subscription_and_skip_excluded_ones(url: &str) {
        let (db, repo) = setup(url).await;
        repo.create(&subscription("whk_a", &["card-published"], None), 100)
            .await
            .expect("a");
        repo.create(&subscription("whk_b", &["card-published"], None), 100)
            .await
            .expect("b");
        publish_three(&db).await;
        let jobs = repo
            .claim(t(30), t(90), 2, vec!["whk_b".into()], 100)
            .await
            .expect("claim");
        assert_eq!(jobs.len(), 2);
        assert!(jobs.iter().all(|j| j.subscription.id == "whk_a"));
        let jobs = repo
            .claim(t(30), t(90), 1, vec![], 100)
            .await
            .expect("claim");
        assert_eq!(jobs.len(), 2, "one of each");
        let jobs = repo
            .claim(t(30), t(90), 10, vec![], 1)
            .await
            .expect("claim");
        assert_eq!(jobs.len(), 1, "the overall limit");
    }

    async fn outcomes_decide_what_is_claimable_and_the_log_pages(url: &str) {
        let (db, repo) = setup(url).await;
        repo.create(&subscription("whk_1", &["card-published"], None), 100)
            .await
            .expect("a");
        publish_three(&db).await;
        let jobs = repo
            .claim(t(30), t(90), 10, vec![], 100)
            .await
            .expect("claim");
        assert_eq!(jobs.len(), 3);
        let mut first = record(&jobs[0], 204, NextStep::Done);
        first.subscription = Some(SubscriptionChange::Recovered);
        let mut second = record(&jobs[1], 500, NextStep::RetryAt(t(40)));
        second.subscription = Some(SubscriptionChange::Failing { since: t(20) });
        let third = record(&jobs[2], 500, NextStep::Failed);
        repo.record(vec![first, second, third])
            .await
            .expect("record");
        // A delivery done leaves the outbox; the attempt log keeps its record (issue 27).
        let outbox = |id: &str| {
            adapters_diesel::testing::raw_texts(
                url,
                &format!("SELECT status AS v FROM webhook_deliveries WHERE id = '{id}'"),
            )
        };
        assert!(outbox(&jobs[0].delivery_id).is_empty(), "delivered: gone");
        assert_eq!(outbox(&jobs[1].delivery_id), ["pending"]);
        assert_eq!(outbox(&jobs[2].delivery_id), ["failed"]);
        // A done delivery's attempt needs no link to it; a failed one keeps its link, so that
        // a resend makes it pending again and the pruner keeps its log meanwhile.
        let linked = |event: &str| {
            adapters_diesel::testing::raw_texts(
                url,
                &format!(
                    "SELECT COALESCE(delivery_id, 'none') AS v FROM webhook_attempts \
                     WHERE event_id = '{event}'"
                ),
            )
        };
        assert_eq!(linked(&jobs[0].event_id), ["none"]);
        assert_eq!(linked(&jobs[1].event_id), [jobs[1].delivery_id.clone()]);
        assert_eq!(linked(&jobs[2].event_id), [jobs[2].delivery_id.clone()]);
        assert!(repo
            .claim(t(39), t(99), 10, vec![], 100)
            .await
            .expect("not yet")
            .is_empty());
        let retry = repo
            .claim(t(40), t(100), 10, vec![], 100)
            .await
            .expect("retry");
        assert_eq!(retry.len(), 1);
        assert_eq!(retry[0].delivery_id, jobs[1].delivery_id);
        assert_eq!(retry[0].attempt, 2);
        assert_eq!(retry[0].subscription.failing_since, Some(t(20)));
        let page = repo
            .attempts(
                "env_a",
                "whk_1",
                PageRequest::new(Some(2), None).expect("page"),
            )
            .await
            .expect("log");
        assert_eq!(page.items.len(), 2);
        let rest = repo
            .attempts(
                "env_a",
                "whk_1",
                PageRequest::new(Some(2), page.next_after).expect("page"),
            )
            .await
            .expect("log");
        assert_eq!(rest.items.len(), 1);
        assert_eq!(rest.next_after, None);
        assert!(repo
            .attempts("env_b", "whk_1", PageRequest::default())
            .await
            .expect("other env")
            .items
            .is_empty());
        // Recover re-queues the failed one; resend re-queues a delivered one.
        assert_eq!(
            repo.recover("env_a", "whk_1", t(0), t(50))
                .await
                .expect("recover"),
            1
        );
        assert!(repo
            .resend("env_a", "whk_1", &jobs[0].event_id, t(50))
            .await
            .expect("resend"));
        assert!(!repo
            .resend("env_a", "whk_1", "evt_missing", t(50))
            .await
            .expect("missing"));
        let again = repo
            .claim(t(50), t(110), 10, vec![], 100)
            .await
            .expect("requeued");
        assert_eq!(again.len(), 2);
        assert!(again.iter().all(|j| j.trigger == "manual"));
        // The delivered event's resend is a new delivery, its first attempt.
        let resent = again
            .iter()
            .find(|j| j.event_id == jobs[0].event_id)
            .expect("the resent event");
        assert_eq!(resent.attempt, 1);
        assert_ne!(resent.delivery_id, jobs[0].delivery_id);
        // 410: the subscription is disabled and what is pending is cancelled.
        let mut gone = record(&again[0], 410, NextStep::Failed);
        gone.subscription = Some(SubscriptionChange::Disable {
            reason: "gone".into(),
        });
        repo.record(vec![gone]).await.expect("record");
        let s = repo
            .get("env_a", "whk_1")
            .await
            .expect("get")
            .expect("exists");
        assert!(!s.enabled);
        assert_eq!(s.disabled_reason.as_deref(), Some("gone"));
        assert!(repo
            .claim(t(500), t(600), 10, vec![], 100)
            .await
            .expect("none")
            .is_empty());
        assert!(repo.delete("env_a", "whk_1").await.expect("delete"));
        assert!(!repo.delete("env_a", "whk_1").await.expect("gone"));
        // Outcomes of calls in flight when it was deleted are dropped, not an error.
        repo.record(vec![record(&again[1], 200, NextStep::Done)])
            .await
            .expect("dropped");
        assert!(raw_texts(url, "SELECT id AS v FROM webhook_deliveries").is_empty());
    }

    async fn disabling_cancels_pending_deliveries(url: &str) {
        let (db, repo) = setup(url).await;
        let mut s = subscription("whk_1", &["card-published"], None);
        repo.create(&s, 100).await.expect("a");
        publish_three(&db).await;
        s.enabled = false;
        s.updated = t(5) + Duration::seconds(1);
        repo.update(&s).await.expect("disable");
        assert!(repo
            .claim(t(30), t(90), 10, vec![], 100)
            .await
            .expect("none")
            .is_empty());
        s.enabled = true;
        repo.update(&s).await.expect("enable");
        assert!(repo
            .claim(t(30), t(90), 10, vec![], 100)
            .await
            .expect("still none")
            .is_empty());
        assert_eq!(
            repo.recover("env_a", "whk_1", t(0), t(40))
                .await
                .expect("recover"),
            3
        );
    }

    both_backends!(
        subscriptions_round_trip_with_secrets_sealed_and_a_limit,
        custom_header_values_are_sealed_at_rest,
        an_edit_keeps_a_secret_and_a_state_changed_meanwhile,
        events_enqueue_matching_deliveries_in_their_transaction,
        committed_deliveries_wake_the_delivery_loop,
        claims_cap_each_subscription_and_skip_excluded_ones,
        outcomes_decide_what_is_claimable_and_the_log_pages,
        a_stale_holders_outcome_changes_nothing,
        skewed_replicas_share_no_delivery_lease,
        disabling_cancels_pending_deliveries,
    );
}

mod bulk_cancel_push {
    use super::Record;
    use std::sync::Arc;

    use adapters_diesel::testing::raw_texts;
    use adapters_diesel::{
        both_backends, DieselBulkRepository, DieselCancelRepository, DieselCardRepository,
        DieselInvocationRepository, DieselPushPlatformRepository, SecretBox,
    };
    use domain::bulk::{BulkRepository, BulkStatus, BulkTask, RowError};
    use domain::cancel::{CancelFilter, CancelRepository, CancelStatus, CancelTask};
    use domain::card::{card_event, CardInstance, CardRepository, CardStatus, Transition};
    use domain::push::{PushPlatform, PushPlatformRepository};
    use domain::trigger::Mode;
    use domain::trigger::{BatchResult, Invocation, InvocationRepository, InvocationStatus};
    use domain::StorageError;
    use serde_json::Map;

    use super::engine::{batch, card, invocation, with_flow};
    use super::t;
    use super::webhooks::woken;

    fn bulk_task() -> BulkTask {
        BulkTask::new("env_a", "flw_1", Mode::Live, t(1))
    }

    async fn bulk_tasks_upload_once_and_progress_by_cursor(url: &str) {
        let repo = DieselBulkRepository::new(with_flow(url).await);
        let first = repo.create(&bulk_task()).await.expect("create");
        let second = repo.create(&bulk_task()).await.expect("create");
        assert!(second > first);
        assert!(repo
            .begin_upload("env_a", first, t(2))
            .await
            .expect("begin"));
        assert!(!repo.begin_upload("env_a", first, t(2)).await.expect("once"));
        assert!(!repo
            .begin_upload("env_b", second, t(2))
            .await
            .expect("other env"));
        let rows: Vec<(u64, Vec<String>)> = (1..=5).map(|n| (n, vec![format!("u{n}")])).collect();
        repo.add_rows("env_a", first, rows).await.expect("rows");
        repo.finish_upload("env_a", first, vec!["target.attributes.id".into()], 5, t(3))
            .await
            .expect("finish");
        let queued = repo.get("env_a", first).await.expect("get").expect("task");
        assert!(queued.queued, "an upload waits for a slot");
        let claimed = repo
            .claim(t(4), t(60), 5)
            .await
            .expect("claim")
            .expect("task");
        assert_eq!(
            (
                claimed.id,
                claimed.status,
                claimed.rows_total,
                claimed.queued
            ),
            (first, BulkStatus::Processing, 5, false)
        );
        assert!(repo.claim(t(5), t(60), 5).await.expect("leased").is_none());
        let page = repo.rows("env_a", first, 0, 3).await.expect("rows");
        assert_eq!(page.iter().map(|r| r.0).collect::<Vec<_>>(), [1, 2, 3]);
        let mut progressed = claimed.clone();
        progressed.cursor = 3;
        assert!(repo
            .save_progress(
                &progressed,
                0,
                3,
                1,
                vec![RowError {
                    row: 2,
                    message: "bad".into(),
                }],
            )
            .await
            .expect("save"));
        // A worker overtaken after its lease ran out saves nothing.
        assert!(!repo
            .save_progress(&progressed, 0, 3, 1, vec![])
            .await
            .expect("stale"));
        let stored = repo.get("env_a", first).await.expect("get").expect("task");
        assert_eq!(
            (
                stored.cursor,
                stored.rows_processed,
                stored.rows_failed,
                stored.errors.len()
            ),
            (3, 3, 1, 1)
        );
        assert_eq!(
            repo.rows("env_a", first, 0, 10).await.expect("rows").len(),
            2,
            "handled rows are deleted"
        );
        assert!(repo
            .fail(
                "env_a",
                second,
                vec![RowError {
                    row: 0,
                    message: "broken".into(),
                }],
                t(6),
                None,
            )
            .await
            .expect("fail"));
        let failed = repo.get("env_a", second).await.expect("get").expect("task");
        assert_eq!(
            (failed.status, failed.errors[0].row),
            (BulkStatus::Failed, 0)
        );
    }

    /// Rows stored in batches come back in order across them, a step at a time from any
    /// cursor, and a step that stops within a batch leaves only that batch's rows after it.
    /// Batches of one task added at once are checked one after the other: of two that
    /// overlap, one is stored and the other refused, however they interleave.
    async fn bulk_batches_added_at_once_are_checked_in_turn(url: &str) {
        let repo = std::sync::Arc::new(DieselBulkRepository::new(with_flow(url).await));
        for round in 0..20 {
            let id = repo.create(&bulk_task()).await.expect("create");
            assert!(repo.begin_upload("env_a", id, t(2)).await.expect("begin"));
            let add = |numbers: std::ops::RangeInclusive<u64>| {
                let repo = repo.clone();
                let rows = numbers.map(|n| (n, vec![format!("u{n}")])).collect();
                tokio::spawn(async move { repo.add_rows("env_a", id, rows).await })
            };
            let (first, second) = (add(1..=10), add(5..=15));
            let outcomes = [
                first.await.expect("join").is_ok(),
                second.await.expect("join").is_ok(),
            ];
            assert_eq!(
                outcomes.iter().filter(|stored| **stored).count(),
                1,
                "round {round}: {outcomes:?}"
            );
        }
    }

    async fn bulk_rows_are_read_across_batches_from_any_cursor(url: &str) {
        let repo = DieselBulkRepository::new(with_flow(url).await);
        let id = repo.create(&bulk_task()).await.expect("create");
        assert!(repo.begin_upload("env_a", id, t(2)).await.expect("begin"));
        for batch in [1..=3, 4..=4, 5..=9] {
            let rows = batch
                .rev()
                .map(|n| (n, vec![format!("u{n}"), String::new()]));
            repo.add_rows("env_a", id, rows.collect())
                .await
                .expect("rows");
        }
        repo.add_rows("env_a", id, vec![]).await.expect("no rows");
        assert!(
            matches!(
                repo.add_rows("env_a", id, vec![(11, vec![]), (11, vec![])])
                    .await,
                Err(StorageError::UniqueViolation(_))
            ),
            "a row twice in a batch"
        );
        for late in [9, 2] {
            assert!(
                matches!(
                    repo.add_rows("env_a", id, vec![(late, vec![]), (10, vec![])])
                        .await,
                    Err(StorageError::UniqueViolation(_))
                ),
                "row {late} comes after rows up to 9"
            );
        }
        repo.finish_upload("env_a", id, vec!["target.attributes.id".into()], 9, t(3))
            .await
            .expect("finish");
        let numbers =
            |page: Vec<(u64, Vec<String>)>| page.into_iter().map(|r| r.0).collect::<Vec<u64>>();
        let read = |after, limit| repo.rows("env_a", id, after, limit);
        assert_eq!(
            numbers(read(0, 4).await.expect("rows")),
            Vec::from([1, 2, 3, 4])
        );
        assert_eq!(
            numbers(read(2, 5).await.expect("rows")),
            Vec::from([3, 4, 5, 6, 7])
        );
        assert_eq!(numbers(read(7, 50).await.expect("rows")), Vec::from([8, 9]));
        assert_eq!(numbers(read(9, 50).await.expect("rows")), Vec::<u64>::new());
        assert_eq!(
            read(4, 1).await.expect("rows"),
            [(5, vec!["u5".to_owned(), String::new()])],
            "cells come back as stored"
        );
        let mut step = repo
            .claim(t(4), t(60), 5)
            .await
            .expect("claim")
            .expect("task");
        step.cursor = 6;
        assert!(repo
            .save_progress(&step, 0, 6, 0, vec![])
            .await
            .expect("save"));
        assert_eq!(
            numbers(read(0, 50).await.expect("rows")),
            Vec::from([7, 8, 9])
        );
    }

    fn cancel_task(id: &str, created: i64, filter: CancelFilter) -> CancelTask {
        CancelTask::new(id.into(), "env_a", "flw_1", filter, t(created))
    }

    /// Runs `task`'s batches of `limit` in turn, each to cancel the next of `expected`
    /// instances.
    async fn cancel_batches(
        cancels: &DieselCancelRepository,
        task: &CancelTask,
        limit: u32,
        now: domain::Timestamp,
        expected: &[u64],
    ) {
        for &n in expected {
            let done = cancels.cancel_batch(task, limit, now).await.expect("batch");
            assert_eq!(done, Some(n));
        }
    }

    /// The instances and cards `task` cancelled, as stored.
    async fn cancelled(cancels: &DieselCancelRepository, task: &CancelTask) -> (u64, u64) {
        let stored = cancels
            .get("env_a", &task.id)
            .await
            .expect("get")
            .expect("task");
        (stored.actual, stored.cards_actual)
    }

    async fn cancels_mark_engine_batches_and_cancel_in_batches(url: &str) {
        let db = with_flow(url).await;
        let invocations = DieselInvocationRepository::new(db.clone());
        invocations
            .record(vec![invocation("inv_1", Mode::Live, "fp", false)])
            .await
            .expect("invocation");
        // Cards of u1 and u2 exist; then a cancel of u2 only; then a batch with u2 and u3.
        invocations
            .save_batches(vec![batch(
                None,
                Some("u2"),
                vec![
                    card("crd_1", "fin_1", "u1", 5, 3),
                    card("crd_2", "fin_2", "u2", 5, 3),
                ],
            )])
            .await
            .expect("first batch");
        let cancels = DieselCancelRepository::new(db.clone());
        let only_u3 = cancel_task(
            "00000000-0000-4000-8000-000000000001",
            4,
            CancelFilter {
                end_user_id: Some("u3".into()),
                cancel_cards: true,
                ..Default::default()
            },
        );
        cancels.create(&only_u3).await.expect("marker");
        invocations
            .save_batches(vec![batch(
                Some("u2"),
                None,
                vec![
                    card("crd_3", "fin_3", "u3", 5, 3),
                    card("crd_4", "fin_4", "u4", 5, 3),
                ],
            )])
            .await
            .expect("second batch");
        let cards = DieselCardRepository::new(db.clone());
        assert!(
            cards
                .get("env_a", "u3", "crd_3")
                .await
                .expect("get")
                .is_none(),
            "covered by the marker"
        );
        assert!(cards
            .get("env_a", "u4", "crd_4")
            .await
            .expect("get")
            .is_some());
        // A cancel of everything: counts, then batches, with card-cancelled events.
        let all = cancel_task(
            "00000000-0000-4000-8000-000000000002",
            10,
            CancelFilter {
                cancel_cards: true,
                ..Default::default()
            },
        );
        cancels.create(&all).await.expect("create");
        assert_eq!(
            cancels
                .get("env_a", &all.id)
                .await
                .expect("get")
                .map(|t| t.status),
            Some(CancelStatus::Processing)
        );
        assert_eq!(cancels.count(&all).await.expect("count"), (3, 3));
        cancel_batches(&cancels, &all, 2, t(11), &[2, 1, 0]).await;
        assert_eq!(cancelled(&cancels, &all).await, (3, 3));
        let events = cards.events_of("env_a", "crd_1").await.expect("events");
        assert_eq!(
            events.last().map(|e| e.name.as_str()),
            Some("card-cancelled")
        );
        assert!(cancels.claim(t(12), t(40)).await.expect("claim").is_some());
        // Triggers after a cancel are not affected by it.
        assert!(!all.covers("inv_2", 1, t(11), "u1"));
        assert_eq!(
            invocations
                .get("env_a", "inv_1")
                .await
                .expect("get")
                .map(|i| i.status),
            Some(InvocationStatus::Completed)
        );
    }

    /// `batch` of the cards, as the run of `invocation`.
    fn run_of(invocation: &str, cards: Vec<domain::card::CardInstance>) -> BatchResult {
        let mut run = batch(None, None, cards);
        run.invocation_id = invocation.into();
        run
    }

    /// A committed transaction wakes the loops of each kind of work it queued (every loop
    /// asked for it): invocations left to the engine, a cancel task, a CSV task uploaded. Work
    /// run to its end when recorded, and claims, wake none.
    async fn committed_work_wakes_the_loop_that_claims_it(url: &str) {
        use adapters_diesel::Work;
        let db = with_flow(url).await;
        let invocations = DieselInvocationRepository::new(db.clone());
        let [engine, cancels, csv] =
            [Work::Invocations, Work::Cancels, Work::CsvTasks].map(|work| db.queued(work));
        let other_engine = db.queued(Work::Invocations);
        let record = |id: &'static str, run: Option<BatchResult>| {
            let invocations = &invocations;
            async move {
                let asked = invocation(id, Mode::Live, "fp", false);
                let stored = invocations.record_run(vec![(asked, run)]).await;
                assert_eq!(stored.expect("record"), vec![None], "{id} is new");
            }
        };
        record(
            "inv_1",
            Some(run_of("inv_1", vec![card("crd_1", "fin_1", "u1", 5, 3)])),
        )
        .await;
        assert!(!woken(&engine).await, "run to its end when recorded");
        record("inv_2", None).await;
        assert!(woken(&engine).await, "left to the engine");
        assert!(woken(&other_engine).await, "each engine loop");
        assert_eq!(
            invocations
                .claim(t(5), t(40), 10)
                .await
                .expect("claim")
                .len(),
            1
        );
        assert!(!woken(&engine).await, "a claim queues nothing");
        // A run saved with its invocation and left running: users are left for the engine.
        let mut run = batch(None, Some("u3"), vec![card("crd_3", "fin_3", "u3", 5, 3)]);
        run.invocation_id = "inv_3".into();
        record("inv_3", Some(run)).await;
        assert!(woken(&engine).await, "a run not at its end");
        let cancel = cancel_task(
            "00000000-0000-4000-8000-000000000001",
            4,
            CancelFilter::default(),
        );
        DieselCancelRepository::new(db.clone())
            .create(&cancel)
            .await
            .expect("cancel");
        assert!(woken(&cancels).await, "a cancel task");
        let repo = DieselBulkRepository::new(db.clone());
        let id = repo.create(&bulk_task()).await.expect("create");
        assert!(repo.begin_upload("env_a", id, t(2)).await.expect("begin"));
        assert!(!woken(&csv).await, "an upload under way");
        repo.finish_upload("env_a", id, vec!["target.attributes.id".into()], 0, t(3))
            .await
            .expect("finish");
        assert!(woken(&csv).await, "an upload finished");
        assert!(
            !woken(&engine).await && !woken(&cancels).await,
            "each its own"
        );
    }

    async fn a_run_is_saved_with_its_invocation_when_new_and_cancels_apply(url: &str) {
        let db = with_flow(url).await;
        let invocations = DieselInvocationRepository::new(db.clone());
        let cards = DieselCardRepository::new(db.clone());
        let run = run_of(
            "inv_1",
            vec![
                card("crd_1", "fin_1", "u1", 5, 3),
                card("crd_2", "fin_2", "u2", 5, 3),
            ],
        );
        let stored = invocations
            .record_run(vec![
                (invocation("inv_1", Mode::Live, "fp", false), Some(run)),
                (invocation("inv_2", Mode::Live, "fp", false), None),
            ])
            .await
            .expect("record");
        assert_eq!(stored, vec![None, None]);
        let inv_1 = invocations
            .get("env_a", "inv_1")
            .await
            .expect("get")
            .expect("inv_1");
        assert_eq!(
            (
                inv_1.status,
                inv_1.users_targeted,
                inv_1.cards_created,
                inv_1.cursor,
                inv_1.updated
            ),
            (InvocationStatus::Completed, 2, 2, None, t(3))
        );
        for (user, id) in [("u1", "crd_1"), ("u2", "crd_2")] {
            assert!(cards.get("env_a", user, id).await.expect("get").is_some());
            let events = cards.events_of("env_a", id).await.expect("events");
            assert_eq!(
                events.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(),
                ["card-published"]
            );
        }
        // Only the invocation without a run is left to the workers.
        let claimed = invocations.claim(t(5), t(40), 10).await.expect("claim");
        assert_eq!(
            claimed.iter().map(|i| i.id.as_str()).collect::<Vec<_>>(),
            ["inv_2"]
        );
        // A replay answers the stored invocation and saves nothing of its run, whose card is
        // of the user and step of a stored card (a second one would break the cards' key).
        let mut again = card("crd_3", "fin_3", "u1", 5, 3);
        again.step_id = "step-crd_1".into();
        let replay = run_of("inv_1", vec![again]);
        let stored = invocations
            .record_run(vec![(
                invocation("inv_1", Mode::Live, "fp", false),
                Some(replay),
            )])
            .await
            .expect("replay");
        assert!(stored[0].is_some());
        assert!(cards
            .get("env_a", "u1", "crd_3")
            .await
            .expect("get")
            .is_none());
        // A refused call saves nothing of any of its runs.
        let refused = invocations
            .record_run(vec![
                (
                    invocation("inv_4", Mode::Live, "fp", false),
                    Some(run_of("inv_4", vec![card("crd_4", "fin_4", "u4", 5, 3)])),
                ),
                (invocation("inv_1", Mode::Live, "other", false), None),
            ])
            .await
            .expect("refused");
        assert!(refused[1].is_some());
        assert!(invocations
            .get("env_a", "inv_4")
            .await
            .expect("get")
            .is_none());
        assert!(cards
            .get("env_a", "u4", "crd_4")
            .await
            .expect("get")
            .is_none());
        // A cancel of u5 accepted after the invocation was created: u5's instance is dropped.
        let cancels = DieselCancelRepository::new(db.clone());
        cancels
            .create(&cancel_task(
                "00000000-0000-4000-8000-000000000003",
                4,
                CancelFilter {
                    end_user_id: Some("u5".into()),
                    cancel_cards: true,
                    ..Default::default()
                },
            ))
            .await
            .expect("marker");
        let run = run_of(
            "inv_3",
            vec![
                card("crd_5", "fin_5", "u5", 5, 3),
                card("crd_6", "fin_6", "u6", 5, 3),
            ],
        );
        invocations
            .record_run(vec![(
                invocation("inv_3", Mode::Live, "fp", false),
                Some(run),
            )])
            .await
            .expect("record");
        assert!(cards
            .get("env_a", "u5", "crd_5")
            .await
            .expect("get")
            .is_none());
        assert!(cards
            .get("env_a", "u6", "crd_6")
            .await
            .expect("get")
            .is_some());
        let inv_3 = invocations
            .get("env_a", "inv_3")
            .await
            .expect("get")
            .expect("inv_3");
        assert_eq!(
            (inv_3.status, inv_3.cards_created),
            (InvocationStatus::Completed, 1)
        );
    }

    /// Calls that come together, which the recorder may write in one group, are each decided
    /// as if they ran alone: of two calls asking for one id, one records it with its run and
    /// the other finds it (or, asking with another fingerprint, is refused), and nothing of
    /// the other's run is saved.
    async fn calls_recorded_together_are_each_decided_as_if_alone(url: &str) {
        recorded_together(&with_flow(url).await, 1, 0).await;
    }

    /// The same with two writing threads (PostgreSQL; one on SQLite): the calls of a pair may
    /// be written by two transactions at once, one waiting on the other's key, or ended by
    /// PostgreSQL to break a deadlock and run again.
    async fn calls_written_by_two_writers_are_each_decided_as_if_alone(url: &str) {
        let db = with_flow(url).await;
        for round in 0..4 {
            recorded_together(&db, 2, round).await;
        }
    }

    async fn recorded_together(db: &adapters_diesel::Database, writers: usize, round: usize) {
        let invocations =
            std::sync::Arc::new(DieselInvocationRepository::new(db.clone()).with_writers(writers));
        let cards = DieselCardRepository::new(db.clone());
        let mut tasks = Vec::new();
        for k in 0..48 {
            let invocations = invocations.clone();
            tasks.push(tokio::spawn(async move {
                // Calls 2n and 2n + 1 ask for inv_n, one in three pairs with two fingerprints.
                let id = format!("inv_{round}_{}", k / 2);
                let fingerprint = if k % 6 == 5 { "other" } else { "fp" };
                let mut made = card(
                    &format!("crd_{round}_{k}"),
                    &format!("fin_{round}_{k}"),
                    &format!("u{round}_{k}"),
                    5,
                    3,
                );
                made.invocation_id = id.clone();
                let run = run_of(&id, vec![made]);
                invocations
                    .record_run(vec![(
                        invocation(&id, Mode::Live, fingerprint, false),
                        Some(run),
                    )])
                    .await
            }));
        }
        let mut answers = Vec::new();
        for task in tasks {
            answers.push(task.await.expect("join").expect("record"));
        }
        for n in 0..24 {
            let (a, b) = (&answers[2 * n][0], &answers[2 * n + 1][0]);
            assert!(
                a.is_none() != b.is_none(),
                "inv_{round}_{n}: one records it, one finds it"
            );
            let first = if a.is_none() { 2 * n } else { 2 * n + 1 };
            for k in [2 * n, 2 * n + 1] {
                let saved = cards
                    .get(
                        "env_a",
                        &format!("u{round}_{k}"),
                        &format!("crd_{round}_{k}"),
                    )
                    .await
                    .expect("get")
                    .is_some();
                assert_eq!(saved, k == first, "crd_{round}_{k}");
            }
        }
    }

    pub(super) fn platform(id: &str, enabled: bool) -> PushPlatform {
        PushPlatform {
            id: id.into(),
            environment_id: "env_a".into(),
            app_id: "app".into(),
            platform: "FCM".into(),
            arn: domain::push::arn("env_a", "FCM", "app"),
            enabled,
            credential: "{\"private_key\": \"-----BEGIN PRIVATE KEY-----\"}".into(),
            principal: Some("principal-text".into()),
            properties: Map::new(),
            facts: [("ProjectId".to_owned(), "p".to_owned())].into(),
            created: t(1),
            updated: t(1),
        }
    }

    async fn push_platforms_are_unique_sealed_and_deleted_only_when_disabled(url: &str) {
        let (db, _) = super::seeded(url).await;
        let secrets = Arc::new(SecretBox::new(&SecretBox::generate_key(), &[]).expect("key"));
        let repo = DieselPushPlatformRepository::new(db, secrets);
        repo.insert(&platform("npl_1", true)).await.expect("insert");
        assert!(matches!(
            repo.insert(&platform("npl_2", true)).await,
            Err(StorageError::UniqueViolation(_))
        ));
        assert_eq!(
            repo.find("env_a", "app", "FCM").await.expect("find"),
            Some(platform("npl_1", true))
        );
        assert_eq!(repo.find("env_a", "app", "GCM").await.expect("find"), None);
        assert_eq!(repo.get("env_b", "npl_1").await.expect("other env"), None);
        assert!(!repo
            .delete_disabled("env_a", "npl_1")
            .await
            .expect("enabled"));
        repo.update(&platform("npl_1", false))
            .await
            .expect("disable");
        assert_eq!(repo.list("env_a").await.expect("list").len(), 1);
        for stored in raw_texts(
            url,
            "SELECT credential || ' ' || principal AS v FROM push_platforms",
        ) {
            assert!(
                !stored.contains("PRIVATE KEY") && !stored.contains("principal-text"),
                "{stored}"
            );
        }
        assert!(repo
            .delete_disabled("env_a", "npl_1")
            .await
            .expect("delete"));
        assert!(repo.list("env_a").await.expect("list").is_empty());
    }

    async fn devices_belong_to_one_user_and_move(url: &str) {
        use adapters_diesel::DieselDeviceRepository;
        use domain::push::{Device, DeviceRepository};
        let (db, _) = super::seeded(url).await;
        let repo = DieselDeviceRepository::new(db);
        let device = |user: &str, at: i64| Device {
            environment_id: "env_a".into(),
            user_id: user.into(),
            token: "tok".into(),
            app_id: "app".into(),
            platform: "APNS".into(),
            created: t(at),
            updated: t(at),
        };
        assert_eq!(
            repo.upsert(&device("u1", 1)).await.expect("insert"),
            device("u1", 1)
        );
        let moved = repo.upsert(&device("u2", 2)).await.expect("move");
        assert_eq!(
            (moved.user_id.as_str(), moved.created, moved.updated),
            ("u2", t(1), t(2))
        );
        assert!(repo.of_user("env_a", "u1").await.expect("u1").is_empty());
        assert_eq!(repo.of_user("env_a", "u2").await.expect("u2").len(), 1);
        assert!(!repo.delete("env_a", "u1", "tok").await.expect("not u1's"));
        // An end user's own registration: its token, new or its own, is written; another
        // user's stays where it is.
        assert_eq!(
            repo.upsert_own(&device("u1", 3)).await.expect("take"),
            None,
            "u2 holds it"
        );
        assert_eq!(repo.of_user("env_a", "u2").await.expect("u2").len(), 1);
        assert!(repo.of_user("env_a", "u1").await.expect("u1").is_empty());
        let again = repo.upsert_own(&device("u2", 4)).await.expect("own");
        assert_eq!(
            again.map(|d| (d.user_id, d.created, d.updated)),
            Some(("u2".to_owned(), t(1), t(4)))
        );
        assert!(repo.delete("env_a", "u2", "tok").await.expect("delete"));
        assert_eq!(
            repo.upsert_own(&device("u1", 5)).await.expect("new"),
            Some(device("u1", 5))
        );
    }

    /// A card that notifies on iOS and Android, for user `user`.
    pub(super) fn notifying(id: &str, user: &str) -> domain::card::CardInstance {
        let note = serde_json::json!({"notification": {"attributes": {"body": "Hi"}}});
        domain::card::CardInstance {
            platforms: vec!["iOS".into(), "Android".into()],
            content: Map::from_iter([
                ("iOS".to_owned(), note.clone()),
                ("Android".to_owned(), note),
            ])
            .into(),
            ..card(id, &format!("fin_{id}"), user, 5, 3)
        }
    }

    async fn publishing_a_card_queues_its_pushes_with_it(url: &str) {
        use adapters_diesel::{DieselDeviceRepository, DieselPushJobRepository};
        use domain::push::{Device, DeviceRepository, PushJobRepository, PushNext, PushRecord};
        let db = with_flow(url).await;
        let secrets = Arc::new(SecretBox::new(&SecretBox::generate_key(), &[]).expect("key"));
        let platforms = DieselPushPlatformRepository::new(db.clone(), secrets.clone());
        let devices = DieselDeviceRepository::new(db.clone());
        let jobs = DieselPushJobRepository::new(db.clone(), secrets);
        let invocations = DieselInvocationRepository::new(db.clone());
        platforms
            .insert(&platform("npl_1", true))
            .await
            .expect("FCM app");
        let device = |user: &str, token: &str, app: &str, platform: &str| Device {
            environment_id: "env_a".into(),
            user_id: user.into(),
            token: token.into(),
            app_id: app.into(),
            platform: platform.into(),
            created: t(1),
            updated: t(1),
        };
        for d in [
            device("u1", "android-1", "app", "FCM"),
            // No platform for this app, and none for APNS: no pushes.
            device("u1", "android-2", "other-app", "FCM"),
            device("u1", "iphone", "app", "APNS"),
            device("u2", "android-3", "app", "FCM"),
        ] {
            devices.upsert(&d).await.expect("device");
        }
        invocations
            .record(vec![invocation("inv_1", Mode::Live, "fp", false)])
            .await
            .expect("record");
        let queued = db.queued(adapters_diesel::Work::Pushes);
        assert!(!woken(&queued).await, "nothing queued yet");
        // u1 and u2 get a notifying card; u3 (no device) too; the Web-only card of u2 does not
        // push.
        invocations
            .save_batches(vec![batch(
                None,
                None,
                vec![
                    notifying("crd_1", "u1"),
                    notifying("crd_2", "u2"),
                    notifying("crd_3", "u3"),
                    card("crd_4", "fin_crd_2", "u2", 5, 3),
                ],
            )])
            .await
            .expect("batch");
        assert!(woken(&queued).await, "pushes queued wake the push loop");
        let claimed = jobs.claim(t(10), t(40), 10).await.expect("claim");
        let mut pairs: Vec<(String, String)> = claimed
            .iter()
            .map(|j| {
                (
                    j.token.clone(),
                    j.card.as_ref().expect("card").id.as_str().to_owned(),
                )
            })
            .collect();
        pairs.sort();
        assert_eq!(
            pairs,
            [
                ("android-1".to_owned(), "crd_1".to_owned()),
                ("android-3".to_owned(), "crd_2".to_owned())
            ]
        );
        let first = &claimed[0];
        assert_eq!(first.attempt, 1);
        assert_eq!(
            first.platform.as_ref().map(|p| p.credential.as_str()),
            Some(platform("npl_1", true).credential.as_str()),
            "credentials are opened for the sender"
        );
        assert_eq!(
            first.device.as_ref().map(|d| d.user_id.as_str()),
            Some(first.user_id.as_str())
        );
        // Leased: not claimed again until the lease runs out.
        assert!(jobs
            .claim(t(20), t(50), 10)
            .await
            .expect("claim")
            .is_empty());
        let again = jobs.claim(t(41), t(70), 10).await.expect("lease ran out");
        assert_eq!(again.len(), 2);
        assert!(again.iter().all(|j| j.attempt == 1));
        let record = |j: &domain::push::PushJob, next: PushNext| PushRecord {
            job_id: j.id.clone(),
            environment_id: j.environment_id.clone(),
            user_id: j.user_id.clone(),
            token: j.token.clone(),
            attempt: j.attempt,
            next,
            status_code: Some(404),
            error: Some("UNREGISTERED".into()),
            at: t(42),
            lease: j.lease_until,
        };
        let dead = again.iter().find(|j| j.token == "android-1").expect("job");
        let retried = again.iter().find(|j| j.token == "android-3").expect("job");
        // Contract §19: the first claims' lease ran out; their late outcomes change nothing.
        let late = claimed
            .iter()
            .find(|j| j.token == "android-1")
            .expect("job");
        assert_eq!(
            jobs.record(vec![record(late, PushNext::DeadToken)])
                .await
                .expect("record"),
            1,
            "a stale holder's outcome is refused"
        );
        assert_eq!(
            devices.of_user("env_a", "u1").await.expect("devices").len(),
            3,
            "the stale outcome removed no device"
        );
        assert_eq!(
            jobs.record(vec![
                record(dead, PushNext::DeadToken),
                record(retried, PushNext::RetryAt(t(100))),
            ])
            .await
            .expect("record"),
            0
        );
        let left: Vec<String> = devices
            .of_user("env_a", "u1")
            .await
            .expect("devices")
            .into_iter()
            .map(|d| d.token)
            .collect();
        assert_eq!(left, ["android-2", "iphone"], "the dead token is removed");
        assert!(jobs
            .claim(t(99), t(130), 10)
            .await
            .expect("not yet")
            .is_empty());
        let third = jobs.claim(t(100), t(130), 10).await.expect("retry due");
        assert_eq!(third.len(), 1);
        assert_eq!(third[0].attempt, 2);
        let shown = jobs
            .of_card("env_a", "u1", "crd_1")
            .await
            .expect("of card")
            .expect("u1's card");
        assert_eq!(shown.len(), 1);
        assert_eq!(
            (
                shown[0].status.as_str(),
                shown[0].attempts,
                shown[0].status_code
            ),
            ("dead_token", 1, Some(404))
        );
        assert_eq!(shown[0].next_attempt_at, None);
        assert_eq!(
            jobs.of_card("env_a", "u2", "crd_1").await.expect("of card"),
            None
        );
        assert_eq!(
            jobs.of_card("env_b", "u1", "crd_1").await.expect("of card"),
            None
        );
        // A disabled platform queues nothing.
        platforms
            .update(&platform("npl_1", false))
            .await
            .expect("disable");
        let mut later = batch(Some("none"), None, vec![notifying("crd_5", "u2")]);
        later.from_cursor = None;
        later.invocation_id = "inv_2".into();
        invocations
            .record(vec![invocation("inv_2", Mode::Live, "fp2", false)])
            .await
            .expect("record");
        invocations.save_batches(vec![later]).await.expect("batch");
        assert_eq!(
            jobs.of_card("env_a", "u2", "crd_5").await.expect("of card"),
            Some(Vec::new())
        );
    }

    /// A cancel goes through its flow's invocations in the order they were created, and through
    /// each one's users in order: a batch full within an invocation stops there and the next
    /// goes on after its last user; invocations of another version, or created after the task,
    /// are not reached.
    async fn a_cancel_walks_the_flows_invocations_and_their_users_in_order(url: &str) {
        let db = with_flow(url).await;
        let invocations = DieselInvocationRepository::new(db.clone());
        let cards = DieselCardRepository::new(db.clone());
        let cancels = DieselCancelRepository::new(db.clone());
        let at = |id: &str, version: u32, created: i64| Invocation {
            flow_version: version,
            created: t(created),
            updated: t(created),
            ..invocation(id, Mode::Live, id, false)
        };
        // inv_b is older than inv_a; inv_c is of version 2; inv_d comes after the cancels.
        invocations
            .record(vec![
                at("inv_a", 1, 2),
                at("inv_b", 1, 1),
                at("inv_c", 2, 3),
                at("inv_d", 1, 30),
            ])
            .await
            .expect("record");
        let of = |inv: &str, users: &[(&str, &[&str])], created: i64| {
            let mut written = Vec::new();
            for (user, steps) in users {
                for step in *steps {
                    written.push(CardInstance {
                        step_id: (*step).into(),
                        invocation_id: inv.into(),
                        flow_version: if inv == "inv_c" { 2 } else { 1 },
                        ..card(
                            &format!("crd_{inv}_{user}_{step}"),
                            &format!("fin_{inv}_{user}"),
                            user,
                            5,
                            created,
                        )
                    });
                }
            }
            let mut b = batch(None, None, written);
            b.invocation_id = inv.into();
            b
        };
        invocations
            .save_batches(vec![
                of(
                    "inv_a",
                    &[("u3", &["s1"]), ("u1", &["s1"]), ("u2", &["s1"])],
                    3,
                ),
                // Cards of a batch built after the cancels below are created, and saved before
                // them: their invocation, not their own time, decides.
                of("inv_b", &[("u2", &["s1"]), ("u1", &["s1", "s2"])], 40),
                of("inv_c", &[("u1", &["s1"])], 3),
                of("inv_d", &[("u1", &["s1"])], 31),
            ])
            .await
            .expect("save");
        let status = |inv: &'static str, user: &'static str, step: &'static str| {
            let cards = &cards;
            async move {
                let id = format!("crd_{inv}_{user}_{step}");
                cards
                    .get("env_a", user, &id)
                    .await
                    .expect("get")
                    .expect(&id)
                    .status
            }
        };
        // u2 alone: one instance of each invocation of version 1 up to the task.
        let u2 = cancel_task(
            "00000000-0000-4000-8000-000000000001",
            10,
            CancelFilter {
                end_user_id: Some("u2".into()),
                cancel_cards: true,
                ..Default::default()
            },
        );
        cancels.create(&u2).await.expect("create");
        assert_eq!(cancels.count(&u2).await.expect("count"), (2, 2));
        for expected in [1, 1, 0] {
            let done = cancels.cancel_batch(&u2, 1, t(11)).await.expect("batch");
            assert_eq!(done, Some(expected));
        }
        assert_eq!(status("inv_b", "u2", "s1").await, CardStatus::Cancelled);
        assert_eq!(status("inv_a", "u2", "s1").await, CardStatus::Cancelled);
        // Version 2 alone.
        let v2 = cancel_task(
            "00000000-0000-4000-8000-000000000002",
            12,
            CancelFilter {
                flow_version: Some(2),
                cancel_cards: true,
                ..Default::default()
            },
        );
        cancels.create(&v2).await.expect("create");
        assert_eq!(cancels.count(&v2).await.expect("count"), (1, 1));
        for expected in [1, 0] {
            let done = cancels.cancel_batch(&v2, 5, t(13)).await.expect("batch");
            assert_eq!(done, Some(expected));
        }
        assert_eq!(status("inv_c", "u1", "s1").await, CardStatus::Cancelled);
        // The rest, two instances a batch: inv_b's u1 (both cards) and inv_a's u1, which fills
        // the batch within inv_a; then inv_a's u3; inv_c has nothing left, inv_d is too new.
        let all = cancel_task(
            "00000000-0000-4000-8000-000000000003",
            14,
            CancelFilter {
                cancel_cards: true,
                ..Default::default()
            },
        );
        cancels.create(&all).await.expect("create");
        assert_eq!(cancels.count(&all).await.expect("count"), (3, 4));
        assert_eq!(
            cancels.cancel_batch(&all, 2, t(15)).await.expect("batch"),
            Some(2)
        );
        // Where the batch stopped is stored with it.
        let stopped = raw_texts(
            url,
            "SELECT cursor_invocation || '/' || cursor_user AS v FROM cancel_tasks \
             WHERE id = '00000000-0000-4000-8000-000000000003'",
        );
        assert_eq!(stopped, ["inv_a/u1"]);
        for (inv, user, step, expected) in [
            ("inv_b", "u1", "s1", CardStatus::Cancelled),
            ("inv_b", "u1", "s2", CardStatus::Cancelled),
            ("inv_a", "u1", "s1", CardStatus::Cancelled),
            ("inv_a", "u3", "s1", CardStatus::Active),
        ] {
            assert_eq!(
                status(inv, user, step).await,
                expected,
                "{inv} {user} {step}"
            );
        }
        cancel_batches(&cancels, &all, 2, t(15), &[1, 0, 0]).await;
        assert_eq!(status("inv_a", "u3", "s1").await, CardStatus::Cancelled);
        assert_eq!(status("inv_d", "u1", "s1").await, CardStatus::Active);
        assert_eq!(cancelled(&cancels, &all).await, (3, 4));
        // Nothing of the flow up to a task is left to cancel.
        let again = cancel_task(
            "00000000-0000-4000-8000-000000000004",
            16,
            CancelFilter::default(),
        );
        assert_eq!(cancels.count(&again).await.expect("count"), (0, 0));
    }

    /// Instances of a two-step flow (two cards each, the flow instance stored on its cards): a
    /// cancel batch takes whole instances; `cancelCards: false` stops them and leaves their
    /// cards; a stopped instance matches no later cancel.
    async fn a_cancel_takes_whole_instances_and_leaves_cards_when_asked(url: &str) {
        let db = with_flow(url).await;
        let invocations = DieselInvocationRepository::new(db.clone());
        let cards = DieselCardRepository::new(db.clone());
        let cancels = DieselCancelRepository::new(db.clone());
        let two_steps = |inv: &str, users: &[&str]| {
            let mut written = Vec::new();
            for user in users {
                for step in ["s1", "s2"] {
                    written.push(CardInstance {
                        step_id: step.into(),
                        invocation_id: inv.into(),
                        ..card(
                            &format!("crd_{user}_{step}"),
                            &format!("fin_{user}"),
                            user,
                            5,
                            3,
                        )
                    });
                }
            }
            let mut b = batch(None, None, written);
            b.invocation_id = inv.into();
            b
        };
        invocations
            .record(vec![
                invocation("inv_1", Mode::Live, "fp", false),
                invocation("inv_2", Mode::Live, "fp", false),
            ])
            .await
            .expect("record");
        invocations
            .save_batches(vec![
                two_steps("inv_1", &["u1", "u2", "u3"]),
                two_steps("inv_2", &["u4", "u5"]),
            ])
            .await
            .expect("save");
        // One of u2's cards is completed: its instance is still active, that card not open.
        let open = cards
            .get("env_a", "u2", "crd_u2_s2")
            .await
            .expect("get")
            .expect("card");
        let done = CardInstance {
            status: CardStatus::Completed,
            ..open
        };
        cards
            .transition(vec![Transition {
                from: CardStatus::Active,
                event: card_event(Arc::new(done), Some(CardStatus::Active), None, t(4)),
            }])
            .await
            .expect("complete");
        // inv_1's instances stopped, their cards kept: two batches of at most two instances.
        let stop = cancel_task(
            "00000000-0000-4000-8000-000000000001",
            10,
            CancelFilter {
                invocation_id: Some("inv_1".into()),
                cancel_cards: false,
                ..Default::default()
            },
        );
        cancels.create(&stop).await.expect("create");
        assert_eq!(cancels.count(&stop).await.expect("count"), (3, 5));
        cancel_batches(&cancels, &stop, 2, t(11), &[2, 1, 0]).await;
        assert_eq!(cancelled(&cancels, &stop).await, (3, 0));
        for id in ["crd_u1_s1", "crd_u1_s2", "crd_u3_s2"] {
            let user = &id[4..6];
            let kept = cards.get("env_a", user, id).await.expect("get").expect(id);
            assert_eq!(kept.status, CardStatus::Active, "{id}");
        }
        // Everything else of the flow: inv_1's instances match no more; inv_2's are cancelled
        // one whole instance per batch, both cards of each.
        let all = cancel_task(
            "00000000-0000-4000-8000-000000000002",
            12,
            CancelFilter {
                cancel_cards: true,
                ..Default::default()
            },
        );
        cancels.create(&all).await.expect("create");
        assert_eq!(cancels.count(&all).await.expect("count"), (2, 4));
        for (user, expected) in [("u4", 1), ("u5", 1), ("-", 0)] {
            assert_eq!(
                cancels.cancel_batch(&all, 1, t(13)).await.expect("batch"),
                Some(expected)
            );
            if expected == 1 {
                for step in ["s1", "s2"] {
                    let id = format!("crd_{user}_{step}");
                    let card = cards
                        .get("env_a", user, &id)
                        .await
                        .expect("get")
                        .expect("card");
                    assert_eq!(card.status, CardStatus::Cancelled, "{id}");
                }
            }
        }
        assert_eq!(cancelled(&cancels, &all).await, (2, 4));
        assert_eq!(
            cards
                .get("env_a", "u1", "crd_u1_s1")
                .await
                .expect("get")
                .map(|c| c.status),
            Some(CardStatus::Active),
            "a stopped instance's cards are left to the cancel that stopped it"
        );
    }

    /// Contract §10: a task holds a slot from its first claim until it is final; one waiting
    /// for its upload holds none, and an upload beyond the slots waits queued, never refused.
    async fn bulk_tasks_hold_slots_only_while_processing(url: &str) {
        let db = with_flow(url).await;
        let repo = DieselBulkRepository::new(db.clone());
        let invocations = DieselInvocationRepository::new(db);
        // Waiting for their upload: no slot.
        for _ in 0..3 {
            repo.create(&bulk_task()).await.expect("create");
        }
        assert_eq!(invocations.running_bulk("env_a").await.expect("slots"), 0);
        let mut uploaded = Vec::new();
        for n in 0..6 {
            let id = repo.create(&bulk_task()).await.expect("create");
            assert!(repo.begin_upload("env_a", id, t(2)).await.expect("begin"));
            repo.add_rows("env_a", id, vec![(1, vec![format!("u{n}")])])
                .await
                .expect("rows");
            repo.finish_upload("env_a", id, vec!["target.attributes.id".into()], 1, t(3))
                .await
                .expect("finish");
            uploaded.push(id);
        }
        assert_eq!(
            invocations.running_bulk("env_a").await.expect("slots"),
            0,
            "queued uploads hold no slot"
        );
        let mut claimed = Vec::new();
        for _ in 0..5 {
            let task = repo
                .claim(t(4), t(60), 5)
                .await
                .expect("claim")
                .expect("a slot is free");
            assert!(!task.queued);
            claimed.push(task);
        }
        assert_eq!(
            claimed.iter().map(|c| c.id).collect::<Vec<_>>(),
            uploaded[..5],
            "oldest first"
        );
        assert_eq!(invocations.running_bulk("env_a").await.expect("slots"), 5);
        // Every lease runs out: the five started tasks are claimed again, the sixth still waits.
        let mut again = Vec::new();
        for _ in 0..5 {
            let task = repo
                .claim(t(61), t(120), 5)
                .await
                .expect("claim")
                .expect("started");
            assert_ne!(task.id, uploaded[5]);
            again.push(task);
        }
        assert!(repo.claim(t(61), t(120), 5).await.expect("claim").is_none());
        let waiting = repo
            .get("env_a", uploaded[5])
            .await
            .expect("get")
            .expect("task");
        assert!(waiting.queued);
        // One finishes (saved by its holder, the second claim): the queued one starts.
        let mut done = again[0].clone();
        done.status = BulkStatus::Completed;
        done.cursor = 1;
        assert!(repo
            .save_progress(&done, 0, 1, 0, vec![])
            .await
            .expect("save"));
        let mut taken = Vec::new();
        while let Some(task) = repo.claim(t(121), t(180), 5).await.expect("claim") {
            taken.push((task.id, task.queued));
        }
        assert_eq!(taken.len(), 5, "{taken:?}");
        assert!(
            taken.contains(&(uploaded[5], false)),
            "a slot freed: {taken:?}"
        );
    }

    /// A CSV task uploaded with `rows` rows, processing and queued for a slot.
    async fn uploaded(repo: &DieselBulkRepository, rows: u64) -> i64 {
        let id = repo.create(&bulk_task()).await.expect("create");
        assert!(repo.begin_upload("env_a", id, t(2)).await.expect("begin"));
        let cells = (1..=rows).map(|n| (n, vec![format!("u{n}")])).collect();
        repo.add_rows("env_a", id, cells).await.expect("rows");
        repo.finish_upload("env_a", id, vec!["target.attributes.id".into()], rows, t(3))
            .await
            .expect("finish");
        id
    }

    /// Contract §19: replicas whose clocks are five minutes apart share no lease of a CSV
    /// task, a cancel task or a push once each is on the database's time; the skewed host
    /// clock alone would take each.
    async fn skewed_replicas_share_no_task_or_push_lease(url: &str) {
        use adapters_diesel::{DieselDeviceRepository, DieselPushJobRepository};
        use domain::push::{Device, DeviceRepository, PushJobRepository};
        use domain::Clock;
        let db = with_flow(url).await;
        let bulk = DieselBulkRepository::new(db.clone());
        uploaded(&bulk, 2).await;
        let secrets = Arc::new(SecretBox::new(&SecretBox::generate_key(), &[]).expect("key"));
        DieselPushPlatformRepository::new(db.clone(), secrets.clone())
            .insert(&platform("npl_1", true))
            .await
            .expect("platform");
        DieselDeviceRepository::new(db.clone())
            .upsert(&Device {
                environment_id: "env_a".into(),
                user_id: "u1".into(),
                token: "android-1".into(),
                app_id: "app".into(),
                platform: "FCM".into(),
                created: t(1),
                updated: t(1),
            })
            .await
            .expect("device");
        let invocations = DieselInvocationRepository::new(db.clone());
        invocations
            .record(vec![invocation("inv_1", Mode::Live, "fp", false)])
            .await
            .expect("record");
        invocations
            .save_batches(vec![batch(None, None, vec![notifying("crd_1", "u1")])])
            .await
            .expect("batch");
        // After the card: a cancel of the whole flow stops its invocations' later batches.
        let cancels = DieselCancelRepository::new(db.clone());
        let task = cancel_task(
            "00000000-0000-4000-8000-000000000009",
            4,
            CancelFilter::default(),
        );
        cancels.create(&task).await.expect("cancel");
        let pushes = DieselPushJobRepository::new(db.clone(), secrets);

        let (ahead, behind) = super::engine::skewed_replicas(&db).await;
        let raw = super::engine::Skewed(300_000).now();
        let lease = chrono::Duration::seconds(30);
        let (now, later) = (behind.now(), ahead.now());
        // CSV tasks.
        assert!(bulk
            .claim(now, now + lease, 5)
            .await
            .expect("claim")
            .is_some());
        assert!(
            bulk.claim(later, later + lease, 5)
                .await
                .expect("claim")
                .is_none(),
            "a CSV task's lease is live on the database's time"
        );
        assert!(
            bulk.claim(raw, raw + lease, 5)
                .await
                .expect("claim")
                .is_some(),
            "the host's skewed clock alone would have taken it"
        );
        // Cancel tasks.
        assert!(cancels
            .claim(now, now + lease)
            .await
            .expect("claim")
            .is_some());
        assert!(
            cancels
                .claim(later, later + lease)
                .await
                .expect("claim")
                .is_none(),
            "a cancel task's lease is live on the database's time"
        );
        assert!(
            cancels
                .claim(raw, raw + lease)
                .await
                .expect("claim")
                .is_some(),
            "the host's skewed clock alone would have taken it"
        );
        // Pushes.
        assert_eq!(
            pushes
                .claim(now, now + lease, 10)
                .await
                .expect("claim")
                .len(),
            1
        );
        assert!(
            pushes
                .claim(later, later + lease, 10)
                .await
                .expect("claim")
                .is_empty(),
            "a push's lease is live on the database's time"
        );
        assert_eq!(
            pushes
                .claim(raw, raw + lease, 10)
                .await
                .expect("claim")
                .len(),
            1,
            "the host's skewed clock alone would have taken it"
        );
    }

    /// Contract §19: once a CSV or cancel task's lease has passed to another holder, the first
    /// holder's writes (progress, failure, cancel batches, status) change nothing.
    async fn a_stale_task_holders_writes_change_nothing(url: &str) {
        let db = with_flow(url).await;
        let bulk = DieselBulkRepository::new(db.clone());
        let id = uploaded(&bulk, 3).await;
        let first = bulk
            .claim(t(4), t(30), 5)
            .await
            .expect("claim")
            .expect("task");
        let second = bulk
            .claim(t(31), t(60), 5)
            .await
            .expect("claim")
            .expect("lease ran out");
        assert_eq!((first.id, second.id), (id, id));
        assert_ne!(
            first.lease_until, second.lease_until,
            "each claim its own lease"
        );
        let done = |task: &BulkTask| BulkTask {
            cursor: 3,
            status: BulkStatus::Completed,
            ..task.clone()
        };
        let error = || {
            vec![RowError {
                row: 0,
                message: "late".into(),
            }]
        };
        assert!(!bulk
            .save_progress(&done(&first), 0, 3, 0, error())
            .await
            .expect("stale"));
        assert!(!bulk
            .fail("env_a", id, error(), t(32), first.lease_until)
            .await
            .expect("stale"));
        let stored = bulk.get("env_a", id).await.expect("get").expect("task");
        assert_eq!((stored.status, stored.cursor), (BulkStatus::Processing, 0));
        assert_eq!(bulk.rows("env_a", id, 0, 10).await.expect("rows").len(), 3);
        assert!(bulk
            .save_progress(&done(&second), 0, 3, 0, vec![])
            .await
            .expect("held"));
        let stored = bulk.get("env_a", id).await.expect("get").expect("task");
        assert_eq!(
            (stored.status, stored.rows_processed, stored.errors.len()),
            (BulkStatus::Completed, 3, 0)
        );

        let cancels = DieselCancelRepository::new(db.clone());
        let task = cancel_task(
            "00000000-0000-4000-8000-000000000010",
            4,
            CancelFilter::default(),
        );
        cancels.create(&task).await.expect("create");
        let first = cancels
            .claim(t(20), t(50))
            .await
            .expect("claim")
            .expect("task");
        let second = cancels
            .claim(t(51), t(80))
            .await
            .expect("claim")
            .expect("lease ran out");
        assert_eq!(
            cancels
                .cancel_batch(&first, 10, t(52))
                .await
                .expect("stale"),
            None
        );
        let failed = CancelTask {
            status: CancelStatus::Failed,
            errors: vec!["late".into()],
            ..first.clone()
        };
        assert!(!cancels.save(&failed).await.expect("stale"));
        assert_eq!(
            cancels
                .cancel_batch(&second, 10, t(52))
                .await
                .expect("held"),
            Some(0)
        );
        let completed = CancelTask {
            status: CancelStatus::Completed,
            ..second.clone()
        };
        assert!(cancels.save(&completed).await.expect("held"));
        let stored = cancels
            .get("env_a", &task.id)
            .await
            .expect("get")
            .expect("task");
        assert_eq!(
            (stored.status, stored.errors.len()),
            (CancelStatus::Completed, 0)
        );
    }

    both_backends!(
        skewed_replicas_share_no_task_or_push_lease,
        a_stale_task_holders_writes_change_nothing,
        devices_belong_to_one_user_and_move,
        publishing_a_card_queues_its_pushes_with_it,
        bulk_tasks_upload_once_and_progress_by_cursor,
        bulk_rows_are_read_across_batches_from_any_cursor,
        bulk_batches_added_at_once_are_checked_in_turn,
        bulk_tasks_hold_slots_only_while_processing,
        cancels_mark_engine_batches_and_cancel_in_batches,
        a_cancel_takes_whole_instances_and_leaves_cards_when_asked,
        a_cancel_walks_the_flows_invocations_and_their_users_in_order,
        a_run_is_saved_with_its_invocation_when_new_and_cancels_apply,
        committed_work_wakes_the_loop_that_claims_it,
        calls_recorded_together_are_each_decided_as_if_alone,
        calls_written_by_two_writers_are_each_decided_as_if_alone,
        push_platforms_are_unique_sealed_and_deleted_only_when_disabled,
    );
}

/// Numbers cross the storage boundary checked both ways: a stored number out of the domain's
/// range (written by hand, by a migration gone wrong) reads back as corrupt, never as some
/// default; a domain number out of its column's range is refused, never clamped.
mod stored_numbers {
    use super::Record;

    use adapters_diesel::testing::raw_texts;
    use adapters_diesel::{
        both_backends, DieselBulkRepository, DieselCancelRepository, DieselCardRepository,
        DieselFlowRepository, DieselInvocationRepository,
    };
    use domain::bulk::{BulkRepository, BulkTask};
    use domain::cancel::{CancelFilter, CancelRepository, CancelTask};
    use domain::card::CardRepository;
    use domain::flow::VersionRef;
    use domain::trigger::{InvocationRepository, Mode};
    use domain::{FlowRepository, StorageError};

    use super::engine::{batch, card, invocation, with_flow};
    use super::t;

    /// Runs `sql`, an UPDATE of one row, on the database itself, as a hand or a faulty
    /// migration would.
    fn update(url: &str, sql: &str) {
        let changed = raw_texts(url, &format!("{sql} RETURNING CAST('x' AS TEXT) AS v"));
        assert_eq!(changed.len(), 1, "{sql}");
    }

    /// `read` failed as a stored `what` that cannot be read: not a value, and not another
    /// error.
    #[track_caller]
    fn assert_corrupt<T: std::fmt::Debug>(read: Result<T, StorageError>, what: &str) {
        match read {
            Err(StorageError::Internal(m)) if m.contains(&format!("stored {what} cannot")) => {}
            other => panic!("expected the stored {what} to be corrupt, got {other:?}"),
        }
    }

    /// `write` was refused for `what` out of its column's range, naming the value.
    #[track_caller]
    fn assert_refused<T: std::fmt::Debug>(write: Result<T, StorageError>, what: &str, value: u64) {
        match write {
            Err(StorageError::Internal(m))
                if m.contains(&format!("{what} {value} cannot be stored")) => {}
            other => panic!("expected {what} {value} to be refused, got {other:?}"),
        }
    }

    /// inv_1 with one card, crd_1 of u1, priority 7.
    async fn with_card(url: &str) -> adapters_diesel::Database {
        let db = with_flow(url).await;
        let repo = DieselInvocationRepository::new(db.clone());
        repo.record(vec![invocation("inv_1", Mode::Live, "fp", false)])
            .await
            .expect("record");
        repo.save_batches(vec![batch(
            None,
            None,
            vec![card("crd_1", "fin_1", "u1", 7, 1)],
        )])
        .await
        .expect("batch");
        db
    }

    async fn a_priority_out_of_range_reads_as_corrupt_not_as_the_default(url: &str) {
        let cards = DieselCardRepository::new(with_card(url).await);
        let read = cards.get("env_a", "u1", "crd_1").await.expect("get");
        assert_eq!(read.expect("card").priority, 7);
        // A card's priority is a u8; the column an INTEGER. Read as the default priority (5),
        // such a card would be shown as another card than the one stored.
        for stored in [300, -1] {
            update(
                url,
                &format!("UPDATE card_instances SET priority = {stored} WHERE id = 'crd_1'"),
            );
            assert_corrupt(cards.get("env_a", "u1", "crd_1").await, "card priority");
            assert_corrupt(cards.feed("env_a", "u1", None).await, "card priority");
        }
    }

    async fn a_version_out_of_range_reads_as_corrupt_not_as_zero(url: &str) {
        let db = with_card(url).await;
        let invocations = DieselInvocationRepository::new(db.clone());
        let cards = DieselCardRepository::new(db.clone());
        let flows = DieselFlowRepository::new(db);
        // Negative on both backends; past i32 where the column holds it (SQLite's INTEGER has
        // 64 bits; PostgreSQL's has 32 and refuses it).
        let mut stored = vec!["-1"];
        if url.starts_with("sqlite://") {
            stored.push("3000000000");
        }
        for v in stored {
            update(
                url,
                &format!("UPDATE invocations SET flow_version = {v} WHERE id = 'inv_1'"),
            );
            assert_corrupt(
                invocations.get("env_a", "inv_1").await,
                "invocation flow version",
            );
            update(
                url,
                &format!("UPDATE card_instances SET flow_version = {v} WHERE id = 'crd_1'"),
            );
            assert_corrupt(cards.get("env_a", "u1", "crd_1").await, "card flow version");
            update(
                url,
                &format!("UPDATE action_flows SET latest_version = {v} WHERE id = 'flw_1'"),
            );
            assert_corrupt(flows.get("env_a", "flw_1").await, "flow latest version");
        }
    }

    async fn a_negative_count_reads_as_corrupt_not_as_zero(url: &str) {
        let db = with_flow(url).await;
        let invocations = DieselInvocationRepository::new(db.clone());
        invocations
            .record(vec![invocation("inv_1", Mode::Live, "fp", false)])
            .await
            .expect("record");
        update(
            url,
            "UPDATE invocations SET users_targeted = -5 WHERE id = 'inv_1'",
        );
        assert_corrupt(
            invocations.get("env_a", "inv_1").await,
            "invocation users targeted",
        );

        let bulk = DieselBulkRepository::new(db.clone());
        let task = BulkTask::new("env_a", "flw_1", Mode::Live, t(1));
        let id = bulk.create(&task).await.expect("bulk task");
        update(
            url,
            &format!("UPDATE bulk_tasks SET rows_total = -1 WHERE id = {id}"),
        );
        assert_corrupt(bulk.get("env_a", id).await, "bulk task rows total");

        let cancels = DieselCancelRepository::new(db);
        let id = "00000000-0000-4000-8000-000000000001";
        let task = CancelTask::new(id.into(), "env_a", "flw_1", CancelFilter::default(), t(2));
        cancels.create(&task).await.expect("cancel task");
        update(
            url,
            &format!("UPDATE cancel_tasks SET actual = -1 WHERE id = '{id}'"),
        );
        assert_corrupt(cancels.get("env_a", id).await, "cancel count");
    }

    async fn numbers_past_their_columns_are_refused_not_clamped(url: &str) {
        let db = with_flow(url).await;
        let invocations = DieselInvocationRepository::new(db.clone());
        // Clamped, it was stored as version i32::MAX: another version than the one run.
        let mut far = invocation("inv_far", Mode::Live, "fp", false);
        far.flow_version = u32::MAX;
        assert_refused(
            invocations.record(vec![far]).await,
            "invocation flow version",
            u64::from(u32::MAX),
        );
        assert_eq!(
            invocations.get("env_a", "inv_far").await.expect("get"),
            None,
            "nothing stored"
        );

        // Stored without its version, a cancel of version 3,000,000,000 cancelled every
        // version's instances.
        let cancels = DieselCancelRepository::new(db.clone());
        let id = "00000000-0000-4000-8000-000000000002";
        let filter = CancelFilter {
            flow_version: Some(3_000_000_000),
            ..CancelFilter::default()
        };
        let task = CancelTask::new(id.into(), "env_a", "flw_1", filter, t(2));
        assert_refused(
            cancels.create(&task).await,
            "cancel flow version",
            3_000_000_000,
        );
        assert_eq!(cancels.get("env_a", id).await.expect("get"), None);

        // Looking a version up writes nothing: no version past the column is stored, so none
        // is found.
        let flows = DieselFlowRepository::new(db);
        assert_eq!(
            flows
                .get_version("flw_1", VersionRef::Number(u32::MAX))
                .await
                .expect("look up"),
            None
        );
    }

    both_backends!(
        a_priority_out_of_range_reads_as_corrupt_not_as_the_default,
        a_version_out_of_range_reads_as_corrupt_not_as_zero,
        a_negative_count_reads_as_corrupt_not_as_zero,
        numbers_past_their_columns_are_refused_not_clamped,
    );
}

/// The backlog `/metrics` reads at each scrape (contract §17): what is counted pending, and how
/// its age is taken, by a clock stopped at a known time (never the host's).
mod backlog {
    use super::Record;
    use std::sync::Arc;

    use adapters_diesel::{
        both_backends, Database, DieselDeviceRepository, DieselHealthProbe,
        DieselInvocationRepository, DieselPushJobRepository, DieselPushPlatformRepository,
        SecretBox,
    };
    use domain::health::{Backlog, Queue};
    use domain::push::PushPlatformRepository;
    use domain::push::{Device, DeviceRepository, PushJobRepository, PushNext, PushRecord};
    use domain::trigger::{Invocation, InvocationRepository, Mode};
    use domain::webhook::{NextStep, WebhookRepository};
    use domain::{HealthProbe, Timestamp};
    use std::time::Duration;

    use super::bulk_cancel_push::{notifying, platform};
    use super::engine::{batch, card, invocation, with_flow};
    use super::t;
    use super::webhooks::{publish_three, record, setup, subscription};

    struct Stopped(Timestamp);

    impl domain::Clock for Stopped {
        fn now(&self) -> Timestamp {
            self.0
        }
    }

    /// The backlog as a probe whose clock reads `t(at)`.
    async fn backlog_at(db: &Database, at: i64) -> Backlog {
        DieselHealthProbe::new(db.clone())
            .with_clock(Arc::new(Stopped(t(at))))
            .backlog()
            .await
            .expect("backlog")
    }

    fn queue(pending: u64, age_seconds: u64) -> Queue {
        Queue {
            pending,
            oldest_age: Duration::from_secs(age_seconds),
        }
    }

    async fn unfinished_invocations_are_counted_and_aged_from_the_oldest_recorded(url: &str) {
        let db = with_flow(url).await;
        assert_eq!(backlog_at(&db, 60).await, Backlog::default(), "nothing yet");
        let repo = DieselInvocationRepository::new(db.clone());
        let recorded = |id: &str, at: i64| Invocation {
            created: t(at),
            updated: t(at),
            ..invocation(id, Mode::Live, &format!("fp-{id}"), false)
        };
        repo.record(vec![
            recorded("inv_1", 2),
            recorded("inv_2", 5),
            recorded("inv_3", 7),
        ])
        .await
        .expect("record");
        assert_eq!(backlog_at(&db, 60).await.invocations, queue(3, 58));
        // Claimed, it runs: still waiting for its end, still the oldest.
        let claimed = repo.claim(t(10), t(40), 1).await.expect("claim");
        assert_eq!(claimed[0].id, "inv_1");
        assert_eq!(backlog_at(&db, 60).await.invocations, queue(3, 58));
        // Run to the end: no longer counted, and the next oldest sets the age.
        repo.save_batches(vec![batch(
            None,
            None,
            vec![card("crd_1", "fin_1", "u1", 5, 3)],
        )])
        .await
        .expect("completed");
        assert_eq!(backlog_at(&db, 60).await.invocations, queue(2, 55));
        // A clock before the oldest (a replica whose time is behind) ages nothing.
        assert_eq!(backlog_at(&db, 1).await.invocations, queue(2, 0));
    }

    async fn deliveries_waiting_for_a_retry_are_counted_but_age_only_once_due(url: &str) {
        let (db, repo) = setup(url).await;
        repo.create(&subscription("whk_1", &["card-published"], None), 100)
            .await
            .expect("subscribe");
        // Three card-published events at t(3), each queued for the subscription.
        publish_three(&db).await;
        let backlog = backlog_at(&db, 60).await;
        assert_eq!(backlog.webhook_deliveries, queue(3, 57));
        assert_eq!(backlog.invocations, queue(0, 0), "run to the end");
        // In hand (leased until t(90)): still pending, no longer waiting.
        let jobs = repo
            .claim(t(30), t(90), 10, vec![], 10)
            .await
            .expect("claim");
        assert_eq!(jobs.len(), 3);
        assert_eq!(backlog_at(&db, 60).await.webhook_deliveries, queue(3, 0));
        // One delivered, one failed for good, one to be tried again at t(120).
        repo.record(vec![
            record(&jobs[0], 200, NextStep::Done),
            record(&jobs[1], 500, NextStep::Failed),
            record(&jobs[2], 503, NextStep::RetryAt(t(120))),
        ])
        .await
        .expect("outcomes");
        assert_eq!(backlog_at(&db, 60).await.webhook_deliveries, queue(1, 0));
        // Once its time has come, it waits, and the age says for how long.
        assert_eq!(backlog_at(&db, 150).await.webhook_deliveries, queue(1, 30));
    }

    async fn pushes_whose_lease_ran_out_are_aged_as_due_again(url: &str) {
        let db = with_flow(url).await;
        let secrets = Arc::new(SecretBox::new(&SecretBox::generate_key(), &[]).expect("key"));
        DieselPushPlatformRepository::new(db.clone(), secrets.clone())
            .insert(&platform("npl_1", true))
            .await
            .expect("FCM app");
        let devices = DieselDeviceRepository::new(db.clone());
        for (user, token) in [("u1", "android-1"), ("u2", "android-2")] {
            devices
                .upsert(&Device {
                    environment_id: "env_a".into(),
                    user_id: user.into(),
                    token: token.into(),
                    app_id: "app".into(),
                    platform: "FCM".into(),
                    created: t(1),
                    updated: t(1),
                })
                .await
                .expect("device");
        }
        let invocations = DieselInvocationRepository::new(db.clone());
        invocations
            .record(vec![invocation("inv_1", Mode::Live, "fp", false)])
            .await
            .expect("record");
        // Two notifying cards published at t(3): a push each.
        invocations
            .save_batches(vec![batch(
                None,
                None,
                vec![notifying("crd_1", "u1"), notifying("crd_2", "u2")],
            )])
            .await
            .expect("batch");
        assert_eq!(backlog_at(&db, 60).await.push_jobs, queue(2, 57));
        let jobs = DieselPushJobRepository::new(db.clone(), secrets);
        let claimed = jobs.claim(t(10), t(40), 10).await.expect("claim");
        assert_eq!(claimed.len(), 2);
        assert_eq!(backlog_at(&db, 30).await.push_jobs, queue(2, 0), "in hand");
        // The holder died: at t(60) both are due again since their lease ended at t(40).
        assert_eq!(backlog_at(&db, 60).await.push_jobs, queue(2, 20));
        let sent = &claimed[0];
        jobs.record(vec![PushRecord {
            job_id: sent.id.clone(),
            environment_id: sent.environment_id.clone(),
            user_id: sent.user_id.clone(),
            token: sent.token.clone(),
            attempt: sent.attempt,
            next: PushNext::Sent,
            status_code: Some(200),
            error: None,
            at: t(20),
            lease: sent.lease_until,
        }])
        .await
        .expect("sent");
        assert_eq!(backlog_at(&db, 60).await.push_jobs, queue(1, 20));
    }

    both_backends!(
        unfinished_invocations_are_counted_and_aged_from_the_oldest_recorded,
        deliveries_waiting_for_a_retry_are_counted_but_age_only_once_due,
        pushes_whose_lease_ran_out_are_aged_as_due_again,
    );
}

/// Contract §11: a flow's invocations and tasks, newest first (by creation time, then by id),
/// narrowed by status and mode, a page at a time after `domain::page::After`; nothing of
/// another flow or environment.
mod lists {
    use super::Record;

    use adapters_diesel::{
        both_backends, DieselBulkRepository, DieselCancelRepository, DieselFlowRepository,
        DieselInvocationRepository,
    };
    use domain::bulk::{BulkRepository, BulkStatus, BulkTask, PublicStatus, RowError};
    use domain::cancel::{CancelFilter, CancelRepository, CancelStatus, CancelTask};
    use domain::page::After;
    use domain::trigger::{InvocationFilter, InvocationRepository, InvocationStatus, Mode};
    use domain::{Flow, FlowRepository};

    use super::engine::{invocation, with_flow};
    use super::t;

    /// `flw_1` of `env_a` (and `flw_2` beside it).
    async fn two_flows(url: &str) -> adapters_diesel::Database {
        let db = with_flow(url).await;
        let flow = Flow::new("flw_2", "env_a", "org_1", "G", t(1));
        DieselFlowRepository::new(db.clone())
            .insert(&flow, None)
            .await
            .expect("flow");
        db
    }

    /// Every page of `limit` of a list, each read after the last item of the one before.
    async fn pages<T, Id, F, Fut>(limit: u32, key: impl Fn(&T) -> After<Id>, read: F) -> Vec<T>
    where
        F: Fn(Option<After<Id>>, u32) -> Fut,
        Fut: std::future::Future<Output = Vec<T>>,
    {
        let mut all: Vec<T> = Vec::new();
        let mut after = None;
        loop {
            let page = read(after, limit).await;
            assert!(page.len() <= limit as usize);
            let Some(last) = page.last() else { break };
            after = Some(key(last));
            let full = page.len() == limit as usize;
            all.extend(page);
            assert!(all.len() < 100, "the pages never end");
            if !full {
                break;
            }
        }
        all
    }

    async fn a_flows_invocations_list_newest_first_by_status_and_mode(url: &str) {
        let db = two_flows(url).await;
        let repo = DieselInvocationRepository::new(db);
        let at = |id: &str, mode: Mode, seconds: i64| {
            let mut i = invocation(id, mode, &format!("fp-{id}"), false);
            (i.created, i.updated) = (t(seconds), t(seconds));
            i
        };
        // Three at one instant (by id, descending), one older, one newer, each recorded alone.
        let mut old = at("i_old", Mode::Live, 2);
        old.status = InvocationStatus::Completed;
        let mut elsewhere = at("i_x", Mode::Live, 7);
        elsewhere.environment_id = "env_b".into();
        let mut other_flow = at("i_y", Mode::Live, 8);
        other_flow.flow_id = "flw_2".into();
        for i in [
            at("i_b", Mode::Test, 5),
            old,
            at("i_c", Mode::Live, 5),
            at("i_new", Mode::Live, 9),
            at("i_a", Mode::Live, 5),
            elsewhere,
            other_flow,
        ] {
            assert_eq!(repo.record(vec![i]).await.expect("record"), [None]);
        }
        let list = |filter: InvocationFilter, after: Option<After<String>>, limit: u32| {
            let repo = &repo;
            async move {
                repo.list("env_a", "flw_1", filter, after, limit)
                    .await
                    .expect("list")
                    .into_iter()
                    .map(|i| i.id)
                    .collect::<Vec<_>>()
            }
        };
        let all = InvocationFilter::default();
        assert_eq!(
            list(all, None, 10).await,
            ["i_new", "i_c", "i_b", "i_a", "i_old"]
        );
        assert_eq!(list(all, None, 2).await, ["i_new", "i_c"]);
        // Page by page, after each page's last invocation: the same list, each once.
        let paged = pages(
            2,
            |i: &domain::trigger::Invocation| After::Item {
                created: i.created,
                id: i.id.as_str().to_owned(),
            },
            |after, limit| {
                let repo = &repo;
                async move {
                    repo.list("env_a", "flw_1", all, after, limit)
                        .await
                        .expect("page")
                }
            },
        )
        .await;
        assert_eq!(
            paged.iter().map(|i| i.id.as_str()).collect::<Vec<_>>(),
            ["i_new", "i_c", "i_b", "i_a", "i_old"]
        );
        assert_eq!(paged[0].mode, Mode::Live, "read back whole");
        assert_eq!(paged[0].created, t(9));
        let at5 = |id: &str| After::Item {
            created: t(5),
            id: id.to_owned(),
        };
        assert_eq!(list(all, Some(at5("i_b")), 10).await, ["i_a", "i_old"]);
        assert_eq!(
            list(all, Some(After::CreatedBefore(t(5))), 10).await,
            ["i_old"]
        );
        assert_eq!(
            list(all, Some(After::CreatedAtOrBefore(t(5))), 10).await,
            ["i_c", "i_b", "i_a", "i_old"]
        );
        // Filters, alone and together.
        let test = InvocationFilter {
            mode: Some(Mode::Test),
            ..all
        };
        assert_eq!(list(test, None, 10).await, ["i_b"]);
        let completed = InvocationFilter {
            status: Some(InvocationStatus::Completed),
            ..all
        };
        assert_eq!(list(completed, None, 10).await, ["i_old"]);
        let pending_live = InvocationFilter {
            status: Some(InvocationStatus::Pending),
            mode: Some(Mode::Live),
        };
        assert_eq!(
            list(pending_live, Some(at5("i_c")), 10).await,
            ["i_a"],
            "filters keep to the page's start"
        );
        // Nothing of another environment or flow.
        let env_b = repo
            .list("env_b", "flw_1", all, None, 10)
            .await
            .expect("env_b");
        assert_eq!(
            env_b.iter().map(|i| i.id.as_str()).collect::<Vec<_>>(),
            ["i_x"]
        );
        let flw_2 = repo
            .list("env_a", "flw_2", all, None, 10)
            .await
            .expect("flw_2");
        assert_eq!(
            flw_2.iter().map(|i| i.id.as_str()).collect::<Vec<_>>(),
            ["i_y"]
        );
        assert!(repo
            .list("env_a", "flw_9", all, None, 10)
            .await
            .expect("none")
            .is_empty());
    }

    async fn a_flows_csv_tasks_list_newest_first_by_the_status_clients_see(url: &str) {
        let db = two_flows(url).await;
        let repo = DieselBulkRepository::new(db);
        let create = |flow: &str, env: &str, seconds: i64| {
            let task = BulkTask::new(env, flow, Mode::Live, t(seconds));
            let repo = &repo;
            async move { repo.create(&task).await.expect("create") }
        };
        // Ids follow creation, times do not: `d` is made before `b` and `c`, but later.
        let a = create("flw_1", "env_a", 1).await;
        let d = create("flw_1", "env_a", 4).await;
        let b = create("flw_1", "env_a", 3).await;
        let c = create("flw_1", "env_a", 3).await;
        let e = create("flw_1", "env_a", 5).await;
        let elsewhere = create("flw_1", "env_b", 6).await;
        let other_flow = create("flw_2", "env_a", 6).await;
        let upload = |id: i64| {
            let repo = &repo;
            async move {
                assert!(repo.begin_upload("env_a", id, t(6)).await.expect("begin"));
                repo.finish_upload("env_a", id, vec!["target.attributes.id".into()], 0, t(6))
                    .await
                    .expect("finish");
            }
        };
        // `d` processing (claimed), `c` uploaded and queued, `b` uploading, `e` failed, `a`
        // pending.
        upload(d).await;
        let claimed = repo.claim(t(7), t(60), 5).await.expect("claim").expect("d");
        assert_eq!(claimed.id, d);
        upload(c).await;
        assert!(repo.begin_upload("env_a", b, t(6)).await.expect("begin"));
        let broken = vec![RowError {
            row: 0,
            message: "broken".into(),
        }];
        assert!(repo
            .fail("env_a", e, broken, t(6), None)
            .await
            .expect("fail"));
        let list = |status: Option<PublicStatus>, after: Option<After<i64>>, limit: u32| {
            let repo = &repo;
            async move {
                repo.list("env_a", "flw_1", status, after, limit)
                    .await
                    .expect("list")
                    .into_iter()
                    .map(|t| t.id)
                    .collect::<Vec<_>>()
            }
        };
        assert_eq!(list(None, None, 10).await, [e, d, c, b, a]);
        let paged = pages(
            2,
            |t: &BulkTask| After::Item {
                created: t.created,
                id: t.id,
            },
            |after, limit| {
                let repo = &repo;
                async move {
                    repo.list("env_a", "flw_1", None, after, limit)
                        .await
                        .expect("page")
                }
            },
        )
        .await;
        assert_eq!(
            paged.iter().map(|t| t.id).collect::<Vec<_>>(),
            [e, d, c, b, a]
        );
        let queued = paged.iter().find(|t| t.id == c).expect("c");
        assert_eq!(
            (queued.status, queued.queued),
            (BulkStatus::Processing, true)
        );
        // As clients see them: uploading and queued tasks are pending.
        assert_eq!(list(Some(PublicStatus::Pending), None, 10).await, [c, b, a]);
        assert_eq!(list(Some(PublicStatus::Processing), None, 10).await, [d]);
        assert_eq!(list(Some(PublicStatus::Failed), None, 10).await, [e]);
        assert!(list(Some(PublicStatus::Completed), None, 10)
            .await
            .is_empty());
        assert_eq!(
            list(
                Some(PublicStatus::Pending),
                Some(After::Item {
                    created: t(3),
                    id: c
                }),
                10
            )
            .await,
            [b, a]
        );
        assert_eq!(list(None, Some(After::CreatedBefore(t(3))), 10).await, [a]);
        assert_eq!(
            list(None, Some(After::CreatedAtOrBefore(t(3))), 10).await,
            [c, b, a]
        );
        // Nothing of another environment or flow.
        let ids = |tasks: Vec<BulkTask>| tasks.into_iter().map(|t| t.id).collect::<Vec<_>>();
        assert_eq!(
            ids(repo
                .list("env_b", "flw_1", None, None, 10)
                .await
                .expect("b")),
            [elsewhere]
        );
        assert_eq!(
            ids(repo
                .list("env_a", "flw_2", None, None, 10)
                .await
                .expect("2")),
            [other_flow]
        );
    }

    async fn a_flows_cancel_tasks_list_newest_first_by_status(url: &str) {
        let db = two_flows(url).await;
        let repo = DieselCancelRepository::new(db);
        let uuid = |n: u8| format!("00000000-0000-4000-8000-0000000000{n:02}");
        let create = |n: u8, env: &str, flow: &str, seconds: i64| {
            let task = CancelTask::new(uuid(n), env, flow, CancelFilter::default(), t(seconds));
            let repo = &repo;
            async move { repo.create(&task).await.expect("create") }
        };
        create(1, "env_a", "flw_1", 2).await;
        create(3, "env_a", "flw_1", 3).await;
        create(2, "env_a", "flw_1", 3).await;
        create(4, "env_b", "flw_1", 4).await;
        create(5, "env_a", "flw_2", 4).await;
        // The oldest is claimed and completed.
        let mut done = repo.claim(t(5), t(60)).await.expect("claim").expect("1");
        assert_eq!(done.id, uuid(1));
        done.status = CancelStatus::Completed;
        assert!(repo.save(&done).await.expect("save"));
        let list = |status: Option<CancelStatus>, after: Option<After<String>>, limit: u32| {
            let repo = &repo;
            async move {
                repo.list("env_a", "flw_1", status, after, limit)
                    .await
                    .expect("list")
                    .into_iter()
                    .map(|t| t.id)
                    .collect::<Vec<_>>()
            }
        };
        assert_eq!(list(None, None, 10).await, [uuid(3), uuid(2), uuid(1)]);
        let paged = pages(
            1,
            |t: &CancelTask| After::Item {
                created: t.created,
                id: t.id.as_str().to_owned(),
            },
            |after, limit| {
                let repo = &repo;
                async move {
                    repo.list("env_a", "flw_1", None, after, limit)
                        .await
                        .expect("page")
                }
            },
        )
        .await;
        assert_eq!(
            paged.iter().map(|t| t.id.clone()).collect::<Vec<_>>(),
            [uuid(3), uuid(2), uuid(1)]
        );
        assert_eq!(
            list(Some(CancelStatus::Completed), None, 10).await,
            [uuid(1)]
        );
        assert_eq!(
            list(Some(CancelStatus::Processing), None, 10).await,
            [uuid(3), uuid(2)]
        );
        assert!(list(Some(CancelStatus::Failed), None, 10).await.is_empty());
        assert_eq!(
            list(None, Some(After::CreatedBefore(t(3))), 10).await,
            [uuid(1)]
        );
        assert_eq!(
            list(None, Some(After::CreatedAtOrBefore(t(3))), 1).await,
            [uuid(3)]
        );
        // Nothing of another environment or flow.
        let ids = |tasks: Vec<CancelTask>| tasks.into_iter().map(|t| t.id).collect::<Vec<_>>();
        assert_eq!(
            ids(repo
                .list("env_b", "flw_1", None, None, 10)
                .await
                .expect("b")),
            [uuid(4)]
        );
        assert_eq!(
            ids(repo
                .list("env_a", "flw_2", None, None, 10)
                .await
                .expect("2")),
            [uuid(5)]
        );
    }

    both_backends!(
        a_flows_invocations_list_newest_first_by_status_and_mode,
        a_flows_csv_tasks_list_newest_first_by_the_status_clients_see,
        a_flows_cancel_tasks_list_newest_first_by_status,
    );
}

// ---- Flow instances (contract §21) ----

mod instances {
    use std::sync::Arc;

    use adapters_diesel::{both_backends, DieselInstanceRepository};
    use chrono::Duration;
    use domain::card::{card_event, CardRepository, CardStatus, Transition};
    use domain::flow::steps::run;
    use domain::flow::steps::{CardClosure, InstanceState, Program, StepState};
    use domain::trigger::instances::{FlowInstance, InstanceAdvance, InstanceRepository};
    use domain::trigger::InvocationRepository;
    use serde_json::{json, Map};

    use adapters_diesel::{DieselCardRepository, DieselInvocationRepository};
    use domain::trigger::Mode;

    use super::engine::{batch, card, invocation, with_flow};
    use super::t;
    use super::Record;

    /// `s1` makes a card; `listen` waits for it (an hour); `pause` waits a minute after `s1`.
    fn program() -> Program {
        Program::parse(&json!({"type": "card", "initialSteps": ["s1"],
            "steps": {
                "s1": {"id": "s1", "type": "create-card", "next": ["pause", "listen"],
                       "properties": {"cardTemplateId": "t"}},
                "pause": {"id": "pause", "type": "wait", "next": [],
                          "properties": {"duration": "PT1M"}},
                "listen": {"id": "listen", "type": "wait-for-card",
                           "properties": {"cardStep": "s1", "timeout": "PT1H",
                                          "on": {"submitted": []}}}
            },
            "cardTemplates": {"t": {"metadata": {"cardName": "T"}}}}))
        .expect("valid")
    }

    /// `inv_1` with one user, `u1`: its card `crd_1` and its instance `fin_1` saved as the
    /// engine saves a batch; the instances' repository.
    async fn started(url: &str) -> (DieselInstanceRepository, Arc<dyn CardRepository>) {
        let (repo, cards, _) = started_with(url, 1).await;
        (repo, cards)
    }

    /// [`started`] with `users` users, `u1` onwards, each with its card `crd_<n>` and its
    /// instance `fin_<n>`; and the database.
    async fn started_with(
        url: &str,
        users: usize,
    ) -> (
        DieselInstanceRepository,
        Arc<dyn CardRepository>,
        adapters_diesel::Database,
    ) {
        let db = with_flow(url).await;
        let invocations = DieselInvocationRepository::new(db.clone());
        invocations
            .record(vec![invocation("inv_1", Mode::Live, "fp", false)])
            .await
            .expect("record");
        let cards = DieselCardRepository::new(db.clone());
        let mut b = batch(None, None, Vec::new());
        for n in 1..=users {
            let card_id = format!("crd_{n}");
            let first = run::start(&program(), &Map::new(), t(0), &mut || card_id.clone());
            let user = format!("u{n}");
            let id = format!("fin_{n}");
            b.cards.push(card(&card_id, &id, &user, 5, 0).into());
            b.instances.push(FlowInstance {
                environment_id: "env_a".into(),
                id,
                invocation_id: "inv_1".into(),
                flow_id: "flw_1".into(),
                flow_version: 1,
                user_id: user,
                state: first.state,
                records: first.records,
                due: first.due,
                revision: 0,
                created: t(0),
                updated: t(0),
            });
        }
        b.users_targeted = users as u64;
        b.cards_created = users as u64;
        assert_eq!(invocations.save_batches(vec![b]).await.expect("save"), 0);
        (
            DieselInstanceRepository::new(db.clone()),
            Arc::new(cards),
            db,
        )
    }

    fn lease() -> Duration {
        Duration::seconds(30)
    }

    /// The instance run on at `at`: its waits that came ended, nothing made.
    fn advanced(mut instance: FlowInstance, at: i64) -> InstanceAdvance {
        let before = (instance.records.clone(), instance.state);
        let on = run::resume(
            &program(),
            &Map::new(),
            instance.records.clone(),
            t(at),
            &|_| None,
            &mut || "crd_x".to_owned(),
        );
        instance.records = on.records;
        instance.state = on.state;
        instance.due = on.due;
        instance.updated = t(at);
        InstanceAdvance {
            instance,
            before,
            invocation_created: t(2),
            cards: Vec::new(),
            events: Vec::new(),
        }
    }

    async fn a_claimed_instance_is_not_claimed_again_while_its_lease_lives(url: &str) {
        let (repo, _) = started(url).await;
        let claim = |at: i64| repo.claim_due(t(at), lease(), 10);
        assert!(claim(59).await.expect("early").is_empty(), "not due yet");
        let first = claim(60).await.expect("due");
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].id, "fin_1");
        assert_eq!(first[0].due, Some(t(60)));
        assert!(
            claim(61).await.expect("held").is_empty(),
            "while its lease lives"
        );
        let again = claim(90).await.expect("taken over");
        assert_eq!(again.len(), 1, "once the lease ran out");
        assert_ne!(again[0].revision, first[0].revision);
        // Nothing of another environment is read through its id.
        assert!(repo
            .get("env_b", "inv_1", "u1")
            .await
            .expect("get")
            .is_none());
        assert!(repo
            .get("env_a", "inv_1", "u1")
            .await
            .expect("get")
            .is_some());
    }

    async fn a_stale_holders_save_changes_nothing(url: &str) {
        let (repo, _) = started(url).await;
        let old = repo
            .claim_due(t(60), lease(), 10)
            .await
            .expect("first")
            .remove(0);
        let new = repo
            .claim_due(t(95), lease(), 10)
            .await
            .expect("second")
            .remove(0);
        assert_eq!(
            repo.advance(vec![advanced(old, 96)]).await.expect("stale"),
            1,
            "the first holder's save is refused"
        );
        let stored = repo
            .get("env_a", "inv_1", "u1")
            .await
            .expect("get")
            .expect("one");
        assert!(matches!(
            stored.records["pause"].state,
            StepState::Waiting { .. }
        ));
        assert_eq!(
            repo.advance(vec![advanced(new, 97)]).await.expect("save"),
            0
        );
        let stored = repo
            .get("env_a", "inv_1", "u1")
            .await
            .expect("get")
            .expect("one");
        assert!(matches!(
            stored.records["pause"].state,
            StepState::Done { .. }
        ));
        assert_eq!(stored.state, InstanceState::Active, "listen still waits");
        assert_eq!(stored.due, Some(t(3600)));
        // Counted once: the stale save added nothing.
        let counts = repo.counts("env_a", "inv_1").await.expect("counts");
        let n = |step: &str, metric: &str| {
            counts
                .iter()
                .find(|(s, m, _)| s == step && m == metric)
                .map_or(0, |(_, _, n)| *n)
        };
        assert_eq!(n("", "active"), 1);
        // `reached` and `done` are not stored: they follow from the rest when read.
        assert_eq!(n("pause", "reached"), 0);
        assert_eq!(n("pause", "waiting"), 0);
        assert_eq!(n("pause", "outcome.elapsed"), 1);
        assert_eq!(n("listen", "waiting"), 1);
        assert!(repo.counts("env_b", "inv_1").await.expect("b").is_empty());
        assert!(
            repo.claim_due(t(98), lease(), 10)
                .await
                .expect("none")
                .is_empty(),
            "a save ends the claim and the instance is due at its next deadline"
        );
    }

    async fn a_card_that_closes_makes_its_instance_due_at_once(url: &str) {
        let (repo, cards) = started(url).await;
        // A holder claims it (the minute's wait), then the card is submitted.
        let held = repo
            .claim_due(t(60), lease(), 10)
            .await
            .expect("claim")
            .remove(0);
        let open = card("crd_1", "fin_1", "u1", 5, 0);
        let submitted = domain::card::CardInstance {
            status: CardStatus::Completed,
            updated: t(61),
            ..open
        };
        let event = card_event(
            Arc::new(submitted),
            Some(CardStatus::Active),
            Some(json!({"rating": 4})),
            t(61),
        );
        let closing = Transition {
            from: CardStatus::Active,
            event,
        };
        assert_eq!(cards.transition(vec![closing]).await.expect("submit"), 1);
        // The holder read the card open: its save is refused.
        assert_eq!(
            repo.advance(vec![advanced(held, 62)]).await.expect("stale"),
            1
        );
        let due = repo
            .claim_due(t(62), lease(), 10)
            .await
            .expect("due at once");
        assert_eq!(
            due.len(),
            1,
            "due when the card closed, not at its deadline"
        );
        assert_eq!(due[0].due, Some(t(61)));
        let closed = repo
            .closed_cards("env_a", vec!["crd_1".into(), "crd_none".into()])
            .await
            .expect("closed");
        assert_eq!(closed.len(), 1);
        assert_eq!(closed[0].1.closure, CardClosure::Submitted);
        assert_eq!(closed[0].1.values.get("rating"), Some(&json!(4)));
        assert!(repo
            .closed_cards("env_b", vec!["crd_1".into()])
            .await
            .expect("other environment")
            .is_empty());
    }

    /// A stored instance that cannot be read back fails alone: the claim goes on without it.
    async fn an_unreadable_instance_fails_alone(url: &str) {
        let (repo, _) = started(url).await;
        adapters_diesel::testing::raw_execute(
            url,
            "UPDATE flow_instances SET steps = '{\"s1\": {\"s\": \"teleported\", \"t\": 0}}'",
        );
        assert!(repo
            .claim_due(t(60), lease(), 10)
            .await
            .expect("claim")
            .is_empty());
        let stored = adapters_diesel::testing::raw_texts(
            url,
            "SELECT status AS v FROM flow_instances WHERE id = 'fin_1'",
        );
        assert_eq!(stored, ["failed"]);
        assert!(repo
            .claim_due(t(90), lease(), 10)
            .await
            .expect("again")
            .is_empty());
        let counts = repo.counts("env_a", "inv_1").await.expect("counts");
        let n = |metric: &str| {
            counts
                .iter()
                .find(|(s, m, _)| s.is_empty() && m == metric)
                .map_or(0, |(_, _, n)| *n)
        };
        assert_eq!((n("active"), n("failed")), (0, 1));
    }

    /// The graph's "waiting now": per step, over the invocations of one version and mode.
    async fn waiting_instances_are_counted_by_step_for_a_flow_version(url: &str) {
        let (repo, _) = started(url).await;
        let waiting = repo
            .waiting("env_a", "flw_1", 1, Mode::Live)
            .await
            .expect("waiting");
        assert_eq!(waiting, [("listen".to_owned(), 1), ("pause".to_owned(), 1)]);
        for (env, version, mode) in [
            ("env_b", 1, Mode::Live),
            ("env_a", 2, Mode::Live),
            ("env_a", 1, Mode::Test),
        ] {
            let none = repo
                .waiting(env, "flw_1", version, mode)
                .await
                .expect("none");
            assert!(none.is_empty(), "{env} v{version} {mode:?}: {none:?}");
        }
        let held = repo
            .claim_due(t(60), lease(), 10)
            .await
            .expect("claim")
            .remove(0);
        assert_eq!(
            repo.advance(vec![advanced(held, 61)]).await.expect("save"),
            0
        );
        let waiting = repo
            .waiting("env_a", "flw_1", 1, Mode::Live)
            .await
            .expect("waiting");
        assert_eq!(
            waiting,
            [("listen".to_owned(), 1)],
            "the minute's wait is over"
        );
    }

    /// A save of many instances while other writers keep asking for the writers' turn (on
    /// SQLite it hands the turn on between its parts): every instance is saved once.
    async fn a_large_save_beside_other_writers_saves_every_instance(url: &str) {
        let users = 450;
        let (repo, _, db) = started_with(url, users).await;
        let claimed = repo.claim_due(t(60), lease(), 1000).await.expect("claim");
        assert_eq!(claimed.len(), users);
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writing = {
            let done = done.clone();
            tokio::spawn(async move {
                let invocations = DieselInvocationRepository::new(db);
                let mut n = 0;
                while !done.load(std::sync::atomic::Ordering::SeqCst) {
                    n += 1;
                    let id = format!("inv_w{n}");
                    invocations
                        .record(vec![invocation(&id, Mode::Live, &id, false)])
                        .await
                        .expect("a writer beside");
                }
                n
            })
        };
        let advances = claimed.into_iter().map(|i| advanced(i, 61)).collect();
        assert_eq!(repo.advance(advances).await.expect("save"), 0, "none stale");
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        assert!(writing.await.expect("writer") > 0);
        let waiting = repo
            .waiting("env_a", "flw_1", 1, Mode::Live)
            .await
            .expect("waiting");
        assert_eq!(waiting, [("listen".to_owned(), users as u64)]);
        assert!(repo
            .claim_due(t(62), lease(), 1000)
            .await
            .expect("claim")
            .is_empty());
    }

    both_backends!(
        a_large_save_beside_other_writers_saves_every_instance,
        waiting_instances_are_counted_by_step_for_a_flow_version,
        a_claimed_instance_is_not_claimed_again_while_its_lease_lives,
        a_stale_holders_save_changes_nothing,
        a_card_that_closes_makes_its_instance_due_at_once,
        an_unreadable_instance_fails_alone,
    );
}

// ---- The console editor's texts ----

mod editor_texts {
    use adapters_diesel::{both_backends, DieselEditorTextRepository};
    use domain::flow::texts::EditorTextRepository;

    async fn a_text_is_kept_per_version_and_replaced_by_the_next_save(url: &str) {
        let repo = DieselEditorTextRepository::new(super::connect(url));
        assert_eq!(repo.get("env_a", "flw_1", 1).await.expect("get"), None);
        let text = "{\n  \"type\": \"card\",\n  \"é\": \"ü\"\n}".to_owned();
        repo.put("env_a", "flw_1", 1, text.clone())
            .await
            .expect("put");
        repo.put("env_a", "flw_1", 2, "{}".into())
            .await
            .expect("put");
        assert_eq!(
            repo.get("env_a", "flw_1", 1).await.expect("get"),
            Some(text)
        );
        repo.put("env_a", "flw_1", 1, "[]".into())
            .await
            .expect("again");
        assert_eq!(
            repo.get("env_a", "flw_1", 1).await.expect("get").as_deref(),
            Some("[]")
        );
        assert_eq!(repo.get("env_b", "flw_1", 1).await.expect("other"), None);
        assert_eq!(
            repo.get("env_a", "flw_1", u32::MAX).await.expect("large"),
            None
        );
        assert!(repo
            .put("env_a", "flw_1", u32::MAX, "{}".into())
            .await
            .is_err());
    }

    both_backends!(a_text_is_kept_per_version_and_replaced_by_the_next_save);
}

// ---- Daily totals read back (contract §14) ----

mod daily_totals {
    use adapters_diesel::{both_backends, DieselStatsRepository};
    use chrono::NaiveDate;
    use domain::stats::{DayRange, StatsRepository, CARD_METRICS};
    use domain::trigger::Mode;

    fn range(version: Option<u32>, metrics: Option<&'static [&'static str]>) -> DayRange {
        DayRange {
            from: NaiveDate::from_ymd_opt(2026, 11, 1).expect("day"),
            to: NaiveDate::from_ymd_opt(2026, 11, 30).expect("day"),
            mode: Mode::Live,
            version,
            metrics,
        }
    }

    async fn a_read_takes_the_metrics_and_version_asked_for(url: &str) {
        let repo = DieselStatsRepository::new(super::connect(url));
        let mut rows = Vec::new();
        for (day, version, metric) in [
            ("2026-11-02", 1, "events.card-published"),
            ("2026-11-02", 1, "steps.ask.reached"),
            ("2026-11-03", 2, "events.card-completed"),
            ("2026-11-03", 2, "cards.created"),
            ("2026-12-01", 2, "events.card-published"),
        ] {
            rows.push(format!(
                "('env_a', 'flw_1', '{day}', {version}, 'fld_1', 'live', '{metric}', 0, 3)"
            ));
        }
        rows.push(
            "('env_b', 'flw_1', '2026-11-02', 1, 'fld_1', 'live', 'cards.created', 0, 9)".into(),
        );
        adapters_diesel::testing::raw_execute(
            url,
            &format!(
                "INSERT INTO flow_totals (environment_id, flow_id, day, flow_version, folder_id, \
                 mode, metric, shard, n) VALUES {}",
                rows.join(", ")
            ),
        );
        let all = repo
            .flow_totals("env_a", "flw_1", range(None, None))
            .await
            .expect("all");
        assert_eq!(all.len(), 4, "the range's days only: {all:?}");
        let cards = repo
            .flow_totals("env_a", "flw_1", range(None, Some(&CARD_METRICS)))
            .await
            .expect("cards");
        let mut metrics: Vec<&str> = cards.iter().map(|t| t.metric.as_str()).collect();
        metrics.sort();
        assert_eq!(metrics, ["events.card-completed", "events.card-published"]);
        let v2 = repo
            .flow_totals("env_a", "flw_1", range(Some(2), Some(&CARD_METRICS)))
            .await
            .expect("v2");
        assert_eq!(v2.len(), 1);
        let folder = repo
            .folder_totals(
                "env_a",
                vec!["fld_1".into()],
                range(None, Some(&CARD_METRICS)),
            )
            .await
            .expect("folder");
        assert_eq!(folder.len(), 2, "{folder:?}");
        let other = repo
            .folder_totals("env_b", vec!["fld_1".into()], range(None, None))
            .await
            .expect("other");
        assert_eq!(other.len(), 1, "env_b's own row only");
    }

    both_backends!(a_read_takes_the_metrics_and_version_asked_for);
}
