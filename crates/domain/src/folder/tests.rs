use std::sync::Arc;

use mockall::predicate::{always, eq};

use super::*;
use crate::tenancy::{KeyAccess, Role, Scope};
use crate::testing::{caller, clock, t0};
use crate::ConflictKind;

const ENV: &str = "env_1";

fn principal(scopes: &[Scope]) -> Principal {
    caller(ENV, KeyAccess::Scopes(scopes.to_vec()))
}

fn all_folder_scopes() -> Principal {
    principal(&[
        Scope::WorkbenchFoldersRead,
        Scope::WorkbenchFoldersCreate,
        Scope::WorkbenchFoldersUpdate,
        Scope::WorkbenchFoldersDelete,
    ])
}

fn folder(id: &str, name: &str, parent: Option<&str>) -> Folder {
    Folder {
        id: id.into(),
        name: name.into(),
        environment_id: ENV.into(),
        organisation_id: "org_1".into(),
        parent_id: parent.map(Into::into),
        created: t0(),
        updated: t0(),
    }
}

fn service(repo: MockFolderRepository) -> FolderService {
    FolderService::new(Arc::new(repo), clock())
}

fn fields(err: DomainError) -> Vec<String> {
    match err {
        DomainError::Validation(errors) => errors.into_iter().map(|e| e.field).collect(),
        other => panic!("expected a validation error, got {other:?}"),
    }
}

// ---- name rules ----

#[test]
fn names_accept_letters_digits_hyphen_underscore_space_in_any_script() {
    for name in [
        "Q4",
        "Sales team",
        "a-b_c",
        "Café",
        "日本語 フォルダ",
        "٣٤",
        "x",
    ] {
        assert!(
            validate_name("name", name).is_empty(),
            "{name} should be valid"
        );
    }
    assert!(validate_name("name", &"a".repeat(255)).is_empty());
    assert!(
        validate_name("name", &"é".repeat(255)).is_empty(),
        "length counts characters, not bytes"
    );
}

#[test]
fn names_reject_empty_too_long_punctuation_and_edge_spaces() {
    assert_eq!(validate_name("name", "").len(), 1);
    assert_eq!(validate_name("name", &"a".repeat(256)).len(), 1);
    for name in ["a/b", "a.b", "emoji 🎉", "tab\there", "new\nline", "50%"] {
        let errors = validate_name("name", name);
        assert_eq!(errors.len(), 1, "{name:?}: {errors:?}");
        assert!(errors[0].message.contains("only letters"), "{name:?}");
    }
    assert_eq!(validate_name("name", " lead").len(), 1);
    assert_eq!(validate_name("name", "trail ").len(), 1);
    assert_eq!(validate_name("name", "   ").len(), 1);
}

#[test]
fn names_report_every_problem_at_once() {
    let long_and_bad = format!("{}!", "a".repeat(300));
    assert_eq!(validate_name("name", &long_and_bad).len(), 2);
}

// ---- authorization ----

#[tokio::test]
async fn every_operation_checks_its_scope_before_touching_storage() {
    let svc = service(MockFolderRepository::new()); // any storage call would panic
    let read_only = principal(&[Scope::WorkbenchFoldersRead]);
    let create = CreateFolder {
        name: "x".into(),
        parent_id: None,
    };
    let rename = RenameFolder {
        name: "x".into(),
        parent_id: None,
    };
    assert!(matches!(
        svc.create(&read_only, &EnvironmentId::from(ENV), create)
            .await,
        Err(DomainError::Forbidden(_))
    ));
    assert!(matches!(
        svc.rename(
            &read_only,
            &EnvironmentId::from(ENV),
            &FolderId::from("fld_1"),
            rename
        )
        .await,
        Err(DomainError::Forbidden(_))
    ));
    assert!(matches!(
        svc.delete(
            &read_only,
            &EnvironmentId::from(ENV),
            &FolderId::from("fld_1")
        )
        .await,
        Err(DomainError::Forbidden(_))
    ));
    let no_read = principal(&[Scope::WorkbenchFoldersCreate]);
    assert!(matches!(
        svc.list(&no_read, &EnvironmentId::from(ENV)).await,
        Err(DomainError::Forbidden(_))
    ));
    assert!(matches!(
        svc.get(
            &no_read,
            &EnvironmentId::from(ENV),
            &FolderId::from("fld_1")
        )
        .await,
        Err(DomainError::Forbidden(_))
    ));
}

