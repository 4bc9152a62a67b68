use async_trait::async_trait;
use chrono::NaiveDateTime;
use diesel::prelude::*;
use domain::flow::{
    EnvironmentSettings, FlowFilter, FlowStatus, FolderFilter, SettingsRepository, VersionChange,
    VersionRef, VersionStatus,
};
use domain::{Flow, FlowRepository, FlowVersion, PageRequest, StorageError, Timestamp};
use serde_json::{Map, Value};

use crate::db::{AnyConnection, Database, Failure};
use crate::error::{corrupt, read_number, write_number};
use crate::schema::{action_flow_versions, action_flows, environment_settings};

#[derive(Queryable, Selectable, Insertable, AsChangeset)]
#[diesel(table_name = action_flows, treat_none_as_null = true)]
struct FlowRow {
    id: String,
    environment_id: String,
    organisation_id: String,
    name: String,
    name_folded: String,
    description: String,
    folder_id: Option<String>,
    archived: bool,
    latest_version: i32,
    published_version: Option<i32>,
    draft_version: Option<i32>,
    variables: String,
    revision: i64,
    created: NaiveDateTime,
    updated: NaiveDateTime,
}

#[derive(Queryable, Selectable, Insertable, AsChangeset)]
#[diesel(table_name = action_flow_versions, treat_none_as_null = true)]
struct VersionRow {
    flow_id: String,
    version: i32,
    status: String,
    config: String,
    created_by: String,
    approved_by: Option<String>,
    approved: Option<NaiveDateTime>,
    published: Option<NaiveDateTime>,
    created: NaiveDateTime,
    updated: NaiveDateTime,
}

impl FlowRow {
    fn from_flow(f: &Flow) -> Result<Self, StorageError> {
        Ok(FlowRow {
            id: f.id.clone().into(),
            environment_id: f.environment_id.clone(),
            organisation_id: f.organisation_id.clone(),
            name: f.name.clone(),
            name_folded: f.name.to_lowercase(),
            description: f.description.clone(),
            folder_id: f.folder_id.clone(),
            archived: f.archived,
            latest_version: write_number("flow latest version", f.latest_version)?,
            published_version: f
                .published_version
                .map(|n| write_number("flow published version", n))
                .transpose()?,
            draft_version: f
                .draft_version
                .map(|n| write_number("flow draft version", n))
                .transpose()?,
            variables: Value::Object(f.variables.clone()).to_string(),
            revision: f.revision,
            created: f.created.naive_utc(),
            updated: f.updated.naive_utc(),
        })
    }

    fn into_flow(self) -> Result<Flow, StorageError> {
        let variables: Map<String, Value> =
            serde_json::from_str(&self.variables).map_err(|e| corrupt("flow variables", e))?;
        Ok(Flow {
            id: self.id.into(),
            environment_id: self.environment_id,
            organisation_id: self.organisation_id,
            name: self.name,
            description: self.description,
            folder_id: self.folder_id,
            archived: self.archived,
            latest_version: read_number("flow latest version", self.latest_version)?,
            published_version: self
                .published_version
                .map(|n| read_number("flow published version", n))
                .transpose()?,
            draft_version: self
                .draft_version
                .map(|n| read_number("flow draft version", n))
                .transpose()?,
            variables,
            revision: self.revision,
            created: self.created.and_utc(),
            updated: self.updated.and_utc(),
        })
    }
}

impl VersionRow {
    fn from_version(v: &FlowVersion) -> Result<Self, StorageError> {
        Ok(VersionRow {
            flow_id: v.flow_id.clone(),
            version: write_number("flow version number", v.version)?,
            status: v.status.as_str().to_owned(),
            config: v.config.to_string(),
            created_by: v.created_by.clone(),
            approved_by: v.approved_by.clone(),
            approved: v.approved.map(|t| t.naive_utc()),
            published: v.published.map(|t| t.naive_utc()),
            created: v.created.naive_utc(),
            updated: v.updated.naive_utc(),
        })
    }

    fn into_version(self) -> Result<FlowVersion, StorageError> {
        let status = VersionStatus::parse(&self.status)
            .ok_or_else(|| corrupt("version status", &self.status))?;
        Ok(FlowVersion {
            flow_id: self.flow_id,
            version: read_number("flow version number", self.version)?,
            status,
            config: serde_json::from_str(&self.config).map_err(|e| corrupt("configuration", e))?,
            created_by: self.created_by,
            approved_by: self.approved_by,
            approved: self.approved.map(|t| t.and_utc()),
            published: self.published.map(|t| t.and_utc()),
            created: self.created.and_utc(),
            updated: self.updated.and_utc(),
        })
    }
}

