//! Cancel tasks (docs/api.md, Cancel): stop the flow instances of an Action Flow (all, or
//! those of one user, invocation or configuration version) and, by default, cancel their cards.
//!
//! A task is a durable marker. Workers cancel what exists in batches; and every engine batch
//! checks the markers of its flow before it creates anything ([`CancelTask::covers`]), in the
//! same transaction as its cards, so nothing queued before the cancel was accepted becomes
//! active after it.

use crate::id::{EnvironmentId, FlowId, TaskId};
use std::sync::Arc;

use async_trait::async_trait;
use chrono::Duration;

use serde_json::Value;

use crate::flow::MAX_FLOW_VERSION;
use crate::page::After;
use crate::{
    Clock, DomainError, FieldError, FlowRepository, Permission, Principal, Resource, StorageError,
    Timestamp,
};

/// Flow instances cancelled per transaction.
pub const CANCEL_BATCH: u32 = 1_000;

/// Where a cancel task is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelStatus {
    /// Accepted; workers are cancelling what it matches.
    Processing,
    /// Every matching flow instance (and, when asked, its open cards) is cancelled.
    Completed,
    /// Nothing matched ("no matching flow instances were found"), or a step kept failing
    /// (see [`CancelService::step`]); `errors` says which.
    Failed,
}

crate::spelling::spelled!(CancelStatus {
    Processing => "processing",
    Completed => "completed",
    Failed => "failed",
});

/// What a cancel matches: each given field narrows it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CancelFilter {
    /// `endUserId`: only the instances of this end user.
    pub end_user_id: Option<String>,
    /// `flowInvocationId`: only the instances of this invocation.
    pub invocation_id: Option<String>,
    /// `flowConfigVersion`: only the instances of this configuration version (from 1).
    pub flow_version: Option<u32>,
    /// False: the instances stop and their cards stay in the feeds.
    pub cancel_cards: bool,
    /// Only the instances of versions before this one: set by a publish with
    /// `cancelActiveInstances` (contract §21), never by a request's body.
    pub before_version: Option<u32>,
}

impl CancelFilter {
    /// The optional body of `POST .../task/cancel`. Unknown fields are ignored.
    ///
    /// No body (or `null` fields) matches every instance and cancels their cards. Every
    /// problem comes back at once as [`DomainError::Validation`]: `endUserId` and
    /// `flowInvocationId` must be strings of 1 to 255 characters, `flowConfigVersion` a whole
    /// number from 1 to [`MAX_FLOW_VERSION`], `cancelCards` a boolean; a body that is not an object
    /// is a problem of the body as a whole (field `""`).
    ///
    /// ```
    /// use serde_json::json;
    /// use workbench_domain::cancel::CancelFilter;
    ///
    /// let all = CancelFilter::parse(None).expect("no body");
    /// assert!(all.cancel_cards && all.end_user_id.is_none());
    /// let one = CancelFilter::parse(Some(&json!({"endUserId": "u1", "cancelCards": false})))
    ///     .expect("valid");
    /// assert_eq!((one.end_user_id.as_deref(), one.cancel_cards), (Some("u1"), false));
    /// assert!(CancelFilter::parse(Some(&json!({"flowConfigVersion": 0}))).is_err());
    /// assert!(CancelFilter::parse(Some(&json!({"flowConfigVersion": 1.5}))).is_err());
    /// let three = CancelFilter::parse(Some(&json!({"flowConfigVersion": 3.0}))).expect("valid");
    /// assert_eq!(three.flow_version, Some(3));
    /// ```
    pub fn parse(body: Option<&Value>) -> Result<Self, DomainError> {
        let mut filter = CancelFilter {
            cancel_cards: true,
            ..Default::default()
        };
        let Some(body) = body else {
            return Ok(filter);
        };
        let Some(obj) = body.as_object() else {
            return Err(DomainError::invalid("", "the body must be a JSON object"));
        };
        let mut errors = Vec::new();
        let text = |key: &str, errors: &mut Vec<FieldError>| match obj.get(key) {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if !s.is_empty() && s.chars().count() <= 255 => Some(s.clone()),
            Some(_) => {
                errors.push(FieldError::new(
                    key,
                    "must be a non-empty string of at most 255 characters",
                ));
                None
            }
        };
        filter.end_user_id = text("endUserId", &mut errors);
        filter.invocation_id = text("flowInvocationId", &mut errors);
        filter.flow_version = match obj.get("flowConfigVersion") {
            None | Some(Value::Null) => None,
            // A whole number written with a fraction (`3.0`) is a whole number too, as JSON
            // Schema's `integer` says.
            Some(v) => match whole_number(v).and_then(|n| u32::try_from(n).ok()) {
                Some(n) if (1..=MAX_FLOW_VERSION).contains(&n) => Some(n),
                _ => {
                    errors.push(FieldError::new(
                        "flowConfigVersion",
                        format!("must be a whole number from 1 to {MAX_FLOW_VERSION}"),
                    ));
                    None
                }
            },
        };
        match obj.get("cancelCards") {
            None | Some(Value::Null) => {}
            Some(Value::Bool(b)) => filter.cancel_cards = *b,
            Some(_) => errors.push(FieldError::new("cancelCards", "must be true or false")),
        }
        if errors.is_empty() {
            Ok(filter)
        } else {
            Err(DomainError::Validation(errors))
        }
    }
}

