//! Streams: the named channels of an environment's cards, one of them its default.

use async_trait::async_trait;
use chrono::NaiveDateTime;
use diesel::prelude::*;
use domain::audience::{Stream, StreamRepository};
use domain::StorageError;

use crate::db::Database;
use crate::schema::streams;

#[derive(Queryable, Selectable, Insertable)]
#[diesel(table_name = streams)]
struct StreamRow {
    id: String,
    environment_id: String,
    name: String,
    is_default: bool,
    created: NaiveDateTime,
}

/// The domain's `StreamRepository` port on the service's database.
pub struct DieselStreamRepository {
    db: Database,
}

impl DieselStreamRepository {
    /// Over `db`.
    pub fn new(db: Database) -> Self {
        Self { db }
    }
}

fn stream(row: StreamRow) -> Stream {
    Stream {
        id: row.id.into(),
        environment_id: row.environment_id,
        name: row.name,
        is_default: row.is_default,
        created: row.created.and_utc(),
    }
}

#[async_trait]
impl StreamRepository for DieselStreamRepository {
    async fn list(
        &self,
        environment_id: &str,
        default: Stream,
    ) -> Result<Vec<Stream>, StorageError> {
        let env = environment_id.to_owned();
        self.db
            .transaction(move |conn| {
                let has_default = streams::table.filter(
                    streams::environment_id
                        .eq(&env)
                        .and(streams::is_default.eq(true)),
                );
                if !diesel::select(diesel::dsl::exists(has_default)).get_result::<bool>(conn)? {
                    let row = StreamRow {
                        id: default.id.clone().into(),
                        environment_id: env.clone(),
                        name: default.name.clone(),
                        is_default: true,
                        created: default.created.naive_utc(),
                    };
                    // Two first listings may race: the loser's insert does nothing.
                    crate::per_backend!(&mut *conn, c => diesel::insert_into(streams::table)
                        .values(&row)
                        .on_conflict((streams::environment_id, streams::name))
                        .do_nothing()
                        .execute(c))?;
                }
                let rows = streams::table
                    .filter(streams::environment_id.eq(&env))
                    .order((streams::is_default.desc(), streams::created, streams::id))
                    .select(StreamRow::as_select())
                    .load(conn)?;
                Ok(rows.into_iter().map(stream).collect())
            })
            .await
    }

    async fn insert(&self, s: &Stream) -> Result<(), StorageError> {
        let row = StreamRow {
            id: s.id.clone().into(),
            environment_id: s.environment_id.clone(),
            name: s.name.clone(),
            is_default: s.is_default,
            created: s.created.naive_utc(),
        };
        self.db
            .run(move |conn| {
                diesel::insert_into(streams::table)
                    .values(&row)
                    .execute(conn)?;
                Ok(())
            })
            .await
    }

    async fn get(
        &self,
        environment_id: &str,
        stream_id: &str,
    ) -> Result<Option<Stream>, StorageError> {
        let (env, id) = (environment_id.to_owned(), stream_id.to_owned());
        self.db
            .run(move |conn| {
                let row = streams::table
                    .filter(streams::environment_id.eq(env).and(streams::id.eq(id)))
                    .select(StreamRow::as_select())
                    .first(conn)
                    .optional()?;
                Ok(row.map(stream))
            })
            .await
    }

    async fn delete(&self, environment_id: &str, stream_id: &str) -> Result<bool, StorageError> {
        let (env, id) = (environment_id.to_owned(), stream_id.to_owned());
        self.db
            .run(move |conn| {
                Ok(diesel::delete(
                    streams::table.filter(
                        streams::environment_id
                            .eq(env)
                            .and(streams::id.eq(id))
                            .and(streams::is_default.eq(false)),
                    ),
                )
                .execute(conn)?
                    > 0)
            })
            .await
    }
}
