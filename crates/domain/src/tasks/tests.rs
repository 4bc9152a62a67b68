use std::sync::{Arc, Mutex};

use chrono::Duration;

use super::*;
use crate::bulk::{BulkStatus, MockBulkRepository};
use crate::cancel::{CancelFilter, MockCancelRepository};
use crate::flow::MockFlowRepository;
use crate::tenancy::{KeyAccess, Scope};
use crate::testing::{caller, t0};
use crate::trigger::Mode;

fn at(seconds: i64) -> Timestamp {
    t0() + Duration::seconds(seconds)
}

fn csv(id: i64, seconds: i64) -> BulkTask {
    BulkTask {
        id,
        ..BulkTask::new("env", "flw", Mode::Live, at(seconds))
    }
}

/// A cancel task whose id is the UUID ending in `n`.
fn cancel(n: u8, seconds: i64) -> CancelTask {
    CancelTask::new(
        format!("00000000-0000-4000-8000-0000000000{n:02}"),
        "env",
        "flw",
        CancelFilter::default(),
        at(seconds),
    )
}

fn reader() -> Principal {
    caller("env", KeyAccess::Scopes(vec![Scope::ActionFlowsRead]))
}

/// Flows over a mock: `flw` is a flow of `env`, nothing else is.
fn flows() -> MockFlowRepository {
    let mut flows = MockFlowRepository::new();
    flows.expect_get().returning(|env, id| {
        Ok((env == "env" && id == "flw")
            .then(|| crate::Flow::new("flw", "env", "org_1", "F", t0())))
    });
    flows
}

fn ids(tasks: &[FlowTask]) -> Vec<String> {
    tasks
        .iter()
        .map(|t| match t {
            FlowTask::Csv(t) => format!("csv {}", t.id),
            FlowTask::Cancel(t) => format!("cancel {}", &t.id[34..]),
        })
        .collect()
}

#[test]
fn kinds_merge_newest_first_with_csv_tasks_first_at_one_instant() {
    let merged = merge(
        vec![csv(9, 5), csv(8, 3), csv(7, 3), csv(2, 1)],
        vec![cancel(4, 4), cancel(3, 3), cancel(1, 0)],
        6,
    );
    assert_eq!(
        ids(&merged),
        ["csv 9", "cancel 04", "csv 8", "csv 7", "cancel 03", "csv 2"]
    );
    assert_eq!(merge(vec![], vec![cancel(1, 0)], 5).len(), 1);
    assert!(merge(vec![csv(1, 0)], vec![cancel(1, 0)], 0).is_empty());
}

#[test]
fn a_key_names_its_task_and_each_kind_goes_on_from_it() {
    let csv_key = FlowTask::Csv(csv(42, 3)).key();
    assert_eq!(
        Position::parse(&csv_key).map(Position::bounds),
        Some((
            After::Item {
                created: at(3),
                id: 42
            },
            After::CreatedAtOrBefore(at(3)),
        ))
    );
    let task = cancel(7, 3);
    let cancel_key = FlowTask::Cancel(task.clone()).key();
    assert_eq!(
        Position::parse(&cancel_key).map(Position::bounds),
        Some((
            After::CreatedBefore(at(3)),
            After::Item {
                created: at(3),
                id: task.id.into_string()
            },
        ))
    );
    let time = at(3).to_rfc3339();
    for bad in [
        String::new(),
        "42".into(),
        format!("{time}|csv"),
        format!("{time}|csv|0"),
        format!("{time}|csv|-4"),
        format!("{time}|csv|forty-two"),
        format!("{time}|cancel|42"),
        format!("{time}|bulk|42"),
        "tomorrow|csv|42".into(),
    ] {
        assert_eq!(Position::parse(&bad), None, "{bad}");
    }
}

/// Whether an item created at `created` with `id` comes after `after`, as a repository decides.
fn comes_after<Id: Ord>(created: Timestamp, id: &Id, after: &Option<After<Id>>) -> bool {
    match after {
        None => true,
        Some(After::Item { created: c, id: i }) => created < *c || (created == *c && id < i),
        Some(After::CreatedBefore(c)) => created < *c,
        Some(After::CreatedAtOrBefore(c)) => created <= *c,
    }
}

/// What the repositories were asked: (kind, status, after, limit).
type Asked = Arc<Mutex<Vec<String>>>;

fn service(csv: Vec<BulkTask>, cancels: Vec<CancelTask>) -> (TaskService, Asked) {
    let asked: Asked = Arc::default();
    let mut bulk = MockBulkRepository::new();
    let log = asked.clone();
    bulk.expect_list()
        .returning(move |env, flow, status, after, limit| {
            assert_eq!((env, flow), ("env", "flw"));
            log.lock()
                .expect("log")
                .push(format!("csv {status:?} {after:?} {limit}"));
            Ok(csv
                .iter()
                .filter(|t| status.is_none_or(|s| t.public_status() == s))
                .filter(|t| comes_after(t.created, &t.id, &after))
                .take(limit as usize)
                .cloned()
                .collect())
        });
    let mut cancel_repo = MockCancelRepository::new();
    let log = asked.clone();
    cancel_repo
        .expect_list()
        .returning(move |env, flow, status, after, limit| {
            assert_eq!((env, flow), ("env", "flw"));
            log.lock()
                .expect("log")
                .push(format!("cancel {status:?} {after:?} {limit}"));
            Ok(cancels
                .iter()
                .filter(|t| status.is_none_or(|s| t.status == s))
                .filter(|t| comes_after(t.created, &t.id.as_str().to_owned(), &after))
                .take(limit as usize)
                .cloned()
                .collect())
        });
    let service = TaskService::new(Arc::new(bulk), Arc::new(cancel_repo), Arc::new(flows()));
    (service, asked)
}