/// A cancel of an Action Flow's instances: the durable marker and its progress
/// (`GET .../task/{taskId}/status`).
#[derive(Debug, Clone, PartialEq)]
pub struct CancelTask {
    /// A UUID, lowercase (the `taskId` of docs/api.md, Cancel).
    pub id: TaskId,
    /// The environment of the flow.
    pub environment_id: String,
    /// The Action Flow whose instances are cancelled.
    pub flow_id: String,
    /// What the cancel matches.
    pub filter: CancelFilter,
    /// Where the task is.
    pub status: CancelStatus,
    /// Flow instances to cancel, counted when work starts.
    pub expected: Option<u64>,
    /// Flow instances cancelled so far.
    pub actual: u64,
    /// Open cards to cancel, counted when work starts (0 when `cancel_cards` is false).
    pub cards_expected: Option<u64>,
    /// Cards cancelled so far.
    pub cards_actual: u64,
    /// Why the task failed, for a caller to read.
    pub errors: Vec<String>,
    /// When the cancel was accepted: it covers what was triggered up to then.
    pub created: Timestamp,
    /// When the task last changed.
    pub updated: Timestamp,
    /// The lease this copy was claimed with (docs/architecture.md, Time, leases and fencing):
    /// the step's writes apply only while the task still holds it. None for a task not
    /// claimed.
    pub lease_until: Option<Timestamp>,
}

impl CancelTask {
    /// A cancel accepted at `at`: processing, nothing counted yet.
    pub fn new(
        id: String,
        environment_id: &str,
        flow_id: &str,
        filter: CancelFilter,
        at: Timestamp,
    ) -> Self {
        CancelTask {
            id: id.into(),
            environment_id: environment_id.to_owned(),
            flow_id: flow_id.to_owned(),
            filter,
            status: CancelStatus::Processing,
            expected: None,
            actual: 0,
            cards_expected: None,
            cards_actual: 0,
            errors: Vec::new(),
            created: at,
            updated: at,
            lease_until: None,
        }
    }

    /// Whether this cancel stops work for `user_id` of an invocation recorded at
    /// `invocation_created`: only work queued before the cancel was accepted.
    pub fn covers(
        &self,
        invocation_id: &str,
        flow_version: u32,
        invocation_created: Timestamp,
        user_id: &str,
    ) -> bool {
        invocation_created <= self.created
            && self
                .filter
                .invocation_id
                .as_deref()
                .is_none_or(|i| i == invocation_id)
            && self.filter.flow_version.is_none_or(|v| v == flow_version)
            && self.filter.before_version.is_none_or(|v| flow_version < v)
            && self
                .filter
                .end_user_id
                .as_deref()
                .is_none_or(|u| u == user_id)
    }

    /// Whether it stops the whole invocation (no user filter): as [`covers`](Self::covers)
    /// for every user.
    pub fn covers_invocation(
        &self,
        invocation_id: &str,
        flow_version: u32,
        invocation_created: Timestamp,
    ) -> bool {
        self.filter.end_user_id.is_none()
            && self.covers(invocation_id, flow_version, invocation_created, "")
    }

