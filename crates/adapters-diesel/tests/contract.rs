//! Repository contract tests: every test body runs on SQLite and on PostgreSQL
//! (`sqlite::name`, `postgres::name`), each on its own fresh database.

use adapters_diesel::{
    both_backends, Database, DieselFolderRepository, DieselHealthProbe, DieselTenancyRepository,
};
use chrono::{Duration, TimeZone, Utc};
use domain::secret::SecretHash;
use domain::{
    AccessTokenGrant, ApiKey, Environment, EnvironmentGrant, Folder, FolderRepository, HealthProbe,
    KeyAccess, Organisation, Role, Scope, StorageError, TenancyRepository, Timestamp,
};

fn t(seconds: i64) -> Timestamp {
    Utc.with_ymd_and_hms(2026, 11, 22, 10, 0, 0)
        .single()
        .expect("time")
        + Duration::milliseconds(seconds * 1000 + 123)
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

fn folder(id: &str, env: &str, parent: Option<&str>, name: &str) -> Folder {
    Folder {
        id: id.into(),
        name: name.into(),
        environment_id: env.into(),
        organisation_id: "org_1".into(),
        parent_id: parent.map(Into::into),
        created: t(3),
        updated: t(3),
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
                organisation_id: o.id.clone(),
                ..env(&format!("env_{i}"), "", "development")
            };
            let k = ApiKey {
                organisation_id: o.id.clone(),
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

async fn folders_round_trip_and_stay_in_their_environment(url: &str) {
    let (db, _) = seeded(url).await;
    let repo = DieselFolderRepository::new(db);
    let root = folder("fld_1", "env_a", None, "Campaigns");
    let child = folder("fld_2", "env_a", Some("fld_1"), "Q4");
    repo.insert(&root).await.expect("root");
    repo.insert(&child).await.expect("child");
    repo.insert(&folder("fld_3", "env_b", None, "Campaigns"))
        .await
        .expect("same name, other env");
    assert_eq!(
        repo.get("env_a", "fld_2").await.expect("get"),
        Some(child.clone())
    );
    assert_eq!(
        repo.get("env_b", "fld_1").await.expect("get"),
        None,
        "invisible from another environment"
    );
    let mut ids: Vec<_> = repo
        .list("env_a")
        .await
        .expect("list")
        .into_iter()
        .map(|f| f.id)
        .collect();
    ids.sort();
    assert_eq!(ids, ["fld_1", "fld_2"]);
    assert!(repo.has_children("env_a", "fld_1").await.expect("children"));
    assert!(!repo.has_children("env_a", "fld_2").await.expect("children"));
    assert!(!repo.has_children("env_b", "fld_1").await.expect("children"));
}

async fn sibling_names_are_unique_by_exact_match_including_roots(url: &str) {
    let (db, _) = seeded(url).await;
    let repo = DieselFolderRepository::new(db);
    repo.insert(&folder("fld_1", "env_a", None, "Sales"))
        .await
        .expect("root");
    assert!(matches!(
        repo.insert(&folder("fld_2", "env_a", None, "Sales")).await,
        Err(StorageError::UniqueViolation(_))
    ));
    repo.insert(&folder("fld_3", "env_a", None, "sales"))
        .await
        .expect("case differs");
    repo.insert(&folder("fld_4", "env_a", Some("fld_1"), "Sales"))
        .await
        .expect("other parent");
    assert!(matches!(
        repo.insert(&folder("fld_5", "env_a", Some("fld_1"), "Sales"))
            .await,
        Err(StorageError::UniqueViolation(_))
    ));
    assert!(matches!(
        repo.rename("env_a", "fld_3", "Sales", t(9)).await,
        Err(StorageError::UniqueViolation(_))
    ));
}

async fn a_parent_must_exist_in_the_same_environment(url: &str) {
    let (db, _) = seeded(url).await;
    let repo = DieselFolderRepository::new(db);
    repo.insert(&folder("fld_1", "env_a", None, "A"))
        .await
        .expect("root");
    assert!(matches!(
        repo.insert(&folder("fld_2", "env_b", Some("fld_1"), "B"))
            .await,
        Err(StorageError::ForeignKeyViolation(_))
    ));
    assert!(matches!(
        repo.insert(&folder("fld_3", "env_a", Some("fld_missing"), "C"))
            .await,
        Err(StorageError::ForeignKeyViolation(_))
    ));
}

async fn rename_updates_name_and_time_only(url: &str) {
    let (db, _) = seeded(url).await;
    let repo = DieselFolderRepository::new(db);
    repo.insert(&folder("fld_1", "env_a", None, "Old"))
        .await
        .expect("root");
    let renamed = repo
        .rename("env_a", "fld_1", "New", t(50))
        .await
        .expect("rename")
        .expect("found");
    assert_eq!(
        renamed,
        Folder {
            name: "New".into(),
            updated: t(50),
            ..folder("fld_1", "env_a", None, "")
        }
    );
    assert_eq!(
        repo.rename("env_b", "fld_1", "X", t(60))
            .await
            .expect("rename"),
        None
    );
    assert_eq!(
        repo.rename("env_a", "fld_nope", "X", t(60))
            .await
            .expect("rename"),
        None
    );
}

async fn delete_refuses_parents_and_removes_leaves(url: &str) {
    let (db, _) = seeded(url).await;
    let repo = DieselFolderRepository::new(db);
    repo.insert(&folder("fld_1", "env_a", None, "A"))
        .await
        .expect("root");
    repo.insert(&folder("fld_2", "env_a", Some("fld_1"), "B"))
        .await
        .expect("child");
    assert!(matches!(
        repo.delete_and_unfile_flows("env_a", "fld_1").await,
        Err(StorageError::ForeignKeyViolation(_))
    ));
    assert!(!repo
        .delete_and_unfile_flows("env_b", "fld_2")
        .await
        .expect("other env"));
    assert!(repo
        .delete_and_unfile_flows("env_a", "fld_2")
        .await
        .expect("leaf"));
    assert!(repo
        .delete_and_unfile_flows("env_a", "fld_1")
        .await
        .expect("now a leaf"));
    assert!(repo.list("env_a").await.expect("list").is_empty());
}

both_backends!(
    migrations_apply_once_and_readiness_reports_them,
    organisations_and_environments_round_trip,
    keys_round_trip_with_roles_scopes_and_grants,
    a_key_granted_an_unknown_environment_is_refused_whole,
    revoking_a_key_kills_its_tokens,
    expired_tokens_are_swept_when_new_ones_are_issued,
    bootstrap_happens_once_even_when_racing,
    folders_round_trip_and_stay_in_their_environment,
    sibling_names_are_unique_by_exact_match_including_roots,
    a_parent_must_exist_in_the_same_environment,
    rename_updates_name_and_time_only,
    delete_refuses_parents_and_removes_leaves,
);
