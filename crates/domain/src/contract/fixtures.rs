//! What every case starts from: the ports under test, and the folders, flows and versions
//! the cases store, all at fixed times.

use std::sync::Arc;

use chrono::{Duration, TimeZone, Utc};
use serde_json::json;

use crate::flow::{SettingsRepository, VersionStatus};
use crate::{Flow, FlowRepository, FlowVersion, Folder, FolderRepository, Timestamp};

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

/// A fixed time, `seconds` after the cases' epoch (with milliseconds, which stores must keep).
pub(super) fn t(seconds: i64) -> Timestamp {
    let base = Utc
        .with_ymd_and_hms(2026, 11, 22, 10, 0, 0)
        .single()
        .unwrap_or_default();
    base + Duration::milliseconds(seconds * 1000 + 123)
}

/// A folder of organisation `org_1`, made at `t(3)`.
pub(super) fn folder(id: &str, env: &str, parent: Option<&str>, name: &str) -> Folder {
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

/// A flow of organisation `org_1`, made at `t(5)`, with a description.
pub(super) fn flow(id: &str, env: &str, name: &str) -> Flow {
    Flow {
        description: "about".into(),
        ..Flow::new(id, env, "org_1", name, t(5))
    }
}

/// Version `n` of `flow`, with a configuration holding a field no store may drop.
pub(super) fn version(flow: &str, n: u32, status: VersionStatus) -> FlowVersion {
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