    /// 0–100: instances handled of those expected.
    ///
    /// At most 99 until the task is completed, then 100; 0 before the instances are counted
    /// and when none matched.
    pub fn progress(&self) -> u8 {
        match (self.status, self.expected) {
            (CancelStatus::Completed, _) => 100,
            (_, Some(expected)) if expected > 0 => {
                ((self.actual.min(expected) * 100) / expected).min(99) as u8
            }
            _ => 0,
        }
    }
}

pub(crate) use crate::id::is_uuid;
pub use crate::id::new_uuid;

/// Storage of cancel tasks, and the cancelling itself (a port).
///
/// [`count`](Self::count) and [`cancel_batch`](Self::cancel_batch) reach only active flow
/// instances of the task's environment and flow whose invocation was created up to the task's
/// `created` (the bound [`CancelTask::covers`] uses), narrowed by its filter. The engine's
/// saves read the markers this stores in the same transaction as their cards and drop what a
/// marker covers ([`CancelTask::covers`]); an implementation must keep that true across
/// processes (see [`create`](Self::create)). Writes of a claimed task are fenced by its lease
/// (docs/architecture.md, Time, leases and fencing).
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait CancelRepository: Send + Sync {
    /// Records the marker. On PostgreSQL it first locks the flow's row, so an engine batch of
    /// the flow either committed before (its cards are then cancelled by the task) or sees the
    /// marker.
    ///
    /// The task is durable when this returns.
    async fn create(&self, task: &CancelTask) -> Result<(), StorageError>;
    /// The task with this id in the environment (of any flow: the service checks the flow);
    /// None when there is none.
    async fn get(&self, environment_id: &str, id: &str)
        -> Result<Option<CancelTask>, StorageError>;
    /// Up to `limit` cancel tasks of the flow `flow_id` in the environment, newest first: by
    /// `created`, then by id, both descending. With `status`, only those where it is; with
    /// `after`, only those after it in that order. Tasks of another flow or environment are
    /// never answered; an empty answer when none is left.
    async fn list(
        &self,
        environment_id: &str,
        flow_id: &str,
        status: Option<CancelStatus>,
        after: Option<After<String>>,
        limit: u32,
    ) -> Result<Vec<CancelTask>, StorageError>;
    /// Takes a processing task whose lease ran out (or never had one) until `lease_until`; the
    /// task returned carries that lease.
    ///
    /// Of any environment, oldest first; None when no task is due. Two claims at once never
    /// take the same task.
    async fn claim(
        &self,
        now: Timestamp,
        lease_until: Timestamp,
    ) -> Result<Option<CancelTask>, StorageError>;
    /// Active flow instances the task matches, and their open cards.
    ///
    /// Answers (instances, open cards); the cards are counted whether or not the task cancels
    /// them.
    async fn count(&self, task: &CancelTask) -> Result<(u64, u64), StorageError>;
    /// In one transaction, only while the task still holds `task.lease_until`: cancels up to
    /// `limit` matching active instances and (when the task says so) their open cards, writing
    /// a `card-cancelled` event for each, and adds the counts to the task. Returns how many
    /// instances were cancelled, fewer than `limit` only when none matching is left (the
    /// service stops there); None, with nothing changed, when the lease has passed to another
    /// holder.
    async fn cancel_batch(
        &self,
        task: &CancelTask,
        limit: u32,
        now: Timestamp,
    ) -> Result<Option<u64>, StorageError>;
    /// Saves status, expected counts and errors (not `actual`, which batches add to), only
    /// while the task still holds `task.lease_until`. False, with nothing changed, when the
    /// lease has passed to another holder.
    async fn save(&self, task: &CancelTask) -> Result<bool, StorageError>;
}

