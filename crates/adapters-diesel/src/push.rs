//! Push notification platforms, their credential and principal sealed with [`SecretBox`].

use std::sync::Arc;

use async_trait::async_trait;
use chrono::NaiveDateTime;
use diesel::prelude::*;
use domain::push::{PushPlatform, PushPlatformRepository};
use domain::StorageError;

use crate::crypto::SecretBox;
use crate::db::Database;
use crate::error::corrupt;
use crate::schema::push_platforms;

#[derive(Queryable, Selectable, Insertable, AsChangeset)]
#[diesel(table_name = push_platforms, treat_none_as_null = true)]
struct Row {
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

pub struct DieselPushPlatformRepository {
    db: Database,
    secrets: Arc<SecretBox>,
}

impl DieselPushPlatformRepository {
    pub fn new(db: Database, secrets: Arc<SecretBox>) -> Self {
        Self { db, secrets }
    }

    fn seal(&self, p: &PushPlatform) -> Result<Row, StorageError> {
        Ok(Row {
            id: p.id.clone(),
            environment_id: p.environment_id.clone(),
            app_id: p.app_id.clone(),
            platform: p.platform.clone(),
            arn: p.arn.clone(),
            enabled: p.enabled,
            credential: self
                .secrets
                .seal(&p.credential, &context(&p.id, "credential"))?,
            principal: p
                .principal
                .as_deref()
                .map(|v| self.secrets.seal(v, &context(&p.id, "principal")))
                .transpose()?,
            properties: serde_json::to_string(&p.properties)
                .map_err(|e| corrupt("properties", e))?,
            facts: serde_json::to_string(&p.facts).map_err(|e| corrupt("facts", e))?,
            created: p.created.naive_utc(),
            updated: p.updated.naive_utc(),
        })
    }

    fn open(&self, r: Row) -> Result<PushPlatform, StorageError> {
        Ok(PushPlatform {
            credential: self
                .secrets
                .open(&r.credential, &context(&r.id, "credential"))?,
            principal: r
                .principal
                .as_deref()
                .map(|v| self.secrets.open(v, &context(&r.id, "principal")))
                .transpose()?,
            properties: serde_json::from_str(&r.properties)
                .map_err(|e| corrupt("properties", e))?,
            facts: serde_json::from_str(&r.facts).map_err(|e| corrupt("facts", e))?,
            id: r.id,
            environment_id: r.environment_id,
            app_id: r.app_id,
            platform: r.platform,
            arn: r.arn,
            enabled: r.enabled,
            created: r.created.and_utc(),
            updated: r.updated.and_utc(),
        })
    }
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