#[tokio::test]
async fn legacy_keys_are_refused_and_other_environments_are_unauthenticated() {
    let svc = service(MockFolderRepository::new());
    let legacy = Principal {
        access: KeyAccess::Roles(vec![Role::Events, Role::Workbench, Role::Auth]),
        ..all_folder_scopes()
    };
    assert!(matches!(
        svc.list(&legacy, &EnvironmentId::from(ENV)).await,
        Err(DomainError::Forbidden(_))
    ));
    assert!(matches!(
        svc.list(&all_folder_scopes(), &EnvironmentId::from("env_other"))
            .await,
        Err(DomainError::Unauthenticated)
    ));
}

// ---- list / get ----

#[tokio::test]
async fn list_sorts_by_name_case_insensitively_with_a_total_order() {
    let mut repo = MockFolderRepository::new();
    repo.expect_list().with(eq(ENV)).returning(|_| {
        Ok(vec![
            folder("fld_3", "beta", None),
            folder("fld_1", "Alpha", Some("fld_2")),
            folder("fld_2", "alpha", None),
            folder("fld_0", "Gamma", None),
        ])
    });
    let names: Vec<_> = service(repo)
        .list(&all_folder_scopes(), &EnvironmentId::from(ENV))
        .await
        .expect("list")
        .into_iter()
        .map(|f| f.id)
        .collect();
    assert_eq!(names, ["fld_1", "fld_2", "fld_3", "fld_0"]);
}

#[tokio::test]
async fn get_of_unknown_folder_is_not_found() {
    let mut repo = MockFolderRepository::new();
    repo.expect_get().returning(|_, _| Ok(None));
    let err = service(repo)
        .get(
            &all_folder_scopes(),
            &EnvironmentId::from(ENV),
            &FolderId::from("fld_x"),
        )
        .await
        .expect_err("missing");
    assert!(matches!(err, DomainError::NotFound(Resource::Folder)));
}

// ---- create ----

#[tokio::test]
async fn create_root_folder_stores_a_new_record() {
    let mut repo = MockFolderRepository::new();
    repo.expect_insert()
        .withf(|f| {
            f.name == "Campaigns"
                && f.parent_id.is_none()
                && f.id.starts_with("fld_")
                && f.environment_id == ENV
                && f.organisation_id == "org_1"
                && f.created == t0()
                && f.updated == t0()
        })
        .times(1)
        .returning(|_| Ok(()));
    let request = CreateFolder {
        name: "Campaigns".into(),
        parent_id: Some(String::new()),
    };
    let created = service(repo)
        .create(&all_folder_scopes(), &EnvironmentId::from(ENV), request)
        .await
        .expect("create");
    assert_eq!(created.name, "Campaigns");
    assert_eq!(created.parent_id, None, "an empty parentId means root");
}

#[tokio::test]
async fn create_under_a_parent_checks_it_exists_in_this_environment() {
    let mut repo = MockFolderRepository::new();
    repo.expect_get()
        .with(eq(ENV), eq("fld_missing"))
        .returning(|_, _| Ok(None));
    let request = CreateFolder {
        name: "bad name!".into(),
        parent_id: Some("fld_missing".into()),
    };
    let err = service(repo)
        .create(&all_folder_scopes(), &EnvironmentId::from(ENV), request)
        .await
        .expect_err("invalid");
    assert_eq!(
        fields(err),
        ["name", "parentId"],
        "both problems are reported"
    );
}

#[tokio::test]
async fn create_allows_three_levels_and_refuses_a_fourth() {
    let mut repo = MockFolderRepository::new();
    repo.expect_get()
        .with(eq(ENV), eq("fld_l3"))
        .returning(|_, _| Ok(Some(folder("fld_l3", "c", Some("fld_l2")))));
    repo.expect_get()
        .with(eq(ENV), eq("fld_l2"))
        .returning(|_, _| Ok(Some(folder("fld_l2", "b", Some("fld_l1")))));
    repo.expect_get()
        .with(eq(ENV), eq("fld_l1"))
        .returning(|_, _| Ok(Some(folder("fld_l1", "a", None))));
    repo.expect_insert()
        .withf(|f| f.parent_id.as_deref() == Some("fld_l2"))
        .times(1)
        .returning(|_| Ok(()));
    let svc = service(repo);
    let who = all_folder_scopes();

    let level3 = CreateFolder {
        name: "d".into(),
        parent_id: Some("fld_l2".into()),
    };
    assert!(svc
        .create(&who, &EnvironmentId::from(ENV), level3)
        .await
        .is_ok());

    let level4 = CreateFolder {
        name: "d".into(),
        parent_id: Some("fld_l3".into()),
    };
    let err = svc
        .create(&who, &EnvironmentId::from(ENV), level4)
        .await
        .expect_err("too deep");
    assert_eq!(fields(err), ["parentId"]);
}