/// The Cancel API and the worker that carries cancels out.
///
/// ```
/// use std::sync::Arc;
///
/// use serde_json::json;
/// use workbench_domain::cancel::{CancelService, CancelStatus};
/// use workbench_domain::mocks::{MockCancelRepository, MockClock, MockFlowRepository};
/// use workbench_domain::{DomainError, Flow, Principal};
///
/// # let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
/// # rt.block_on(async {
/// let now = workbench_domain::chrono::Utc::now();
/// let mut clock = MockClock::new();
/// clock.expect_now().return_const(now);
/// # let flow = Flow {
/// #     id: "flw_1".into(),
/// #     environment_id: "env_1".into(),
/// #     organisation_id: "org_1".into(),
/// #     name: "Onboarding".into(),
/// #     description: String::new(),
/// #     folder_id: None,
/// #     archived: false,
/// #     latest_version: 1,
/// #     published_version: Some(1),
/// #     draft_version: None,
/// #     variables: Default::default(),
/// #     revision: 1,
/// #     created: now,
/// #     updated: now,
/// # };
/// // `flow` is the Action Flow `flw_1` of `env_1`.
/// let mut flows = MockFlowRepository::new();
/// flows.expect_get().returning(move |_, _| Ok(Some(flow.clone())));
/// let mut tasks = MockCancelRepository::new();
/// tasks
///     .expect_create()
///     .withf(|t| t.filter.end_user_id.as_deref() == Some("u1") && t.filter.cancel_cards)
///     .times(1)
///     .returning(|_| Ok(()));
/// let service = CancelService::new(Arc::new(tasks), Arc::new(flows), Arc::new(clock));
/// let who = Principal::trusted("support-desk", "org_1", &["env_1"]);
///
/// let task = service.start(&who, &"env_1".into(), &"flw_1".into(),
///     Some(&json!({"endUserId": "u1"}))).await?;
/// assert_eq!(task.status, CancelStatus::Processing);
/// assert_eq!((task.id.len(), task.progress()), (36, 0)); // a UUID; nothing counted yet
///
/// // A task id must be a UUID.
/// let status = service.status(&who, &"env_1".into(), &"flw_1".into(), &"42".into()).await;
/// let Err(DomainError::Validation(problems)) = status else { panic!("{status:?}") };
/// assert_eq!(problems[0].field, "taskId");
/// # Ok::<(), DomainError>(())
/// # }).unwrap();
/// ```
pub struct CancelService {
    tasks: Arc<dyn CancelRepository>,
    flows: Arc<dyn FlowRepository>,
    clock: Arc<dyn Clock>,
    claims: crate::unit::Claims,
}

