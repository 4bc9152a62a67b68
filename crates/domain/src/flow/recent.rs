//! Flows read in the last second, kept for the hot path of triggers.
//!
//! Every `/start`, `/test` and CSV step reads its flow (is it published, archived, which
//! version runs); at thousands of triggers a second that read was a large share of a
//! trigger's time (docs/architecture.md, The engine).
//! [`RecentFlows`] wraps the repository: a flow read less than [`FLOW_TTL_MS`] ago is
//! answered again, unless a flow was written since through this wrapper (every write of this
//! process goes through it), which forgets every flow kept. So a process sees its own changes
//! at once, and another process's changes (several servers on one PostgreSQL) within a
//! second — as with authenticated callers.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use chrono::Duration;

use super::{Flow, FlowFilter, FlowRepository, FlowVersion, VersionChange, VersionRef};
use crate::page::PageRequest;
use crate::{Clock, StorageError, Timestamp};

/// How long a flow read is answered again.
pub const FLOW_TTL_MS: i64 = 1_000;
/// Flows kept at most; all are forgotten when it is reached.
const MAX_KEPT: usize = 10_000;

/// A flow as read, the write generation it was read in, and when.
type Kept = (Flow, u64, Timestamp);

/// A [`FlowRepository`] that answers a flow read less than [`FLOW_TTL_MS`] ago again,
/// unless a flow was inserted or saved through it since (whether or not that write
/// succeeded). Every other read, and every write, goes to the repository it wraps. At most
/// 10,000 flows are kept; when that many are, all are forgotten.
pub struct RecentFlows {
    inner: Arc<dyn FlowRepository>,
    clock: Arc<dyn Clock>,
    /// Incremented after every write: a flow kept from an earlier generation is stale.
    generation: AtomicU64,
    kept: Mutex<HashMap<(String, String), Kept>>,
}

impl RecentFlows {
    /// Wraps `inner`; `clock` tells how long ago a flow was read. Every write of the process
    /// must go through the wrapper for the process to see its own changes at once.
    pub fn new(inner: Arc<dyn FlowRepository>, clock: Arc<dyn Clock>) -> Self {
        Self {
            inner,
            clock,
            generation: AtomicU64::new(0),
            kept: Mutex::default(),
        }
    }

    /// After a write, whether it succeeded or not (a lost compare-and-swap means the flow
    /// kept is stale): nothing read before it is answered again.
    fn written(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }
}

#[async_trait]
impl FlowRepository for RecentFlows {
    async fn insert(&self, flow: &Flow, first: Option<FlowVersion>) -> Result<(), StorageError> {
        let result = self.inner.insert(flow, first).await;
        self.written();
        result
    }

    async fn get(&self, environment_id: &str, flow_id: &str) -> Result<Option<Flow>, StorageError> {
        let key = (environment_id.to_owned(), flow_id.to_owned());
        let now = self.clock.now();
        // Read before the flow is: a write that lands meanwhile makes this read stale.
        let generation = self.generation.load(Ordering::Acquire);
        if let Some((flow, read_in, at)) = self.kept.lock().ok().and_then(|k| k.get(&key).cloned())
        {
            if read_in == generation && now - at < Duration::milliseconds(FLOW_TTL_MS) {
                return Ok(Some(flow));
            }
        }
        let found = self.inner.get(environment_id, flow_id).await?;
        if let (Some(flow), Ok(mut kept)) = (&found, self.kept.lock()) {
            if kept.len() >= MAX_KEPT {
                kept.clear();
            }
            kept.insert(key, (flow.clone(), generation, now));
        }
        Ok(found)
    }

    async fn list(
        &self,
        environment_id: &str,
        filter: &FlowFilter,
        page: &PageRequest,
    ) -> Result<Vec<Flow>, StorageError> {
        self.inner.list(environment_id, filter, page).await
    }

    async fn get_version(
        &self,
        flow_id: &str,
        version: VersionRef,
    ) -> Result<Option<FlowVersion>, StorageError> {
        self.inner.get_version(flow_id, version).await
    }

    async fn save(
        &self,
        flow: &Flow,
        expected_revision: i64,
        change: VersionChange,
    ) -> Result<(), StorageError> {
        let result = self.inner.save(flow, expected_revision, change).await;
        self.written();
        result
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicI64;

    use chrono::TimeZone;
    use mockall::predicate::eq;

    use super::*;
    use crate::flow::MockFlowRepository;
    use crate::time::MockClock;

    fn flow(revision: i64) -> Flow {
        Flow {
            id: "flw".into(),
            environment_id: "env".into(),
            organisation_id: "org".into(),
            name: "F".into(),
            description: String::new(),
            folder_id: None,
            archived: false,
            latest_version: 1,
            published_version: Some(1),
            draft_version: None,
            variables: Default::default(),
            revision,
            created: at(0),
            updated: at(0),
        }
    }

    fn at(ms: i64) -> Timestamp {
        chrono::Utc
            .with_ymd_and_hms(2026, 11, 23, 10, 0, 0)
            .single()
            .expect("time")
            + Duration::milliseconds(ms)
    }

    /// Over a repository whose every read answers the next revision; the clock reads `now`.
    fn recent(now: Arc<AtomicI64>) -> RecentFlows {
        let mut inner = MockFlowRepository::new();
        let reads = AtomicI64::new(0);
        inner
            .expect_get()
            .with(eq("env"), eq("flw"))
            .returning(move |_, _| Ok(Some(flow(reads.fetch_add(1, Ordering::SeqCst)))));
        inner.expect_get().returning(|_, _| Ok(None));
        inner
            .expect_save()
            .returning(|_, _, _| Err(StorageError::StaleRevision));
        let mut clock = MockClock::new();
        clock
            .expect_now()
            .returning(move || at(now.load(Ordering::SeqCst)));
        RecentFlows::new(Arc::new(inner), Arc::new(clock))
    }

    async fn revision(flows: &RecentFlows) -> Option<i64> {
        flows
            .get("env", "flw")
            .await
            .expect("get")
            .map(|f| f.revision)
    }

    #[tokio::test]
    async fn a_flow_is_read_again_after_a_second_or_after_any_write() {
        let now = Arc::new(AtomicI64::new(0));
        let flows = recent(now.clone());
        assert_eq!(revision(&flows).await, Some(0));
        now.store(999, Ordering::SeqCst);
        assert_eq!(revision(&flows).await, Some(0), "kept for a second");
        now.store(1_000, Ordering::SeqCst);
        assert_eq!(revision(&flows).await, Some(1), "read again after it");
        // A write, even a refused one, forgets what was kept.
        let refused = flows.save(&flow(1), 1, VersionChange::None).await;
        assert_eq!(refused, Err(StorageError::StaleRevision));
        assert_eq!(revision(&flows).await, Some(2));
        assert_eq!(revision(&flows).await, Some(2));
        // A flow not found is not kept, and is not another flow's.
        assert_eq!(flows.get("env", "other").await.expect("get"), None);
        assert_eq!(flows.get("env_b", "flw").await.expect("get"), None);
    }
}