#[tokio::test]
async fn create_maps_a_sibling_name_clash_to_folder_name_taken() {
    let mut repo = MockFolderRepository::new();
    repo.expect_insert()
        .returning(|_| Err(StorageError::UniqueViolation("folders_sibling_name".into())));
    let request = CreateFolder {
        name: "Dup".into(),
        parent_id: None,
    };
    let err = service(repo)
        .create(&all_folder_scopes(), &EnvironmentId::from(ENV), request)
        .await
        .expect_err("clash");
    assert!(matches!(
        err,
        DomainError::Conflict {
            kind: ConflictKind::FolderNameTaken,
            ..
        }
    ));
}

#[tokio::test]
async fn create_maps_a_parent_deleted_meanwhile_to_a_validation_error() {
    let mut repo = MockFolderRepository::new();
    repo.expect_get()
        .returning(|_, _| Ok(Some(folder("fld_p", "p", None))));
    repo.expect_insert()
        .returning(|_| Err(StorageError::ForeignKeyViolation("parent".into())));
    let request = CreateFolder {
        name: "child".into(),
        parent_id: Some("fld_p".into()),
    };
    let err = service(repo)
        .create(&all_folder_scopes(), &EnvironmentId::from(ENV), request)
        .await
        .expect_err("race");
    assert_eq!(fields(err), ["parentId"]);
}

#[tokio::test]
async fn storage_faults_pass_through_as_storage_errors() {
    let mut repo = MockFolderRepository::new();
    repo.expect_list()
        .returning(|_| Err(StorageError::Unavailable("pool timed out".into())));
    let err = service(repo)
        .list(&all_folder_scopes(), &EnvironmentId::from(ENV))
        .await
        .expect_err("down");
    assert!(matches!(
        err,
        DomainError::Storage(StorageError::Unavailable(_))
    ));
}

// ---- rename ----

#[tokio::test]
async fn rename_updates_the_name_and_timestamp() {
    let mut repo = MockFolderRepository::new();
    repo.expect_get()
        .returning(|_, _| Ok(Some(folder("fld_1", "Old", Some("fld_p")))));
    repo.expect_rename()
        .with(eq(ENV), eq("fld_1"), eq("New"), eq(t0()))
        .times(1)
        .returning(|_, _, name, at| {
            Ok(Some(Folder {
                name: name.into(),
                updated: at,
                ..folder("fld_1", "", Some("fld_p"))
            }))
        });
    let request = RenameFolder {
        name: "New".into(),
        parent_id: Some(Some("fld_p".into())),
    };
    let renamed = service(repo)
        .rename(
            &all_folder_scopes(),
            &EnvironmentId::from(ENV),
            &FolderId::from("fld_1"),
            request,
        )
        .await
        .expect("rename");
    assert_eq!(renamed.name, "New");
}

#[tokio::test]
async fn rename_to_the_same_name_changes_nothing() {
    let mut repo = MockFolderRepository::new();
    repo.expect_get()
        .returning(|_, _| Ok(Some(folder("fld_1", "Same", None))));
    repo.expect_rename().never();
    let request = RenameFolder {
        name: "Same".into(),
        parent_id: None,
    };
    let same = service(repo)
        .rename(
            &all_folder_scopes(),
            &EnvironmentId::from(ENV),
            &FolderId::from("fld_1"),
            request,
        )
        .await
        .expect("noop");
    assert_eq!(same.updated, t0());
}

