//! A flow instance's row, and the instance it is read back into.

use diesel::prelude::*;
use domain::flow::steps::run::{self, Records};
use domain::flow::steps::InstanceState;
use domain::trigger::instances::FlowInstance;
use domain::StorageError;

use crate::error::{read_number, write_number};
use crate::millis::At;
use crate::schema::flow_instances;

/// An instance as stored.
#[derive(Queryable, Selectable, Insertable)]
#[diesel(table_name = flow_instances, treat_none_as_default_value = false)]
pub(crate) struct InstanceRow {
    pub(super) environment_id: String,
    pub(super) id: String,
    pub(super) invocation_id: String,
    pub(super) flow_id: String,
    pub(super) flow_version: i32,
    pub(super) user_id: String,
    pub(super) status: String,
    pub(super) steps: String,
    pub(super) due: Option<At>,
    pub(super) lease_until: Option<At>,
    pub(super) revision: i64,
    pub(super) created: At,
    pub(super) updated: At,
}

impl InstanceRow {
    pub(super) fn of(i: &FlowInstance) -> Result<Self, StorageError> {
        Ok(InstanceRow {
            environment_id: i.environment_id.clone(),
            id: i.id.clone(),
            invocation_id: i.invocation_id.clone(),
            flow_id: i.flow_id.clone(),
            flow_version: write_number("flow version", i.flow_version)?,
            user_id: i.user_id.clone(),
            status: i.state.as_str().to_owned(),
            steps: run::encode(&i.records),
            due: i.due.map(At::of),
            lease_until: None,
            revision: i.revision,
            created: At::of(i.created),
            updated: At::of(i.updated),
        })
    }

    pub(super) fn into_instance(self) -> Result<FlowInstance, StorageError> {
        let corrupt =
            |what: String| StorageError::Internal(format!("flow instance {}: {what}", self.id));
        let state = InstanceState::parse(&self.status)
            .ok_or_else(|| corrupt(format!("status `{}`", self.status)))?;
        let records: Records = run::decode(&self.steps).map_err(corrupt)?;
        Ok(FlowInstance {
            flow_version: read_number("flow version", self.flow_version)?,
            environment_id: self.environment_id,
            id: self.id,
            invocation_id: self.invocation_id,
            flow_id: self.flow_id,
            user_id: self.user_id,
            state,
            records,
            due: self.due.map(At::utc),
            revision: self.revision,
            created: self.created.utc(),
            updated: self.updated.utc(),
        })
    }
}
