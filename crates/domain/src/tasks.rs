//! The tasks of an Action Flow in one list (docs/api.md, Lists of invocations and tasks): its
//! CSV (bulk start) tasks and its cancel tasks, newest first, with one cursor across both
//! kinds. Each kind stays in its own storage; [`TaskService`] reads a page of each and merges
//! them ([`merge`]).

use crate::id::{EnvironmentId, FlowId};
use std::cmp::Ordering;
use std::sync::Arc;

use crate::bulk::{BulkRepository, BulkTask, PublicStatus};
use crate::cancel::{is_uuid, CancelRepository, CancelStatus, CancelTask};
use crate::page::{bad_cursor, newest_first_key, parse_newest_first_key, After, Page, PageRequest};
use crate::{DomainError, FlowRepository, Permission, Principal, Resource, Timestamp};

/// The two kinds of task a flow has (`kind` of `GET .../tasks`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskKind {
    /// A bulk start from a CSV file ([`BulkTask`]).
    Csv,
    /// A cancel of the flow's instances ([`CancelTask`]).
    Cancel,
}

impl TaskKind {
    /// The kind as the API spells it: `csv`, `cancel`.
    pub const fn as_str(self) -> &'static str {
        match self {
            TaskKind::Csv => "csv",
            TaskKind::Cancel => "cancel",
        }
    }

    /// The kind [`as_str`](Self::as_str) spells as `s`; None for anything else.
    pub fn parse(s: &str) -> Option<Self> {
        [Self::Csv, Self::Cancel]
            .into_iter()
            .find(|x| x.as_str() == s)
    }
}

/// Which of a flow's tasks a list keeps (`GET .../tasks?kind=&status=`): each field given
/// narrows it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TaskFilter {
    /// Only tasks of this kind.
    pub kind: Option<TaskKind>,
    /// Only tasks whose status, as clients see it, is this ([`BulkTask::public_status`] for a
    /// CSV task; a cancel task is never pending).
    pub status: Option<PublicStatus>,
}

/// One task of a flow's list.
#[derive(Debug, Clone, PartialEq)]
pub enum FlowTask {
    /// A bulk start from a CSV file.
    Csv(BulkTask),
    /// A cancel.
    Cancel(CancelTask),
}

impl FlowTask {
    /// Its kind.
    pub fn kind(&self) -> TaskKind {
        match self {
            FlowTask::Csv(_) => TaskKind::Csv,
            FlowTask::Cancel(_) => TaskKind::Cancel,
        }
    }

    /// When it was created.
    pub fn created(&self) -> Timestamp {
        match self {
            FlowTask::Csv(t) => t.created,
            FlowTask::Cancel(t) => t.created,
        }
    }

    /// Its key in the list: its time, kind and id ([`newest_first_key`] of `created` and
    /// `kind|id`). The list goes on after it from this key alone.
    pub fn key(&self) -> String {
        let id = match self {
            FlowTask::Csv(t) => format!("{}|{}", TaskKind::Csv.as_str(), t.id),
            FlowTask::Cancel(t) => format!("{}|{}", TaskKind::Cancel.as_str(), t.id),
        };
        newest_first_key(&self.created(), &id)
    }
}

/// The order of the list: newest first; at the same instant CSV tasks before cancel tasks;
/// within a kind by id, descending (as each repository answers them).
fn order(a: &FlowTask, b: &FlowTask) -> Ordering {
    b.created().cmp(&a.created()).then_with(|| match (a, b) {
        (FlowTask::Csv(a), FlowTask::Csv(b)) => b.id.cmp(&a.id),
        (FlowTask::Cancel(a), FlowTask::Cancel(b)) => b.id.cmp(&a.id),
        (FlowTask::Csv(_), FlowTask::Cancel(_)) => Ordering::Less,
        (FlowTask::Cancel(_), FlowTask::Csv(_)) => Ordering::Greater,
    })
}

/// The first `take` tasks of both lists together, in the list's order; each list is in that
/// order already (newest first, then by id descending).
pub fn merge(csv: Vec<BulkTask>, cancels: Vec<CancelTask>, take: usize) -> Vec<FlowTask> {
    let mut csv = csv.into_iter().map(FlowTask::Csv).peekable();
    let mut cancels = cancels.into_iter().map(FlowTask::Cancel).peekable();
    let mut merged = Vec::with_capacity(take.min(csv.len() + cancels.len()));
    while merged.len() < take {
        let next = match (csv.peek(), cancels.peek()) {
            (Some(a), Some(b)) if order(a, b) != Ordering::Greater => csv.next(),
            (Some(_), Some(_)) => cancels.next(),
            (Some(_), None) => csv.next(),
            (None, _) => cancels.next(),
        };
        match next {
            Some(task) => merged.push(task),
            None => break,
        }
    }
    merged
}