#[tokio::test]
async fn rename_refuses_moves_and_bad_names_together() {
    let mut repo = MockFolderRepository::new();
    repo.expect_get()
        .returning(|_, _| Ok(Some(folder("fld_1", "Old", None))));
    repo.expect_rename().never();
    let request = RenameFolder {
        name: String::new(),
        parent_id: Some(Some("fld_other".into())),
    };
    let err = service(repo)
        .rename(
            &all_folder_scopes(),
            &EnvironmentId::from(ENV),
            &FolderId::from("fld_1"),
            request,
        )
        .await
        .expect_err("invalid");
    assert_eq!(fields(err), ["name", "parentId"]);
}

#[tokio::test]
async fn rename_of_unknown_folder_is_not_found_and_clash_is_a_conflict() {
    let mut repo = MockFolderRepository::new();
    repo.expect_get()
        .with(always(), eq("fld_x"))
        .returning(|_, _| Ok(None));
    repo.expect_get()
        .with(always(), eq("fld_1"))
        .returning(|_, _| Ok(Some(folder("fld_1", "Old", None))));
    repo.expect_rename()
        .returning(|_, _, _, _| Err(StorageError::UniqueViolation("x".into())));
    let svc = service(repo);
    let who = all_folder_scopes();
    let request = RenameFolder {
        name: "Taken".into(),
        parent_id: None,
    };
    assert!(matches!(
        svc.rename(
            &who,
            &EnvironmentId::from(ENV),
            &FolderId::from("fld_x"),
            request.clone()
        )
        .await,
        Err(DomainError::NotFound(Resource::Folder))
    ));
    assert!(matches!(
        svc.rename(
            &who,
            &EnvironmentId::from(ENV),
            &FolderId::from("fld_1"),
            request
        )
        .await,
        Err(DomainError::Conflict {
            kind: ConflictKind::FolderNameTaken,
            ..
        })
    ));
}

// ---- delete ----

#[tokio::test]
async fn delete_unfiles_flows_through_the_repository() {
    let mut repo = MockFolderRepository::new();
    repo.expect_get()
        .returning(|_, _| Ok(Some(folder("fld_1", "a", None))));
    repo.expect_has_children().returning(|_, _| Ok(false));
    repo.expect_delete_and_unfile_flows()
        .with(eq(ENV), eq("fld_1"))
        .times(1)
        .returning(|_, _| Ok(true));
    service(repo)
        .delete(
            &all_folder_scopes(),
            &EnvironmentId::from(ENV),
            &FolderId::from("fld_1"),
        )
        .await
        .expect("delete");
}

#[tokio::test]
async fn delete_refuses_a_folder_with_children_even_when_one_appears_meanwhile() {
    let mut repo = MockFolderRepository::new();
    repo.expect_get()
        .returning(|_, _| Ok(Some(folder("fld_1", "a", None))));
    repo.expect_has_children()
        .with(always(), eq("fld_1"))
        .returning(|_, _| Ok(true));
    repo.expect_delete_and_unfile_flows().never();
    let err = service(repo)
        .delete(
            &all_folder_scopes(),
            &EnvironmentId::from(ENV),
            &FolderId::from("fld_1"),
        )
        .await
        .expect_err("children");
    assert!(matches!(
        err,
        DomainError::Conflict {
            kind: ConflictKind::FolderHasChildren,
            ..
        }
    ));

    let mut racing = MockFolderRepository::new();
    racing
        .expect_get()
        .returning(|_, _| Ok(Some(folder("fld_1", "a", None))));
    racing.expect_has_children().returning(|_, _| Ok(false));
    racing
        .expect_delete_and_unfile_flows()
        .returning(|_, _| Err(StorageError::ForeignKeyViolation("parent".into())));
    let err = service(racing)
        .delete(
            &all_folder_scopes(),
            &EnvironmentId::from(ENV),
            &FolderId::from("fld_1"),
        )
        .await
        .expect_err("race");
    assert!(matches!(
        err,
        DomainError::Conflict {
            kind: ConflictKind::FolderHasChildren,
            ..
        }
    ));
}

#[tokio::test]
async fn delete_of_unknown_folder_is_not_found() {
    let mut repo = MockFolderRepository::new();
    repo.expect_get().returning(|_, _| Ok(None));
    let err = service(repo)
        .delete(
            &all_folder_scopes(),
            &EnvironmentId::from(ENV),
            &FolderId::from("fld_x"),
        )
        .await
        .expect_err("missing");
    assert!(matches!(err, DomainError::NotFound(Resource::Folder)));
}
