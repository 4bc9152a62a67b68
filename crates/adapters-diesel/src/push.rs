//! Push notification platforms, their credential and principal sealed with [`SecretBox`].

use std::sync::Arc;

use async_trait::async_trait;
use chrono::NaiveDateTime;
use diesel::prelude::*;
use domain::push::{Device, DeviceRepository, PushPlatform, PushPlatformRepository};
use domain::StorageError;

use crate::crypto::SecretBox;
use crate::db::Database;
use crate::error::corrupt;
use crate::schema::{devices, push_platforms};

#[derive(Queryable, Selectable, Insertable, AsChangeset)]
#[diesel(table_name = push_platforms, treat_none_as_null = true)]
pub(crate) struct Row {
    id: String,
    environment_id: String,
    app_id: String,
    platform: String,
    arn: String,
    enabled: bool,
    credential: String,
    principal: Option<String>,
    properties: String,
    facts: String,
    created: NaiveDateTime,
    updated: NaiveDateTime,
}

fn context(id: &str, field: &str) -> String {
    format!("push_platforms.{field}:{id}")
}

/// The domain's `PushPlatformRepository` port on the service's database.
pub struct DieselPushPlatformRepository {
    db: Database,
    secrets: Arc<SecretBox>,
}

impl DieselPushPlatformRepository {
    /// Over `db`, with `secrets` sealing what it stores secret.
    pub fn new(db: Database, secrets: Arc<SecretBox>) -> Self {
        Self { db, secrets }
    }

    fn seal(&self, p: &PushPlatform) -> Result<Row, StorageError> {
        seal(&self.secrets, p)
    }

    fn open(&self, r: Row) -> Result<PushPlatform, StorageError> {
        open(&self.secrets, r)
    }
}

fn seal(secrets: &SecretBox, p: &PushPlatform) -> Result<Row, StorageError> {
    Ok(Row {
        id: p.id.clone().into(),
        environment_id: p.environment_id.clone(),
        app_id: p.app_id.clone(),
        platform: p.platform.clone(),
        arn: p.arn.clone(),
        enabled: p.enabled,
        credential: secrets.seal(&p.credential, &context(&p.id, "credential"))?,
        principal: p
            .principal
            .as_deref()
            .map(|v| secrets.seal(v, &context(&p.id, "principal")))
            .transpose()?,
        properties: serde_json::to_string(&p.properties).map_err(|e| corrupt("properties", e))?,
        facts: serde_json::to_string(&p.facts).map_err(|e| corrupt("facts", e))?,
        created: p.created.naive_utc(),
        updated: p.updated.naive_utc(),
    })
}

pub(crate) fn open(secrets: &SecretBox, r: Row) -> Result<PushPlatform, StorageError> {
    Ok(PushPlatform {
        credential: secrets.open(&r.credential, &context(&r.id, "credential"))?,
        principal: r
            .principal
            .as_deref()
            .map(|v| secrets.open(v, &context(&r.id, "principal")))
            .transpose()?,
        properties: serde_json::from_str(&r.properties).map_err(|e| corrupt("properties", e))?,
        facts: serde_json::from_str(&r.facts).map_err(|e| corrupt("facts", e))?,
        id: r.id.into(),
        environment_id: r.environment_id,
        app_id: r.app_id,
        platform: r.platform,
        arn: r.arn,
        enabled: r.enabled,
        created: r.created.and_utc(),
        updated: r.updated.and_utc(),
    })
}

#[async_trait]
impl PushPlatformRepository for DieselPushPlatformRepository {
    async fn insert(&self, platform: &PushPlatform) -> Result<(), StorageError> {
        let row = self.seal(platform)?;
        self.db
            .transaction(move |conn| {
                diesel::insert_into(push_platforms::table)
                    .values(&row)
                    .execute(conn)?;
                Ok(())
            })
            .await
    }

    async fn list(&self, environment_id: &str) -> Result<Vec<PushPlatform>, StorageError> {
        let env = environment_id.to_owned();
        let rows: Vec<Row> = self
            .db
            .run(move |conn| {
                Ok(push_platforms::table
                    .filter(push_platforms::environment_id.eq(env))
                    .order((push_platforms::app_id, push_platforms::platform))
                    .select(Row::as_select())
                    .load(conn)?)
            })
            .await?;
        rows.into_iter().map(|r| self.open(r)).collect()
    }

    async fn find(
        &self,
        environment_id: &str,
        app_id: &str,
        platform: &str,
    ) -> Result<Option<PushPlatform>, StorageError> {
        let (env, app, platform) = (
            environment_id.to_owned(),
            app_id.to_owned(),
            platform.to_owned(),
        );
        let row: Option<Row> = self
            .db
            .run(move |conn| {
                Ok(push_platforms::table
                    .filter(push_platforms::environment_id.eq(env))
                    .filter(push_platforms::app_id.eq(app))
                    .filter(push_platforms::platform.eq(platform))
                    .select(Row::as_select())
                    .first(conn)
                    .optional()?)
            })
            .await?;
        row.map(|r| self.open(r)).transpose()
    }

    async fn get(
        &self,
        environment_id: &str,
        id: &str,
    ) -> Result<Option<PushPlatform>, StorageError> {
        let (env, id) = (environment_id.to_owned(), id.to_owned());
        let row: Option<Row> = self
            .db
            .run(move |conn| {
                Ok(push_platforms::table
                    .filter(push_platforms::environment_id.eq(env))
                    .filter(push_platforms::id.eq(id))
                    .select(Row::as_select())
                    .first(conn)
                    .optional()?)
            })
            .await?;
        row.map(|r| self.open(r)).transpose()
    }