/// Where the list goes on: after the task a key names.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Position {
    Csv(Timestamp, i64),
    Cancel(Timestamp, String),
}

impl Position {
    /// The position a [`FlowTask::key`] names; None for any other text.
    fn parse(key: &str) -> Option<Position> {
        let (created, rest) = parse_newest_first_key(key)?;
        let (kind, id) = rest.split_once('|')?;
        match TaskKind::parse(kind)? {
            TaskKind::Csv => {
                let id = id.parse::<i64>().ok().filter(|n| *n > 0)?;
                Some(Position::Csv(created, id))
            }
            TaskKind::Cancel => is_uuid(id).then(|| Position::Cancel(created, id.to_owned())),
        }
    }

    /// What each kind's repository answers after it: CSV tasks come first at an instant, so
    /// after a CSV task every cancel task of its instant is still to come, and after a cancel
    /// task no CSV task of its instant is.
    fn bounds(self) -> (After<i64>, After<String>) {
        match self {
            Position::Csv(created, id) => (
                After::Item { created, id },
                After::CreatedAtOrBefore(created),
            ),
            Position::Cancel(created, id) => {
                (After::CreatedBefore(created), After::Item { created, id })
            }
        }
    }
}

/// A flow's CSV and cancel tasks in one list, newest first (docs/api.md, Lists of invocations
/// and tasks).
pub struct TaskService {
    bulk: Arc<dyn BulkRepository>,
    cancels: Arc<dyn CancelRepository>,
    flows: Arc<dyn FlowRepository>,
}

impl TaskService {
    /// A service over the repositories of both kinds of task, and of flows (a list of a flow
    /// the environment does not have is not found).
    pub fn new(
        bulk: Arc<dyn BulkRepository>,
        cancels: Arc<dyn CancelRepository>,
        flows: Arc<dyn FlowRepository>,
    ) -> Self {
        Self {
            bulk,
            cancels,
            flows,
        }
    }

    /// One page of the flow's tasks that match `filter`, newest first: by creation time, CSV
    /// tasks before cancel tasks at the same instant, then by id, descending. The page's
    /// `next_after` is the key to list after for the next page ([`FlowTask::key`] of its last
    /// task), whether the list has one kind or both.
    ///
    /// Needs [`Permission::ActionFlowsRead`], as reading one task does. Then
    /// [`DomainError::Validation`] on `status` for `pending` with [`TaskKind::Cancel`] (a cancel
    /// task is never pending), and on `cursor` for a `page.after` that is no task's key; then
    /// [`DomainError::NotFound`] for a flow the environment does not have. `page.limit` is not
    /// checked here: the API keeps it within 1–500.
    pub async fn list(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        flow_id: &FlowId,
        filter: TaskFilter,
        page: PageRequest,
    ) -> Result<Page<FlowTask>, DomainError> {
        who.authorize(env, Permission::ActionFlowsRead)?;
        // A cancel task's statuses are those of a CSV task but pending.
        let cancel_status = filter
            .status
            .map(|s| CancelStatus::parse(s.as_str()).ok_or(s));
        if let (Some(TaskKind::Cancel), Some(Err(_))) = (filter.kind, cancel_status) {
            return Err(DomainError::invalid(
                "status",
                "must be processing, completed or failed with kind=cancel: a cancel task is \
                 never pending",
            ));
        }
        let (csv_after, cancel_after) = match page.after.as_deref() {
            None => (None, None),
            Some(key) => {
                let (csv, cancel) = Position::parse(key).ok_or_else(bad_cursor)?.bounds();
                (Some(csv), Some(cancel))
            }
        };
        self.flows
            .get(env, flow_id)
            .await?
            .ok_or(DomainError::NotFound(Resource::Flow))?;
        let take = page.limit.saturating_add(1);
        let csv = if filter.kind == Some(TaskKind::Cancel) {
            Vec::new()
        } else {
            self.bulk
                .list(env, flow_id, filter.status, csv_after, take)
                .await?
        };
        let cancels = match (filter.kind, cancel_status) {
            (Some(TaskKind::Csv), _) | (_, Some(Err(_))) => Vec::new(),
            (_, status) => {
                self.cancels
                    .list(
                        env,
                        flow_id,
                        status.and_then(Result::ok),
                        cancel_after,
                        take,
                    )
                    .await?
            }
        };
        let merged = merge(csv, cancels, usize::try_from(take).unwrap_or(usize::MAX));
        Ok(Page::from_overfetch(merged, page.limit, FlowTask::key))
    }
}

#[cfg(test)]
mod tests;
