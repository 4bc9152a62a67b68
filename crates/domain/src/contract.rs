//! The contract of the folder, flow and settings ports, as executable cases (feature
//! `contract`). Every implementation runs them: the SQLite and PostgreSQL adapters in their
//! contract tests, and [`MemoryStore`](crate::memory::MemoryStore) in this crate's.
//!
//! What the cases hold an implementation to:
//! - every read and write is scoped to its environment: another environment's folder or flow
//!   is invisible, and is not a valid parent or folder to file in;
//! - sibling folder names are unique by exact match (roots are siblings too): a clash is
//!   [`StorageError::UniqueViolation`];
//! - a parent or folder that does not exist in the environment is
//!   [`StorageError::ForeignKeyViolation`], and so is deleting a folder that has sub-folders;
//! - deleting a folder un-files its flows in the same transaction;
//! - [`FlowRepository::save`] is a compare-and-swap on `revision`: a stale one is
//!   [`StorageError::StaleRevision`] and changes nothing, not even the version rows; of racing
//!   saves on one revision exactly one wins;
//! - lists come newest first (by id, descending), after the cursor, at most `limit + 1`;
//! - settings default to off and are kept per environment.
//!
//! ```
//! use std::sync::Arc;
//! use workbench_domain::contract::{check, Stores};
//! use workbench_domain::memory::MemoryStore;
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! check(|| async {
//!     let store = Arc::new(MemoryStore::new());
//!     let stores = Stores { folders: store.clone(), flows: store.clone(), settings: store };
//!     (stores, ())
//! })
//! .await;
//! # });
//! ```

use std::future::Future;
use std::sync::Arc;

use chrono::{Duration, TimeZone, Utc};
use futures_util::future::{join_all, BoxFuture, FutureExt};
use serde_json::json;

use crate::flow::{
    EnvironmentSettings, FlowFilter, FlowStatus, FolderFilter, SettingsRepository, VersionChange,
    VersionRef, VersionStatus,
};
use crate::{
    Flow, FlowRepository, FlowVersion, Folder, FolderRepository, PageRequest, StorageError,
    Timestamp,
};

/// The ports under test, fresh for each case: environments `env_a` and `env_b` of
/// organisation `org_1` exist (where the store keeps environments), with no folders, flows or
/// settings yet.
pub struct Stores {
    /// The folder port.
    pub folders: Arc<dyn FolderRepository>,
    /// The flow port, over the same data as `folders` (deleting a folder un-files flows).
    pub flows: Arc<dyn FlowRepository>,
    /// The settings port.
    pub settings: Arc<dyn SettingsRepository>,
}

type Case = fn(Stores) -> BoxFuture<'static, ()>;

/// Every case, by name.
pub const CASES: &[(&str, Case)] = &[
    ("folders_round_trip_and_stay_in_their_environment", |s| {
        folders_round_trip(s).boxed()
    }),
    (
        "sibling_names_are_unique_by_exact_match_including_roots",
        |s| sibling_names_unique(s).boxed(),
    ),
    ("a_parent_must_exist_in_the_same_environment", |s| {
        parent_in_environment(s).boxed()
    }),
    ("rename_updates_name_and_time_only", |s| rename(s).boxed()),
    ("delete_refuses_parents_and_removes_leaves", |s| {
        delete(s).boxed()
    }),
    ("flows_and_versions_round_trip", |s| {
        flows_round_trip(s).boxed()
    }),
    ("save_is_a_compare_and_swap_with_its_version_change", |s| {
        compare_and_swap(s).boxed()
    }),
    (
        "a_save_writes_the_next_revision_whatever_the_flow_says",
        |s| next_revision(s).boxed(),
    ),
    ("racing_saves_on_one_revision_let_exactly_one_win", |s| {
        racing_saves(s).boxed()
    }),
    ("list_filters_combine_and_pages_follow_newest_first", |s| {
        list_filters(s).boxed()
    }),
    (
        "deleting_a_folder_unfiles_its_flows_in_the_same_transaction",
        |s| unfile(s).boxed(),
    ),
    (
        "a_flow_can_only_be_filed_in_a_folder_of_its_environment",
        |s| filed_in_environment(s).boxed(),
    ),
    ("settings_default_off_and_upsert", |s| settings(s).boxed()),
];

/// Runs every case on stores from `fresh`, a new set for each case. `fresh` also returns a
/// guard kept until its case ends (a temporary database, say). A failing case panics; the
/// name of each case is printed to standard error before it runs.
pub async fn check<G, F, Fut>(fresh: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = (Stores, G)>,
{
    for (name, case) in CASES {
        let (stores, guard) = fresh().await;
        eprintln!("port contract: {name}");
        case(stores).await;
        drop(guard);
    }
}

fn t(seconds: i64) -> Timestamp {
    let base = Utc
        .with_ymd_and_hms(2026, 11, 22, 10, 0, 0)
        .single()
        .unwrap_or_default();
    base + Duration::milliseconds(seconds * 1000 + 123)
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

fn flow(id: &str, env: &str, name: &str) -> Flow {
    Flow {
        description: "about".into(),
        ..Flow::new(id, env, "org_1", name, t(5))
    }
}

fn version(flow: &str, n: u32, status: VersionStatus) -> FlowVersion {
    FlowVersion {
        flow_id: flow.into(),
        version: n,
        status,
        config: json!({"type": "card", "n": n, "unknown": {"kept": [1, 2]}}),
        created_by: "key_1".into(),
        approved_by: Some("key_2".into()),
        approved: Some(t(6)),
        published: (status == VersionStatus::Published).then(|| t(7)),
        created: t(6),
        updated: t(6),
    }
}

async fn folders_round_trip(s: Stores) {
    let repo = s.folders;
    let root = folder("fld_1", "env_a", None, "Campaigns");
    let child = folder("fld_2", "env_a", Some("fld_1"), "Q4");
    repo.insert(&root).await.expect("root");
    repo.insert(&child).await.expect("child");
    repo.insert(&folder("fld_3", "env_b", None, "Campaigns"))
        .await
        .expect("same name, other env");
    assert_eq!(repo.get("env_a", "fld_2").await.expect("get"), Some(child));
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

async fn sibling_names_unique(s: Stores) {
    let repo = s.folders;
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

async fn parent_in_environment(s: Stores) {
    let repo = s.folders;
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

async fn rename(s: Stores) {
    let repo = s.folders;
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

async fn delete(s: Stores) {
    let repo = s.folders;
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

async fn flows_round_trip(s: Stores) {
    let repo = s.flows;
    let mut f = Flow {
        latest_version: 1,
        draft_version: Some(1),
        ..flow("flw_1", "env_a", "Welcome")
    };
    f.variables.insert("name".into(), json!({"type": "string"}));
    let v1 = version("flw_1", 1, VersionStatus::Draft);
    repo.insert(&f, Some(v1.clone())).await.expect("insert");
    assert_eq!(repo.get("env_a", "flw_1").await.expect("get"), Some(f));
    assert_eq!(
        repo.get("env_b", "flw_1").await.expect("get"),
        None,
        "invisible from another environment"
    );
    let read = |n| repo.get_version("flw_1", n);
    assert_eq!(
        read(VersionRef::Number(1)).await.expect("v1"),
        Some(v1.clone())
    );
    assert_eq!(read(VersionRef::Latest).await.expect("latest"), Some(v1));
    assert_eq!(read(VersionRef::Number(2)).await.expect("v2"), None);
    assert_eq!(
        repo.get_version("flw_none", VersionRef::Latest)
            .await
            .expect("none"),
        None
    );
}

async fn compare_and_swap(s: Stores) {
    let repo = s.flows;
    let f = Flow {
        latest_version: 1,
        draft_version: Some(1),
        ..flow("flw_1", "env_a", "Welcome")
    };
    repo.insert(&f, Some(version("flw_1", 1, VersionStatus::Draft)))
        .await
        .expect("insert");

    let published = Flow {
        published_version: Some(1),
        draft_version: None,
        revision: 1,
        updated: t(9),
        ..f.clone()
    };
    let v1 = FlowVersion {
        status: VersionStatus::Published,
        published: Some(t(9)),
        ..version("flw_1", 1, VersionStatus::Draft)
    };
    repo.save(&published, 0, VersionChange::Update(v1.clone()))
        .await
        .expect("publish draft");
    assert_eq!(
        repo.get("env_a", "flw_1").await.expect("get"),
        Some(published.clone())
    );
    let read = |n| repo.get_version("flw_1", n);
    assert_eq!(read(VersionRef::Number(1)).await.expect("v1"), Some(v1));

    // A save from a stale read changes nothing, not even the version rows.
    let stale = Flow {
        latest_version: 2,
        revision: 1,
        ..f.clone()
    };
    let insert_2 = VersionChange::Insert(version("flw_1", 2, VersionStatus::Published));
    assert_eq!(
        repo.save(&stale, 0, insert_2).await,
        Err(StorageError::StaleRevision)
    );
    assert_eq!(read(VersionRef::Number(2)).await.expect("v2"), None);
    assert_eq!(
        repo.get("env_a", "flw_1").await.expect("get"),
        Some(published.clone())
    );

    let next = Flow {
        latest_version: 2,
        draft_version: Some(2),
        revision: 2,
        ..published
    };
    let draft_2 = VersionChange::Insert(version("flw_1", 2, VersionStatus::Draft));
    repo.save(&next, 1, draft_2).await.expect("draft 2");
    let discarded = Flow {
        draft_version: None,
        revision: 3,
        ..next
    };
    repo.save(&discarded, 2, VersionChange::Delete(2))
        .await
        .expect("discard");
    let latest = read(VersionRef::Latest).await.expect("latest");
    assert_eq!(latest.map(|v| v.version), Some(1));
}

async fn next_revision(s: Stores) {
    let repo = s.flows;
    repo.insert(&flow("flw_1", "env_a", "Rev"), None)
        .await
        .expect("insert");
    // Saved with the revision it was read at: the store writes the next one.
    let renamed = Flow {
        name: "Renamed".into(),
        ..flow("flw_1", "env_a", "")
    };
    repo.save(&renamed, 0, VersionChange::None)
        .await
        .expect("save");
    let stored = repo
        .get("env_a", "flw_1")
        .await
        .expect("get")
        .expect("stored");
    assert_eq!((stored.revision, stored.name.as_str()), (1, "Renamed"));
    assert_eq!(
        repo.save(&renamed, 0, VersionChange::None).await,
        Err(StorageError::StaleRevision),
        "the same read cannot be saved twice"
    );
    // An update of a version that is not stored changes nothing.
    let missing = VersionChange::Update(version("flw_1", 7, VersionStatus::Draft));
    repo.save(&stored, 1, missing).await.expect("save");
    assert_eq!(
        repo.get_version("flw_1", VersionRef::Number(7))
            .await
            .expect("v7"),
        None
    );
}

async fn racing_saves(s: Stores) {
    let repo = s.flows;
    repo.insert(&flow("flw_1", "env_a", "Race"), None)
        .await
        .expect("insert");
    let saves = (0..8).map(|i| {
        let repo = repo.clone();
        async move {
            let next = Flow {
                latest_version: 1,
                published_version: Some(1),
                revision: 1,
                name: format!("winner {i}"),
                ..flow("flw_1", "env_a", "")
            };
            let first = VersionChange::Insert(version("flw_1", 1, VersionStatus::Published));
            repo.save(&next, 0, first).await
        }
    });
    let mut won = 0;
    for outcome in join_all(saves).await {
        match outcome {
            Ok(()) => won += 1,
            Err(StorageError::StaleRevision) | Err(StorageError::UniqueViolation(_)) => {}
            Err(other) => panic!("{other:?}"),
        }
    }
    assert_eq!(won, 1);
    let after = repo.get("env_a", "flw_1").await.expect("get");
    assert_eq!(after.map(|f| f.revision), Some(1));
}

async fn list_filters(s: Stores) {
    s.folders
        .insert(&folder("fld_1", "env_a", None, "F"))
        .await
        .expect("folder");
    let repo = s.flows;
    let flows = [
        Flow {
            folder_id: Some("fld_1".into()),
            ..flow("flw_01", "env_a", "Welcome Über")
        },
        Flow {
            published_version: Some(1),
            latest_version: 1,
            ..flow("flw_02", "env_a", "welcome back")
        },
        Flow {
            archived: true,
            published_version: Some(1),
            latest_version: 1,
            ..flow("flw_03", "env_a", "WELCOME old")
        },
        Flow {
            folder_id: Some("fld_1".into()),
            published_version: Some(2),
            latest_version: 2,
            ..flow("flw_04", "env_a", "Receipt 50%_off")
        },
        flow("flw_05", "env_b", "Welcome elsewhere"),
    ];
    for f in &flows {
        repo.insert(f, None).await.expect("insert");
    }
    let ids = |found: Vec<Flow>| found.into_iter().map(|f| f.id).collect::<Vec<_>>();
    let page = |limit, after: Option<&str>| PageRequest {
        limit,
        after: after.map(Into::into),
    };
    let list = |filter: FlowFilter| {
        let repo = &repo;
        async move {
            let found = repo.list("env_a", &filter, &page(10, None)).await;
            ids(found.expect("list"))
        }
    };
    assert_eq!(
        list(FlowFilter::default()).await,
        ["flw_04", "flw_03", "flw_02", "flw_01"]
    );
    let named = |n: &str| FlowFilter {
        name_contains: Some(n.into()),
        ..Default::default()
    };
    assert_eq!(list(named("welcome")).await, ["flw_03", "flw_02", "flw_01"]);
    assert_eq!(
        list(named("über")).await,
        ["flw_01"],
        "the service folds case, the store compares folded names"
    );
    assert_eq!(
        list(named("50%_")).await,
        ["flw_04"],
        "wildcards are literal"
    );
    assert_eq!(list(named("%")).await, ["flw_04"]);
    let status = |s| FlowFilter {
        status: Some(s),
        ..Default::default()
    };
    assert_eq!(
        list(status(FlowStatus::Published)).await,
        ["flw_04", "flw_02"]
    );
    assert_eq!(list(status(FlowStatus::Draft)).await, ["flw_01"]);
    assert_eq!(list(status(FlowStatus::Archived)).await, ["flw_03"]);
    let both = FlowFilter {
        status: Some(FlowStatus::Published),
        ..named("welcome")
    };
    assert_eq!(list(both).await, ["flw_02"]);
    let in_folder = |f| FlowFilter {
        folder: Some(f),
        ..Default::default()
    };
    assert_eq!(
        list(in_folder(FolderFilter::In("fld_1".into()))).await,
        ["flw_04", "flw_01"]
    );
    assert_eq!(
        list(in_folder(FolderFilter::Uncategorized)).await,
        ["flw_03", "flw_02"]
    );

    let all = FlowFilter::default();
    let first = repo.list("env_a", &all, &page(2, None)).await;
    assert_eq!(
        ids(first.expect("page 1")),
        ["flw_04", "flw_03", "flw_02"],
        "limit + 1 rows tell that more follow"
    );
    let second = repo.list("env_a", &all, &page(2, Some("flw_03"))).await;
    assert_eq!(ids(second.expect("page 2")), ["flw_02", "flw_01"]);
}

async fn unfile(s: Stores) {
    s.folders
        .insert(&folder("fld_1", "env_a", None, "F"))
        .await
        .expect("folder");
    let filed = Flow {
        folder_id: Some("fld_1".into()),
        ..flow("flw_1", "env_a", "Filed")
    };
    s.flows.insert(&filed, None).await.expect("flow");
    assert!(s
        .folders
        .delete_and_unfile_flows("env_a", "fld_1")
        .await
        .expect("delete"));
    let after = s.flows.get("env_a", "flw_1").await.expect("get");
    assert_eq!(after.expect("the flow stays").folder_id, None);
}

async fn filed_in_environment(s: Stores) {
    s.folders
        .insert(&folder("fld_b", "env_b", None, "B"))
        .await
        .expect("folder");
    let foreign = Flow {
        folder_id: Some("fld_b".into()),
        ..flow("flw_1", "env_a", "X")
    };
    assert!(matches!(
        s.flows.insert(&foreign, None).await,
        Err(StorageError::ForeignKeyViolation(_))
    ));
    // Nor filed there by a save, which then changes nothing.
    s.flows
        .insert(&flow("flw_2", "env_a", "Y"), None)
        .await
        .expect("flow");
    let moved = Flow {
        folder_id: Some("fld_b".into()),
        ..flow("flw_2", "env_a", "Y")
    };
    assert!(matches!(
        s.flows.save(&moved, 0, VersionChange::None).await,
        Err(StorageError::ForeignKeyViolation(_))
    ));
    let stored = s
        .flows
        .get("env_a", "flw_2")
        .await
        .expect("get")
        .expect("stored");
    assert_eq!((stored.folder_id, stored.revision), (None, 0));
}

async fn settings(s: Stores) {
    let repo = s.settings;
    let set = |on| EnvironmentSettings {
        approvals_enabled: on,
    };
    assert_eq!(repo.get("env_a").await.expect("get"), set(false));
    repo.put("env_a", set(true), t(1)).await.expect("insert");
    assert!(repo.get("env_a").await.expect("get").approvals_enabled);
    assert!(
        !repo.get("env_b").await.expect("get").approvals_enabled,
        "per environment"
    );
    repo.put("env_a", set(false), t(2)).await.expect("update");
    assert!(!repo.get("env_a").await.expect("get").approvals_enabled);
}
