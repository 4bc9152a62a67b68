//! The cases of the folder port: environments, sibling names, parents, rename and delete, and
//! the flows a deleted folder un-files.

use super::fixtures::{flow, folder, t, Stores};
use crate::{Flow, Folder, StorageError};

pub(super) async fn folders_round_trip(s: Stores) {
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

pub(super) async fn sibling_names_unique(s: Stores) {
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

pub(super) async fn parent_in_environment(s: Stores) {
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

pub(super) async fn rename(s: Stores) {
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

pub(super) async fn delete(s: Stores) {
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

pub(super) async fn unfile(s: Stores) {
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
