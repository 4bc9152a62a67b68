//! The cases of the flow port: round trips, the compare-and-swap of `save` and its races,
//! lists and their filters, and folders of the flow's own environment.

use std::sync::Arc;

use futures_util::future::join_all;
use serde_json::json;

use super::fixtures::{flow, folder, t, version, Stores};
use crate::flow::{FlowFilter, FlowStatus, FolderFilter, VersionChange, VersionRef, VersionStatus};
use crate::id::FlowId;
use crate::{Flow, FlowRepository, FlowVersion, PageRequest, StorageError};

pub(super) async fn flows_round_trip(s: Stores) {
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

pub(super) async fn compare_and_swap(s: Stores) {
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

pub(super) async fn next_revision(s: Stores) {
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

pub(super) async fn racing_saves(s: Stores) {
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

pub(super) async fn list_filters(s: Stores) {
    let repo = store_flows_to_list(s).await;
    filters_combine(&*repo).await;
    pages_follow_newest_first(&*repo).await;
}

/// Four flows of `env_a` (two in folder `fld_1`, one published, one archived, one published
/// with a name holding SQL wildcards) and one of `env_b`.
async fn store_flows_to_list(s: Stores) -> Arc<dyn FlowRepository> {
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
    repo
}

/// The ids of a list's flows, in the order listed.
fn ids(found: Vec<Flow>) -> Vec<FlowId> {
    found.into_iter().map(|f| f.id).collect()
}

/// A page of at most `limit` flows after `after`.
fn page(limit: u32, after: Option<&str>) -> PageRequest {
    PageRequest {
        limit,
        after: after.map(Into::into),
    }
}

/// Name, status and folder filters, alone and together, over the flows of
/// [`store_flows_to_list`].
async fn filters_combine(repo: &dyn FlowRepository) {
    let list = |filter: FlowFilter| async move {
        let found = repo.list("env_a", &filter, &page(10, None)).await;
        ids(found.expect("list"))
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
}

/// Pages of two, newest first, each after the last id of the one before.
async fn pages_follow_newest_first(repo: &dyn FlowRepository) {
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

pub(super) async fn filed_in_environment(s: Stores) {
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
