//! Segments: named, stored filters of an environment's users.

use async_trait::async_trait;
use chrono::NaiveDateTime;
use diesel::prelude::*;
use domain::audience::{Filter, Segment, SegmentRepository};
use domain::StorageError;
use serde_json::Value;

use crate::db::Database;
use crate::error::corrupt;
use crate::schema::segments;

#[derive(Queryable, Selectable, Insertable)]
#[diesel(table_name = segments)]
struct SegmentRow {
    id: String,
    environment_id: String,
    name: String,
    filter: String,
    created: NaiveDateTime,
    updated: NaiveDateTime,
}

/// The domain's `SegmentRepository` port on the service's database.
pub struct DieselSegmentRepository {
    db: Database,
}

impl DieselSegmentRepository {
    /// Over `db`.
    pub fn new(db: Database) -> Self {
        Self { db }
    }
}

fn segment_row(s: &Segment) -> SegmentRow {
    SegmentRow {
        id: s.id.clone().into(),
        environment_id: s.environment_id.clone(),
        name: s.name.clone(),
        filter: s.filter.source.to_string(),
        created: s.created.naive_utc(),
        updated: s.updated.naive_utc(),
    }
}

fn segment(row: SegmentRow) -> Result<Segment, StorageError> {
    let source: Value =
        serde_json::from_str(&row.filter).map_err(|e| corrupt("segment filter", e))?;
    let filter = Filter::parse(&source, "filter")
        .map_err(|e| corrupt("segment filter", format!("{e:?}")))?;
    Ok(Segment {
        id: row.id.into(),
        environment_id: row.environment_id,
        name: row.name,
        filter,
        created: row.created.and_utc(),
        updated: row.updated.and_utc(),
    })
}

#[async_trait]
impl SegmentRepository for DieselSegmentRepository {
    async fn insert(&self, s: &Segment) -> Result<(), StorageError> {
        let row = segment_row(s);
        self.db
            .run(move |conn| {
                diesel::insert_into(segments::table)
                    .values(&row)
                    .execute(conn)?;
                Ok(())
            })
            .await
    }

    async fn get(
        &self,
        environment_id: &str,
        segment_id: &str,
    ) -> Result<Option<Segment>, StorageError> {
        let (env, id) = (environment_id.to_owned(), segment_id.to_owned());
        let row = self
            .db
            .run(move |conn| {
                Ok(segments::table
                    .filter(segments::environment_id.eq(env).and(segments::id.eq(id)))
                    .select(SegmentRow::as_select())
                    .first(conn)
                    .optional()?)
            })
            .await?;
        row.map(segment).transpose()
    }

    async fn list(&self, environment_id: &str) -> Result<Vec<Segment>, StorageError> {
        let env = environment_id.to_owned();
        let rows = self
            .db
            .run(move |conn| {
                Ok(segments::table
                    .filter(segments::environment_id.eq(env))
                    .order((segments::name, segments::id))
                    .select(SegmentRow::as_select())
                    .load(conn)?)
            })
            .await?;
        rows.into_iter().map(segment).collect()
    }

    async fn update(&self, s: &Segment) -> Result<bool, StorageError> {
        let row = segment_row(s);
        self.db
            .run(move |conn| {
                let changed = diesel::update(
                    segments::table.filter(
                        segments::environment_id
                            .eq(&row.environment_id)
                            .and(segments::id.eq(&row.id)),
                    ),
                )
                .set((
                    segments::name.eq(&row.name),
                    segments::filter.eq(&row.filter),
                    segments::updated.eq(row.updated),
                ))
                .execute(conn)?;
                Ok(changed > 0)
            })
            .await
    }

    async fn delete(&self, environment_id: &str, segment_id: &str) -> Result<bool, StorageError> {
        let (env, id) = (environment_id.to_owned(), segment_id.to_owned());
        self.db
            .run(move |conn| {
                Ok(diesel::delete(
                    segments::table
                        .filter(segments::environment_id.eq(env).and(segments::id.eq(id))),
                )
                .execute(conn)?
                    > 0)
            })
            .await
    }
}
