use std::sync::Arc;

use mockall::predicate::eq;
use serde_json::json;

use super::*;
use crate::tenancy::{KeyAccess, Permission, Principal, Role, Scope};
use crate::testing::{caller, t0};
use crate::time::MockClock;
use crate::{ConflictKind, DomainError};

const ENV: &str = "env_1";

fn who(scopes: &[Scope]) -> Principal {
    caller(ENV, KeyAccess::Scopes(scopes.to_vec()))
}

fn writer() -> Principal {
    who(&[Scope::UsersRead, Scope::UsersWrite])
}

fn user(id: &str, tags: &[&str]) -> EndUser {
    EndUser {
        environment_id: ENV.into(),
        id: id.into(),
        test_user: false,
        tags: tags.iter().map(|t| (*t).to_owned()).collect(),
        attributes: Map::new(),
        created: t0(),
        updated: t0(),
    }
}

struct Mocks {
    users: MockEndUserRepository,
    segments: MockSegmentRepository,
    streams: MockStreamRepository,
}

impl Mocks {
    fn new() -> Self {
        Self {
            users: MockEndUserRepository::new(),
            segments: MockSegmentRepository::new(),
            streams: MockStreamRepository::new(),
        }
    }

    fn service(self) -> AudienceService {
        let mut clock = MockClock::new();
        clock.expect_now().returning(t0);
        AudienceService::new(
            Arc::new(self.users),
            Arc::new(self.segments),
            Arc::new(self.streams),
            Arc::new(clock),
        )
    }
}