impl CancelService {
    /// A service over these repositories, with a 30-second lease on each claimed task.
    pub fn new(
        tasks: Arc<dyn CancelRepository>,
        flows: Arc<dyn FlowRepository>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            tasks,
            flows,
            clock,
            claims: crate::unit::Claims::default(),
        }
    }

    /// Writes refused since the last call because the task's lease had passed to another
    /// holder (docs/architecture.md, Time, leases and fencing).
    pub fn take_stale(&self) -> u64 {
        self.claims.take_stale()
    }

    /// The same service with another lease: how long a claimed task stays with its worker
    /// before another may take it over.
    pub fn with_lease(mut self, lease: Duration) -> Self {
        self.claims.lease = lease;
        self
    }

    /// Accepts a cancel: the marker is durable when this returns.
    ///
    /// `body` is the optional request body ([`CancelFilter::parse`]). Needs
    /// `action_flows:trigger` ([`DomainError::Unauthenticated`] for an environment the caller
    /// may not use, [`DomainError::Forbidden`] without the permission); then
    /// [`DomainError::Validation`] for the body, [`DomainError::NotFound`] when the
    /// environment has no such flow. The answer is the task, `processing`; its work is done
    /// by [`step`](Self::step).
    pub async fn start(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        flow_id: &FlowId,
        body: Option<&Value>,
    ) -> Result<CancelTask, DomainError> {
        who.authorize(env, Permission::ActionFlowsTrigger)?;
        let filter = CancelFilter::parse(body)?;
        self.flows
            .get(env, flow_id)
            .await?
            .ok_or(DomainError::NotFound(Resource::Flow))?;
        let now = self.clock.now();
        let task = CancelTask::new(new_uuid(), env, flow_id, filter, now);
        self.tasks.create(&task).await?;
        Ok(task)
    }

    /// The task `task_id` of the flow. Needs `action_flows:read`. A task id that is not a
    /// UUID is a [`DomainError::Validation`] at `taskId`; [`DomainError::NotFound`] when the
    /// flow has no such task (a task of another flow included).
    pub async fn status(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        flow_id: &FlowId,
        task_id: &TaskId,
    ) -> Result<CancelTask, DomainError> {
        who.authorize(env, Permission::ActionFlowsRead)?;
        if !is_uuid(task_id) {
            return Err(DomainError::invalid("taskId", "must be a task id (a UUID)"));
        }
        self.tasks
            .get(env, task_id)
            .await?
            .filter(|t| t.flow_id == flow_id)
            .ok_or(DomainError::NotFound(Resource::Task))
    }

    /// One unit of background work; false when there was none.
    ///
    /// A step that panics or fails unexpectedly is tried again, up to
    /// [`crate::unit::ATTEMPTS`] times in all; then the task fails alone, with an `errorId` in
    /// its errors and in the log (docs/operations.md, When one unit of work fails).
    ///
    /// A step claims the oldest due task, counts what it matches (a task matching nothing
    /// fails), then cancels [`CANCEL_BATCH`] instances per transaction until none are left,
    /// and marks the task completed. A worker calls it in a loop, pausing after a false.
    pub async fn step(&self) -> Result<bool, StorageError> {
        let now = self.clock.now();
        let Some(task) = self.tasks.claim(now, now + self.claims.lease).await? else {
            return Ok(false);
        };
        match crate::unit::attempts("cancel task", &task.id, || self.run_step(task.clone())).await {
            Ok(outcome) => outcome,
            Err(failure) => {
                let mut task = task;
                task.status = CancelStatus::Failed;
                task.errors.push(failure.message());
                task.updated = self.clock.now();
                self.saved(&task).await?;
                Ok(true)
            }
        }
    }

    /// Saves the task; false (counted) when its lease had passed to another holder.
    async fn saved(&self, task: &CancelTask) -> Result<bool, StorageError> {
        let held = self.tasks.save(task).await?;
        Ok(self.claims.held(held))
    }

    /// One step of a claimed task.
    async fn run_step(&self, mut task: CancelTask) -> Result<bool, StorageError> {
        if task.expected.is_none() {
            let (instances, cards) = self.tasks.count(&task).await?;
            task.expected = Some(instances);
            task.cards_expected = Some(if task.filter.cancel_cards { cards } else { 0 });
            if instances == 0 {
                task.status = CancelStatus::Failed;
                task.errors = vec!["no matching flow instances were found".into()];
            }
            task.updated = self.clock.now();
            if !self.saved(&task).await? || task.status == CancelStatus::Failed {
                return Ok(true);
            }
        }
        // A step that outlasts its lease may be taken over (a claim takes a task whose lease
        // ran out): this holder's next batch then changes nothing, and it stops there.
        loop {
            let Some(done) = self
                .tasks
                .cancel_batch(&task, CANCEL_BATCH, self.clock.now())
                .await?
            else {
                self.claims.held(false);
                return Ok(true);
            };
            if done < u64::from(CANCEL_BATCH) {
                break;
            }
        }
        let held = task.lease_until;
        let mut task = self
            .tasks
            .get(&task.environment_id, &task.id)
            .await?
            .unwrap_or(task);
        task.lease_until = held;
        task.status = CancelStatus::Completed;
        task.updated = self.clock.now();
        self.saved(&task).await?;
        Ok(true)
    }
}