/// `%` and `_` are wildcards of LIKE; `\` is our escape character.
fn like_contains(text: &str) -> String {
    let mut pattern = String::with_capacity(text.len() + 2);
    pattern.push('%');
    for c in text.chars() {
        if matches!(c, '%' | '_' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push('%');
    pattern
}

/// The domain's `FlowRepository` port on the service's database.
pub struct DieselFlowRepository {
    db: Database,
}

impl DieselFlowRepository {
    /// Over `db`.
    pub fn new(db: Database) -> Self {
        Self { db }
    }
}

fn insert_version(conn: &mut AnyConnection, version: &FlowVersion) -> Result<(), Failure> {
    diesel::insert_into(action_flow_versions::table)
        .values(VersionRow::from_version(version).map_err(Failure::Domain)?)
        .execute(conn)?;
    Ok(())
}

#[async_trait]
impl FlowRepository for DieselFlowRepository {
    async fn insert(&self, flow: &Flow, first: Option<FlowVersion>) -> Result<(), StorageError> {
        let row = FlowRow::from_flow(flow)?;
        self.db
            .transaction(move |conn| {
                diesel::insert_into(action_flows::table)
                    .values(&row)
                    .execute(conn)?;
                if let Some(version) = &first {
                    insert_version(conn, version)?;
                }
                Ok(())
            })
            .await
    }

    async fn get(&self, environment_id: &str, flow_id: &str) -> Result<Option<Flow>, StorageError> {
        let (env, id) = (environment_id.to_owned(), flow_id.to_owned());
        let row = self
            .db
            .run(move |conn| {
                Ok(action_flows::table
                    .filter(
                        action_flows::environment_id
                            .eq(env)
                            .and(action_flows::id.eq(id)),
                    )
                    .select(FlowRow::as_select())
                    .first(conn)
                    .optional()?)
            })
            .await?;
        row.map(FlowRow::into_flow).transpose()
    }

    async fn list(
        &self,
        environment_id: &str,
        filter: &FlowFilter,
        page: &PageRequest,
    ) -> Result<Vec<Flow>, StorageError> {
        let env = environment_id.to_owned();
        let filter = filter.clone();
        let page = page.clone();
        let rows = self
            .db
            .run(move |conn| {
                let mut query = action_flows::table
                    .filter(action_flows::environment_id.eq(env))
                    .select(FlowRow::as_select())
                    .order(action_flows::id.desc())
                    .limit(i64::from(page.limit) + 1)
                    .into_boxed();
                if let Some(after) = page.after {
                    query = query.filter(action_flows::id.lt(after));
                }
                if let Some(name) = &filter.name_contains {
                    query = query.filter(
                        action_flows::name_folded
                            .like(like_contains(name))
                            .escape('\\'),
                    );
                }
                query = match filter.status {
                    None => query,
                    Some(FlowStatus::Archived) => query.filter(action_flows::archived.eq(true)),
                    Some(FlowStatus::Published) => query
                        .filter(action_flows::archived.eq(false))
                        .filter(action_flows::published_version.is_not_null()),
                    Some(FlowStatus::Draft) => query
                        .filter(action_flows::archived.eq(false))
                        .filter(action_flows::published_version.is_null()),
                };
                query = match filter.folder {
                    None => query,
                    Some(FolderFilter::In(folder)) => {
                        query.filter(action_flows::folder_id.eq(folder))
                    }
                    Some(FolderFilter::Uncategorized) => {
                        query.filter(action_flows::folder_id.is_null())
                    }
                };
                Ok(query.load(conn)?)
            })
            .await?;
        rows.into_iter().map(FlowRow::into_flow).collect()
    }

    async fn get_version(
        &self,
        flow_id: &str,
        version: VersionRef,
    ) -> Result<Option<FlowVersion>, StorageError> {
        let id = flow_id.to_owned();
        let version = match version {
            VersionRef::Latest => None,
            // No version past the column's range is stored: none is found.
            VersionRef::Number(n) => match i32::try_from(n) {
                Ok(n) => Some(n),
                Err(_) => return Ok(None),
            },
        };
        let row = self
            .db
            .run(move |conn| {
                let query = action_flow_versions::table
                    .filter(action_flow_versions::flow_id.eq(id))
                    .select(VersionRow::as_select())
                    .into_boxed();
                let query = match version {
                    None => query.order(action_flow_versions::version.desc()),
                    Some(n) => query.filter(action_flow_versions::version.eq(n)),
                };
                Ok(query.first(conn).optional()?)
            })
            .await?;
        row.map(VersionRow::into_version).transpose()
    }

    async fn save(
        &self,
        flow: &Flow,
        expected_revision: i64,
        change: VersionChange,
    ) -> Result<(), StorageError> {
        // The port writes the next revision whatever the flow given says.
        let next = Flow {
            revision: expected_revision.saturating_add(1),
            ..flow.clone()
        };
        let row = FlowRow::from_flow(&next)?;
        self.db
            .transaction(move |conn| {
                let target = action_flows::table.filter(
                    action_flows::id
                        .eq(&row.id)
                        .and(action_flows::environment_id.eq(&row.environment_id))
                        .and(action_flows::revision.eq(expected_revision)),
                );
                if diesel::update(target).set(&row).execute(conn)? == 0 {
                    return Err(Failure::Domain(StorageError::StaleRevision));
                }
                apply(conn, &row, &change)?;
                Ok(())
            })
            .await
    }
}

/// The domain's `SettingsRepository` port on the service's database.
pub struct DieselSettingsRepository {
    db: Database,
}

impl DieselSettingsRepository {
    /// Over `db`.
    pub fn new(db: Database) -> Self {
        Self { db }
    }
}

#[async_trait]
impl SettingsRepository for DieselSettingsRepository {
    async fn get(&self, environment_id: &str) -> Result<EnvironmentSettings, StorageError> {
        let env = environment_id.to_owned();
        let approvals = self
            .db
            .run(move |conn| {
                Ok(environment_settings::table
                    .filter(environment_settings::environment_id.eq(env))
                    .select(environment_settings::approvals_enabled)
                    .first::<bool>(conn)
                    .optional()?)
            })
            .await?;
        Ok(EnvironmentSettings {
            approvals_enabled: approvals.unwrap_or(false),
        })
    }

    async fn put(
        &self,
        environment_id: &str,
        settings: EnvironmentSettings,
        at: Timestamp,
    ) -> Result<(), StorageError> {
        let env = environment_id.to_owned();
        self.db
            .run(move |conn| {
                let values = (
                    environment_settings::environment_id.eq(&env),
                    environment_settings::approvals_enabled.eq(settings.approvals_enabled),
                    environment_settings::updated.eq(at.naive_utc()),
                );
                let changes = (
                    environment_settings::approvals_enabled.eq(settings.approvals_enabled),
                    environment_settings::updated.eq(at.naive_utc()),
                );
                // Upserts are outside MultiConnection's common subset; both backends speak
                // the same ON CONFLICT, so the statement is the same in each arm.
                crate::per_backend!(conn, c => diesel::insert_into(environment_settings::table)
                    .values(values)
                    .on_conflict(environment_settings::environment_id)
                    .do_update()
                    .set(changes)
                    .execute(c))?;
                Ok(())
            })
            .await
    }
}

/// Applies `change` to the version rows of the flow `row`, in the save's transaction.
fn apply(conn: &mut AnyConnection, row: &FlowRow, change: &VersionChange) -> Result<(), Failure> {
    match change {
        VersionChange::None => {}
        VersionChange::Insert(version) => insert_version(conn, version)?,
        VersionChange::Update(version) => {
            let version_row = VersionRow::from_version(version).map_err(Failure::Domain)?;
            let key = action_flow_versions::table.filter(
                action_flow_versions::flow_id
                    .eq(&version_row.flow_id)
                    .and(action_flow_versions::version.eq(version_row.version)),
            );
            diesel::update(key).set(&version_row).execute(conn)?;
        }
        VersionChange::Delete(number_to_delete) => {
            let version: i32 =
                write_number("flow version number", *number_to_delete).map_err(Failure::Domain)?;
            diesel::delete(
                action_flow_versions::table.filter(
                    action_flow_versions::flow_id
                        .eq(&row.id)
                        .and(action_flow_versions::version.eq(version)),
                ),
            )
            .execute(conn)?;
        }
        VersionChange::Cancelling(change, older) => {
            apply(conn, row, change)?;
            crate::cancel::insert_publish_cancel(conn, &row.environment_id, &row.id, older)?;
        }
    }
    Ok(())
}