    async fn update(&self, platform: &PushPlatform) -> Result<(), StorageError> {
        let row = self.seal(platform)?;
        self.db
            .transaction(move |conn| {
                diesel::update(
                    push_platforms::table
                        .filter(push_platforms::environment_id.eq(&row.environment_id))
                        .filter(push_platforms::id.eq(&row.id)),
                )
                .set(&row)
                .execute(conn)?;
                Ok(())
            })
            .await
    }

    async fn delete_disabled(&self, environment_id: &str, id: &str) -> Result<bool, StorageError> {
        let (env, id) = (environment_id.to_owned(), id.to_owned());
        let n = self
            .db
            .transaction(move |conn| {
                Ok(diesel::delete(
                    push_platforms::table
                        .filter(push_platforms::environment_id.eq(env))
                        .filter(push_platforms::id.eq(id))
                        .filter(push_platforms::enabled.eq(false)),
                )
                .execute(conn)?)
            })
            .await?;
        Ok(n == 1)
    }
}

#[derive(Queryable, Selectable, Insertable)]
#[diesel(table_name = devices)]
pub(crate) struct DeviceRow {
    environment_id: String,
    token: String,
    user_id: String,
    app_id: String,
    platform: String,
    created: NaiveDateTime,
    updated: NaiveDateTime,
}

pub(crate) fn device(r: DeviceRow) -> Device {
    Device {
        environment_id: r.environment_id,
        user_id: r.user_id,
        token: r.token,
        app_id: r.app_id,
        platform: r.platform,
        created: r.created.and_utc(),
        updated: r.updated.and_utc(),
    }
}

/// The domain's `DeviceRepository` port on the service's database.
pub struct DieselDeviceRepository {
    db: Database,
}

impl DieselDeviceRepository {
    /// Over `db`.
    pub fn new(db: Database) -> Self {
        Self { db }
    }
}

fn device_row(d: &Device) -> DeviceRow {
    DeviceRow {
        environment_id: d.environment_id.clone(),
        token: d.token.clone(),
        user_id: d.user_id.clone(),
        app_id: d.app_id.clone(),
        platform: d.platform.clone(),
        created: d.created.naive_utc(),
        updated: d.updated.naive_utc(),
    }
}

#[async_trait]
impl DeviceRepository for DieselDeviceRepository {
    async fn upsert_own(&self, d: &Device) -> Result<Option<Device>, StorageError> {
        let row = device_row(d);
        let stored = self
            .db
            .transaction(move |conn| {
                // A new token is inserted; a token stored already is updated only where this
                // user holds it. Either statement settles a race on its own: the insert's
                // conflict waits for the other insert, the update sees the latest holder.
                let inserted = crate::per_backend!(&mut *conn, c =>
                    diesel::insert_into(devices::table)
                        .values(&row)
                        .on_conflict((devices::environment_id, devices::token))
                        .do_nothing()
                        .execute(c))?;
                let mine = devices::table
                    .filter(devices::environment_id.eq(&row.environment_id))
                    .filter(devices::token.eq(&row.token))
                    .filter(devices::user_id.eq(&row.user_id));
                if inserted == 0 {
                    let updated = diesel::update(mine)
                        .set((
                            devices::app_id.eq(&row.app_id),
                            devices::platform.eq(&row.platform),
                            devices::updated.eq(row.updated),
                        ))
                        .execute(conn)?;
                    if updated == 0 {
                        return Ok(None);
                    }
                }
                Ok(Some(mine.select(DeviceRow::as_select()).first(conn)?))
            })
            .await?;
        Ok(stored.map(device))
    }

    async fn upsert(&self, d: &Device) -> Result<Device, StorageError> {
        let row = device_row(d);
        let stored = self
            .db
            .transaction(move |conn| {
                let changes = (
                    devices::user_id.eq(&row.user_id),
                    devices::app_id.eq(&row.app_id),
                    devices::platform.eq(&row.platform),
                    devices::updated.eq(row.updated),
                );
                // ON CONFLICT is outside MultiConnection's subset; both backends speak it.
                crate::per_backend!(&mut *conn, c => diesel::insert_into(devices::table)
                    .values(&row)
                    .on_conflict((devices::environment_id, devices::token))
                    .do_update()
                    .set(changes)
                    .execute(c))?;
                Ok(devices::table
                    .filter(devices::environment_id.eq(&row.environment_id))
                    .filter(devices::token.eq(&row.token))
                    .select(DeviceRow::as_select())
                    .first(conn)?)
            })
            .await?;
        Ok(device(stored))
    }

    async fn delete(
        &self,
        environment_id: &str,
        user_id: &str,
        token: &str,
    ) -> Result<bool, StorageError> {
        let (env, user, token) = (
            environment_id.to_owned(),
            user_id.to_owned(),
            token.to_owned(),
        );
        let n = self
            .db
            .transaction(move |conn| {
                Ok(diesel::delete(
                    devices::table
                        .filter(devices::environment_id.eq(env))
                        .filter(devices::user_id.eq(user))
                        .filter(devices::token.eq(token)),
                )
                .execute(conn)?)
            })
            .await?;
        Ok(n == 1)
    }

    async fn of_user(
        &self,
        environment_id: &str,
        user_id: &str,
    ) -> Result<Vec<Device>, StorageError> {
        let (env, user) = (environment_id.to_owned(), user_id.to_owned());
        let rows: Vec<DeviceRow> = self
            .db
            .run(move |conn| {
                Ok(devices::table
                    .filter(devices::environment_id.eq(env))
                    .filter(devices::user_id.eq(user))
                    .order(devices::token)
                    .select(DeviceRow::as_select())
                    .load(conn)?)
            })
            .await?;
        Ok(rows.into_iter().map(device).collect())
    }
}