fn fields(err: DomainError) -> Vec<String> {
    match err {
        DomainError::Validation(errors) => errors.into_iter().map(|e| e.field).collect(),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn put_user_normalises_tags_and_reads_the_stored_user_back() {
    let mut m = Mocks::new();
    m.users
        .expect_upsert()
        .withf(|users| users.len() == 1 && users[0].tags == ["a", "vip"] && users[0].test_user)
        .times(1)
        .returning(|_| Ok(()));
    m.users
        .expect_get()
        .with(eq(ENV), eq("u1"))
        .returning(|_, _| Ok(Some(user("u1", &["a", "vip"]))));
    let input = UserInput {
        id: "u1".into(),
        test_user: true,
        tags: vec!["vip".into(), "a".into(), "vip".into()],
        attributes: Map::new(),
    };
    let stored = m
        .service()
        .put_user(&writer(), &ENV.into(), input)
        .await
        .expect("stored");
    assert_eq!(stored.id, "u1");
}

#[tokio::test]
async fn user_validation_reports_every_problem() {
    let mut m = Mocks::new();
    m.users.expect_upsert().never();
    let mut attributes = Map::new();
    attributes.insert("nested".into(), json!({"a": 1}));
    attributes.insert("".into(), json!("x"));
    attributes.insert("long".into(), json!("x".repeat(2001)));
    let input = UserInput {
        id: "bad\nid".into(),
        test_user: false,
        tags: vec![String::new(), "t".repeat(101)],
        attributes,
    };
    let err = m
        .service()
        .put_user(&writer(), &ENV.into(), input)
        .await
        .expect_err("invalid");
    assert_eq!(
        fields(err),
        [
            "id",
            "tags[0]",
            "tags[1]",
            "attributes.",
            "attributes.long",
            "attributes.nested"
        ]
    );
}

#[tokio::test]
async fn batches_are_all_or_nothing_and_refuse_duplicates_and_size() {
    let mut m = Mocks::new();
    m.users
        .expect_upsert()
        .withf(|users| users.len() == 3)
        .times(1)
        .returning(|_| Ok(()));
    let svc = m.service();
    let inputs: Vec<UserInput> = ["a", "b", "c"]
        .iter()
        .map(|id| UserInput {
            id: (*id).into(),
            ..Default::default()
        })
        .collect();
    assert_eq!(
        svc.put_users(&writer(), &ENV.into(), inputs)
            .await
            .expect("batch"),
        3
    );

    let dup = vec![
        UserInput {
            id: "a".into(),
            ..Default::default()
        },
        UserInput {
            id: "a".into(),
            ..Default::default()
        },
    ];
    assert_eq!(
        fields(
            svc.put_users(&writer(), &ENV.into(), dup)
                .await
                .expect_err("dup")
        ),
        ["users[1].id"]
    );
    let too_many = vec![
        UserInput {
            id: "x".into(),
            ..Default::default()
        };
        MAX_BATCH_USERS + 1
    ];
    assert_eq!(
        fields(
            svc.put_users(&writer(), &ENV.into(), too_many)
                .await
                .expect_err("size")
        ),
        ["users"]
    );
    assert_eq!(
        fields(
            svc.put_users(&writer(), &ENV.into(), Vec::new())
                .await
                .expect_err("empty")
        ),
        ["users"]
    );
}

#[tokio::test]
async fn permissions_follow_the_contract_table() {
    let svc = Mocks::new().service();
    let reader = who(&[Scope::UsersRead]);
    let input = UserInput {
        id: "u".into(),
        ..Default::default()
    };
    assert!(matches!(
        svc.put_user(&reader, &ENV.into(), input).await,
        Err(DomainError::Forbidden(_))
    ));
    assert!(matches!(
        svc.create_stream(&reader, &ENV.into(), "s".into()).await,
        Err(DomainError::Forbidden(_))
    ));
    let folders_only = who(&[Scope::WorkbenchFoldersRead]);
    assert!(matches!(
        svc.list_segments(&folders_only, &ENV.into()).await,
        Err(DomainError::Forbidden(_))
    ));
    // Both legacy roles reach users.
    for role in [Role::Events, Role::Workbench] {
        assert!(KeyAccess::Roles(vec![role]).allows(Permission::UsersWrite));
    }
}

#[tokio::test]
async fn listing_by_segment_scans_in_batches_until_the_page_is_full() {
    let mut m = Mocks::new();
    let segment = Segment {
        id: "seg_1".into(),
        environment_id: ENV.into(),
        name: "VIP".into(),
        filter: Filter::parse(
            &json!({"conditions": [{"field": "tags", "op": "contains", "value": "vip"}]}),
            "filter",
        )
        .expect("filter"),
        created: t0(),
        updated: t0(),
    };
    m.segments
        .expect_get()
        .with(eq(ENV), eq("seg_1"))
        .returning(move |_, _| Ok(Some(segment.clone())));
    m.segments
        .expect_get()
        .with(eq(ENV), eq("seg_x"))
        .returning(|_, _| Ok(None));
    // 2,500 users; every fifth is a VIP. Batches of 1,000 (+1 to see whether more follow).
    let all: Vec<EndUser> = (0..2500)
        .map(|i| user(&format!("u{i:05}"), if i % 5 == 0 { &["vip"] } else { &[] }))
        .collect();
    m.users.expect_list().returning(move |_, _, page| {
        let start = page
            .after
            .as_ref()
            .map(|a| all.iter().position(|u| &u.id == a).map_or(0, |p| p + 1))
            .unwrap_or(0);
        Ok(all
            .iter()
            .skip(start)
            .take(page.limit as usize + 1)
            .cloned()
            .collect())
    });
    let svc = m.service();
    let page = svc
        .list_users(
            &writer(),
            &ENV.into(),
            UserQuery::default(),
            Some("seg_1".into()),
            PageRequest {
                limit: 250,
                after: None,
            },
        )
        .await
        .expect("page");
    assert_eq!(page.items.len(), 250);
    assert!(page.items.iter().all(|u| u.tags == ["vip"]));
    assert_eq!(page.next_after.as_deref(), Some("u01245"));
    let rest = svc
        .list_users(
            &writer(),
            &ENV.into(),
            UserQuery::default(),
            Some("seg_1".into()),
            PageRequest {
                limit: 500,
                after: page.next_after,
            },
        )
        .await
        .expect("rest");
    assert_eq!((rest.items.len(), rest.next_after), (250, None));
    let err = svc
        .list_users(
            &writer(),
            &ENV.into(),
            UserQuery::default(),
            Some("seg_x".into()),
            PageRequest::default(),
        )
        .await
        .expect_err("unknown");
    assert_eq!(fields(err), ["segmentId"]);
}

#[tokio::test]
async fn segments_validate_name_and_filter_together() {
    let mut m = Mocks::new();
    m.segments.expect_insert().never();
    let err = m
        .service()
        .create_segment(
            &writer(),
            &ENV.into(),
            " ".into(),
            json!({"conditions": [{"field": "x"}]}),
        )
        .await
        .expect_err("invalid");
    assert_eq!(
        fields(err),
        [
            "name",
            "filter.conditions[0].field",
            "filter.conditions[0].op"
        ]
    );
}

#[tokio::test]
async fn the_default_stream_cannot_be_deleted_and_names_are_unique() {
    let mut m = Mocks::new();
    m.streams
        .expect_get()
        .with(eq(ENV), eq("str_default"))
        .returning(|_, _| {
            Ok(Some(Stream {
                id: "str_default".into(),
                environment_id: ENV.into(),
                name: DEFAULT_STREAM_NAME.into(),
                is_default: true,
                created: t0(),
            }))
        });
    m.streams.expect_delete().never();
    m.streams
        .expect_list()
        .withf(|_, default| default.is_default && default.name == "All cards")
        .returning(|_, d| Ok(vec![d]));
    m.streams
        .expect_insert()
        .returning(|_| Err(StorageError::UniqueViolation("streams_name".into())));
    let svc = m.service();
    let err = svc
        .delete_stream(&writer(), &ENV.into(), &"str_default".into())
        .await
        .expect_err("default");
    assert!(matches!(
        err,
        DomainError::Conflict {
            kind: ConflictKind::DefaultStream,
            ..
        }
    ));
    let err = svc
        .create_stream(&writer(), &ENV.into(), "All cards".into())
        .await
        .expect_err("taken");
    assert!(matches!(
        err,
        DomainError::Conflict {
            kind: ConflictKind::StreamNameTaken,
            ..
        }
    ));
}

#[tokio::test]
async fn marking_a_test_user_keeps_its_tags_and_attributes() {
    let mut m = Mocks::new();
    m.users
        .expect_get()
        .with(eq(ENV), eq("u1"))
        .returning(|_, _| {
            let mut u = user("u1", &["vip"]);
            u.attributes.insert("plan".into(), json!("pro"));
            Ok(Some(u))
        });
    m.users
        .expect_upsert()
        .withf(|users| {
            users.len() == 1
                && users[0].test_user
                && users[0].tags == ["vip"]
                && users[0].attributes.get("plan") == Some(&json!("pro"))
        })
        .times(1)
        .returning(|_| Ok(()));
    let svc = m.service();
    svc.set_test_user(&writer(), &ENV.into(), &"u1".into(), true)
        .await
        .expect("marked");
    let reader = who(&[Scope::UsersRead]);
    let refused = svc
        .set_test_user(&reader, &ENV.into(), &"u1".into(), true)
        .await;
    assert!(matches!(refused, Err(DomainError::Forbidden(_))));
}