/// A non-negative whole number, whether written `3` or `3.0`.
fn whole_number(v: &Value) -> Option<u64> {
    v.as_u64().or_else(|| {
        v.as_f64()
            .filter(|f| f.fract() == 0.0 && (0.0..=f64::from(u32::MAX)).contains(f))
            .map(|f| f as u64)
    })
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;
    use serde_json::json;

    use super::*;

    fn t(s: i64) -> Timestamp {
        chrono::Utc
            .timestamp_opt(1_800_000_000 + s, 0)
            .single()
            .expect("time")
    }

    #[test]
    fn a_publishs_cancel_covers_the_versions_before_it_only() {
        let t = task(CancelFilter {
            before_version: Some(3),
            cancel_cards: true,
            ..Default::default()
        });
        assert!(t.covers("inv", 1, t.created, "u1"));
        assert!(t.covers("inv", 2, t.created, "u1"));
        assert!(
            !t.covers("inv", 3, t.created, "u1"),
            "the version published"
        );
        assert!(!t.covers("inv", 4, t.created, "u1"));
        assert!(t.covers_invocation("inv", 2, t.created));
        assert!(!t.covers_invocation("inv", 3, t.created));
    }

    fn task(filter: CancelFilter) -> CancelTask {
        CancelTask::new(new_uuid(), "env", "flw", filter, t(10))
    }

    #[test]
    fn bodies_parse_with_defaults_and_every_problem() {
        let f = CancelFilter::parse(None).expect("no body");
        assert!(f.cancel_cards && f.end_user_id.is_none());
        let f = CancelFilter::parse(Some(&json!({"endUserId": "u1", "flowInvocationId": "i1",
            "flowConfigVersion": 2, "cancelCards": false, "other": 1})))
        .expect("full");
        assert_eq!(
            f,
            CancelFilter {
                end_user_id: Some("u1".into()),
                invocation_id: Some("i1".into()),
                flow_version: Some(2),
                cancel_cards: false,
                before_version: None,
            }
        );
        let Err(DomainError::Validation(errors)) = CancelFilter::parse(Some(
            &json!({"endUserId": 3, "flowInvocationId": "", "flowConfigVersion": 0,
                "cancelCards": "yes"}),
        )) else {
            panic!("invalid")
        };
        let fields: Vec<_> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "endUserId",
                "flowInvocationId",
                "flowConfigVersion",
                "cancelCards"
            ]
        );
        assert!(CancelFilter::parse(Some(&json!([]))).is_err());
        // Past what a version column holds: refused here, not failed in storage (a 500).
        assert!(CancelFilter::parse(Some(&json!({"flowConfigVersion": 2_147_483_647}))).is_ok());
        assert!(
            CancelFilter::parse(Some(&json!({"flowConfigVersion": 2_147_483_648u64}))).is_err()
        );
    }

    #[test]
    fn markers_cover_only_matching_work_queued_before_them() {
        let all = task(CancelFilter {
            cancel_cards: true,
            ..Default::default()
        });
        assert!(all.covers("i1", 1, t(9), "u1"));
        assert!(all.covers("i1", 1, t(10), "u1"));
        assert!(
            !all.covers("i1", 1, t(11), "u1"),
            "triggered after the cancel"
        );
        assert!(all.covers_invocation("i1", 1, t(9)));
        let one_user = task(CancelFilter {
            end_user_id: Some("u1".into()),
            ..Default::default()
        });
        assert!(one_user.covers("i1", 1, t(9), "u1"));
        assert!(!one_user.covers("i1", 1, t(9), "u2"));
        assert!(!one_user.covers_invocation("i1", 1, t(9)));
        let narrow = task(CancelFilter {
            invocation_id: Some("i1".into()),
            flow_version: Some(2),
            ..Default::default()
        });
        assert!(narrow.covers("i1", 2, t(9), "u"));
        assert!(!narrow.covers("i2", 2, t(9), "u"));
        assert!(!narrow.covers("i1", 1, t(9), "u"));
    }

    fn service(repo: MockCancelRepository) -> CancelService {
        let mut clock = crate::time::MockClock::new();
        clock.expect_now().returning(|| t(20));
        CancelService::new(
            Arc::new(repo),
            Arc::new(crate::flow::MockFlowRepository::new()),
            Arc::new(clock),
        )
    }

    #[tokio::test]
    async fn a_task_matching_nothing_fails_and_one_matching_completes_batch_by_batch() {
        let mut repo = MockCancelRepository::new();
        repo.expect_claim()
            .returning(|_, _| Ok(Some(task(CancelFilter::default()))));
        repo.expect_count().returning(|_| Ok((0, 0)));
        repo.expect_save()
            .withf(|t| {
                t.status == CancelStatus::Failed && t.expected == Some(0) && t.errors.len() == 1
            })
            .times(1)
            .returning(|_| Ok(true));
        repo.expect_cancel_batch().never();
        assert!(service(repo).step().await.expect("step"));

        let mut repo = MockCancelRepository::new();
        repo.expect_claim().returning(|_, _| {
            Ok(Some(task(CancelFilter {
                cancel_cards: false,
                ..Default::default()
            })))
        });
        repo.expect_count().returning(|_| Ok((1_500, 1_500)));
        let mut batches = vec![500u64, 1_000];
        repo.expect_cancel_batch()
            .times(2)
            .returning(move |_, _, _| Ok(Some(batches.pop().unwrap_or(0))));
        repo.expect_get().returning(|_, _| Ok(None));
        let mut saves = vec![CancelStatus::Completed, CancelStatus::Processing];
        repo.expect_save()
            .times(2)
            .withf(|t| t.cards_expected == Some(0) && t.expected == Some(1_500))
            .returning(move |t| {
                assert_eq!(Some(t.status), saves.pop());
                Ok(true)
            });
        assert!(service(repo).step().await.expect("step"));
    }

    #[tokio::test]
    async fn a_task_whose_step_panics_is_tried_three_times_then_fails_alone_with_an_error_id() {
        let mut repo = MockCancelRepository::new();
        repo.expect_claim()
            .times(1)
            .returning(|_, _| Ok(Some(task(CancelFilter::default()))));
        repo.expect_count()
            .times(crate::unit::ATTEMPTS as usize)
            .returning(|_| panic!("injected: counting panics"));
        repo.expect_save()
            .withf(|t| {
                t.status == CancelStatus::Failed
                    && t.errors.len() == 1
                    && t.errors[0].contains("errorId err_")
                    && !t.errors[0].contains("injected")
            })
            .times(1)
            .returning(|_| Ok(true));
        assert!(service(repo).step().await.expect("the loop goes on"));
    }

    #[tokio::test]
    async fn a_holder_whose_lease_passed_to_another_stops_and_counts_it() {
        // Every write carries the lease the claim took; the repository refuses it once another
        // holder has claimed the task (None / false), and the service stops there.
        let mut repo = MockCancelRepository::new();
        repo.expect_claim().times(1).returning(|_, until| {
            let mut claimed = task(CancelFilter::default());
            claimed.expected = Some(2_000);
            claimed.lease_until = Some(until);
            Ok(Some(claimed))
        });
        let held = t(20) + Duration::seconds(i64::from(crate::unit::LEASE_SECONDS));
        let mut batches = vec![None, Some(u64::from(CANCEL_BATCH))];
        repo.expect_cancel_batch()
            .withf(move |t, _, _| t.lease_until == Some(held))
            .times(2)
            .returning(move |_, _, _| Ok(batches.pop().flatten()));
        repo.expect_save().never();
        repo.expect_get().never();
        let svc = service(repo);
        assert!(svc.step().await.expect("step"));
        assert_eq!(svc.take_stale(), 1);
        assert_eq!(svc.take_stale(), 0);

        let mut repo = MockCancelRepository::new();
        repo.expect_claim().times(1).returning(|_, until| {
            let mut claimed = task(CancelFilter::default());
            claimed.lease_until = Some(until);
            Ok(Some(claimed))
        });
        repo.expect_count().returning(|_| Ok((5, 5)));
        repo.expect_save()
            .withf(move |t| t.lease_until == Some(held))
            .times(1)
            .returning(|_| Ok(false));
        repo.expect_cancel_batch().never();
        let svc = service(repo);
        assert!(svc.step().await.expect("step"));
        assert_eq!(svc.take_stale(), 1);
    }

    #[test]
    fn progress_and_uuids() {
        let mut t1 = task(CancelFilter::default());
        assert_eq!(t1.progress(), 0);
        t1.expected = Some(200);
        t1.actual = 100;
        assert_eq!(t1.progress(), 50);
        t1.actual = 200;
        assert_eq!(t1.progress(), 99, "100 only once completed");
        t1.status = CancelStatus::Completed;
        assert_eq!(t1.progress(), 100);
        let id = new_uuid();
        assert!(is_uuid(&id), "{id}");
        assert_eq!(&id[14..15], "4");
        assert!(!is_uuid("not-a-uuid"));
    }
}