#[tokio::test]
async fn the_key_is_checked_before_anything_is_read() {
    let service = TaskService::new(
        Arc::new(MockBulkRepository::new()),
        Arc::new(MockCancelRepository::new()),
        Arc::new(MockFlowRepository::new()),
    );
    let page = || PageRequest::new(None, Some("not a cursor".into())).expect("page");
    let trigger_only = caller("env", KeyAccess::Scopes(vec![Scope::ActionFlowsTrigger]));
    let denied = service
        .list(
            &trigger_only,
            &"env".into(),
            &"flw".into(),
            TaskFilter::default(),
            page(),
        )
        .await;
    assert!(
        matches!(denied, Err(DomainError::Forbidden(_))),
        "{denied:?}"
    );
    let elsewhere = service
        .list(
            &reader(),
            &"env_2".into(),
            &"flw".into(),
            TaskFilter::default(),
            page(),
        )
        .await;
    assert!(
        matches!(elsewhere, Err(DomainError::Unauthenticated)),
        "{elsewhere:?}"
    );
}

#[tokio::test]
async fn bad_cursors_and_a_pending_cancel_are_refused_and_an_unknown_flow_not_found() {
    let (service, asked) = service(vec![], vec![]);
    let refused = service
        .list(
            &reader(),
            &"env".into(),
            &"flw".into(),
            TaskFilter::default(),
            PageRequest::new(None, Some("2026-11-22T10:00:00Z|csv|x".into())).expect("page"),
        )
        .await;
    let Err(DomainError::Validation(problems)) = refused else {
        panic!("{refused:?}")
    };
    assert_eq!(problems[0].field, "cursor");
    let pending_cancels = TaskFilter {
        kind: Some(TaskKind::Cancel),
        status: Some(PublicStatus::Pending),
    };
    let refused = service
        .list(
            &reader(),
            &"env".into(),
            &"flw".into(),
            pending_cancels,
            PageRequest::default(),
        )
        .await;
    let Err(DomainError::Validation(problems)) = refused else {
        panic!("{refused:?}")
    };
    assert_eq!(problems[0].field, "status");
    let missing = service
        .list(
            &reader(),
            &"env".into(),
            &"flw_other".into(),
            TaskFilter::default(),
            PageRequest::default(),
        )
        .await;
    assert!(
        matches!(missing, Err(DomainError::NotFound(Resource::Flow))),
        "{missing:?}"
    );
    assert!(asked.lock().expect("log").is_empty(), "nothing was read");
}

#[tokio::test]
async fn both_kinds_page_together_with_one_cursor() {
    let csv_tasks = vec![csv(3, 5), csv(2, 3), csv(1, 1)];
    let cancels = vec![cancel(2, 3), cancel(1, 2)];
    let (service, asked) = service(csv_tasks, cancels);
    let page = |after: Option<String>| PageRequest::new(Some(2), after).expect("page");
    let mut seen = Vec::new();
    let mut after = None;
    for _ in 0..5 {
        let got = service
            .list(
                &reader(),
                &"env".into(),
                &"flw".into(),
                TaskFilter::default(),
                page(after),
            )
            .await
            .expect("page");
        assert!(got.items.len() <= 2);
        seen.extend(ids(&got.items));
        after = got.next_after;
        if after.is_none() {
            break;
        }
    }
    assert_eq!(
        seen,
        ["csv 3", "csv 2", "cancel 02", "cancel 01", "csv 1"],
        "newest first, each once"
    );
    let asked = asked.lock().expect("log");
    // Each repository is asked for one more than the page, after the cursor's task.
    assert_eq!(asked[0], "csv None None 3");
    assert_eq!(asked[1], "cancel None None 3");
    assert!(
        asked[2].starts_with("csv None Some(Item { created: ") && asked[2].ends_with("id: 2 }) 3"),
        "{}",
        asked[2]
    );
    assert!(
        asked[3].starts_with("cancel None Some(CreatedAtOrBefore("),
        "{}",
        asked[3]
    );
}

#[tokio::test]
async fn a_kind_or_a_status_reads_only_the_tasks_that_can_match() {
    let mut queued = csv(2, 2);
    queued.status = BulkStatus::Processing;
    queued.queued = true;
    let mut done = csv(1, 1);
    done.status = BulkStatus::Completed;
    let mut finished = cancel(1, 0);
    finished.status = CancelStatus::Completed;
    let (service, asked) = service(vec![queued, done], vec![finished]);
    let who = reader();
    let (env, flow) = (EnvironmentId::from("env"), FlowId::from("flw"));
    let list = |kind, status| {
        service.list(
            &who,
            &env,
            &flow,
            TaskFilter { kind, status },
            PageRequest::default(),
        )
    };
    let only_csv = list(Some(TaskKind::Csv), None).await.expect("csv");
    assert_eq!(ids(&only_csv.items), ["csv 2", "csv 1"]);
    let only_cancels = list(Some(TaskKind::Cancel), None).await.expect("cancel");
    assert_eq!(ids(&only_cancels.items), ["cancel 01"]);
    // A queued task is pending; no cancel task is, so none is read.
    let pending = list(None, Some(PublicStatus::Pending))
        .await
        .expect("pending");
    assert_eq!(ids(&pending.items), ["csv 2"]);
    let completed = list(None, Some(PublicStatus::Completed))
        .await
        .expect("completed");
    assert_eq!(ids(&completed.items), ["csv 1", "cancel 01"]);
    assert_eq!(
        *asked.lock().expect("log"),
        [
            "csv None None 51",
            "cancel None None 51",
            "csv Some(Pending) None 51",
            "csv Some(Completed) None 51",
            "cancel Some(Completed) None 51",
        ]
    );
}
