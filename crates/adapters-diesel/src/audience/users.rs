//! End users: their rows and tags, written in bulk, merged, and read a page at a time.

use std::collections::HashMap;

use async_trait::async_trait;
use chrono::NaiveDateTime;
use diesel::prelude::*;
use domain::audience::{EndUser, EndUserRepository, UserQuery};
use domain::{PageRequest, StorageError};
use serde_json::{Map, Value};

use crate::db::{AnyConnection, Database, Failure};
use crate::error::corrupt;
use crate::schema::{end_user_tags, end_users};

#[derive(Queryable, Selectable, Insertable)]
#[diesel(table_name = end_users)]
struct UserRow {
    environment_id: String,
    id: String,
    test_user: bool,
    attributes: String,
    created: NaiveDateTime,
    updated: NaiveDateTime,
}

/// Attaches tags (loaded with one query for the whole page) to user rows.
fn with_tags(
    conn: &mut AnyConnection,
    env: &str,
    rows: Vec<UserRow>,
) -> Result<Vec<EndUser>, Failure> {
    let ids: Vec<&str> = rows.iter().map(|r| r.id.as_str()).collect();
    let mut tags: HashMap<String, Vec<String>> = HashMap::new();
    // Bounded IN lists: SQLite allows 32,766 parameters, PostgreSQL 65,535.
    for chunk in ids.chunks(5_000) {
        let pairs: Vec<(String, String)> = end_user_tags::table
            .filter(
                end_user_tags::environment_id
                    .eq(env)
                    .and(end_user_tags::user_id.eq_any(chunk)),
            )
            .select((end_user_tags::user_id, end_user_tags::tag))
            .order((end_user_tags::user_id, end_user_tags::tag))
            .load(conn)?;
        for (user, tag) in pairs {
            tags.entry(user).or_default().push(tag);
        }
    }
    rows.into_iter()
        .map(|r| {
            let attributes: Map<String, Value> = serde_json::from_str(&r.attributes)
                .map_err(|e| Failure::Domain(corrupt("user attributes", e)))?;
            Ok(EndUser {
                tags: tags.remove(&r.id).unwrap_or_default(),
                environment_id: r.environment_id,
                id: r.id.into(),
                test_user: r.test_user,
                attributes,
                created: r.created.and_utc(),
                updated: r.updated.and_utc(),
            })
        })
        .collect()
}

/// Runs `read`, a page of users after a cursor in the order of an index, with PostgreSQL's
/// bitmap scans off for it. Such a read is always best served by walking the index from the
/// cursor and stopping at the page's limit. But on a table PostgreSQL has no statistics of
/// yet (a new deployment's users just imported, before autovacuum analyses them), it can plan
/// a bitmap scan of every row after the cursor, sorted to take the first page: each page of a
/// fan-out then reads all the users left, a cost that grows with the square of the audience.
/// Measured on a large tagged audience not yet analysed: a page planned that way took orders of
/// magnitude longer than walking the index. Three round trips more a page. For a
/// connection in no transaction (`Database::run`'s): inside one, diesel would make this a
/// savepoint, and the setting would last to the end of the outer transaction.
fn index_page<T>(
    conn: &mut AnyConnection,
    read: impl FnOnce(&mut AnyConnection) -> Result<T, Failure>,
) -> Result<T, Failure> {
    match conn {
        AnyConnection::Sqlite(_) => read(conn),
        AnyConnection::Postgresql(_) => conn.transaction(|conn| {
            diesel::connection::SimpleConnection::batch_execute(
                conn,
                "SET LOCAL enable_bitmapscan = off",
            )?;
            read(conn)
        }),
    }
}

/// The environment's users matching `query`, after `page.after`, in id order, at most
/// `page.limit + 1`, boxed (the caller selects what it needs).
macro_rules! users_matching {
    ($env:expr, $query:expr, $page:expr) => {{
        let mut select = end_users::table
            .filter(end_users::environment_id.eq($env.clone()))
            .order(end_users::id)
            .limit(i64::from($page.limit) + 1)
            .into_boxed();
        if let Some(after) = $page.after {
            select = select.filter(end_users::id.gt(after));
        }
        if let Some(test_user) = $query.test_user {
            select = select.filter(end_users::test_user.eq(test_user));
        }
        if let Some(tag) = $query.tag {
            let tagged = end_user_tags::table
                .filter(
                    end_user_tags::environment_id
                        .eq($env.clone())
                        .and(end_user_tags::tag.eq(tag)),
                )
                .select(end_user_tags::user_id);
            select = select.filter(end_users::id.eq_any(tagged));
        }
        select
    }};
}

/// The domain's `EndUserRepository` port on the service's database.
pub struct DieselEndUserRepository {
    db: Database,
}

impl DieselEndUserRepository {
    /// Over `db`.
    pub fn new(db: Database) -> Self {
        Self { db }
    }
}

#[async_trait]
impl EndUserRepository for DieselEndUserRepository {
    async fn upsert(&self, users: Vec<EndUser>) -> Result<(), StorageError> {
        self.db
            .transaction(move |conn| {
                for user in &users {
                    let row = UserRow {
                        environment_id: user.environment_id.clone(),
                        id: user.id.clone().into(),
                        test_user: user.test_user,
                        attributes: Value::Object(user.attributes.clone()).to_string(),
                        created: user.created.naive_utc(),
                        updated: user.updated.naive_utc(),
                    };
                    let changes = (
                        end_users::test_user.eq(row.test_user),
                        end_users::attributes.eq(&row.attributes),
                        end_users::updated.eq(row.updated),
                    );
                    // ON CONFLICT is outside MultiConnection's subset; both backends speak it.
                    crate::per_backend!(&mut *conn, c => diesel::insert_into(end_users::table)
                        .values(&row)
                        .on_conflict((end_users::environment_id, end_users::id))
                        .do_update()
                        .set(changes)
                        .execute(c))?;
                    diesel::delete(
                        end_user_tags::table.filter(
                            end_user_tags::environment_id
                                .eq(&user.environment_id)
                                .and(end_user_tags::user_id.eq(user.id.as_str())),
                        ),
                    )
                    .execute(conn)?;
                    for tag in &user.tags {
                        diesel::insert_into(end_user_tags::table)
                            .values((
                                end_user_tags::environment_id.eq(&user.environment_id),
                                end_user_tags::tag.eq(tag),
                                end_user_tags::user_id.eq(user.id.as_str()),
                            ))
                            .execute(conn)?;
                    }
                }
                Ok(())
            })
            .await
    }

    async fn get(
        &self,
        environment_id: &str,
        user_id: &str,
    ) -> Result<Option<EndUser>, StorageError> {
        let (env, id) = (environment_id.to_owned(), user_id.to_owned());
        self.db
            .run(move |conn| {
                let rows = end_users::table
                    .filter(
                        end_users::environment_id
                            .eq(&env)
                            .and(end_users::id.eq(&id)),
                    )
                    .select(UserRow::as_select())
                    .load(conn)?;
                Ok(with_tags(conn, &env, rows)?.into_iter().next())
            })
            .await
    }

    async fn delete(&self, environment_id: &str, user_id: &str) -> Result<bool, StorageError> {
        let (env, id) = (environment_id.to_owned(), user_id.to_owned());
        self.db
            .transaction(move |conn| {
                diesel::delete(
                    end_user_tags::table.filter(
                        end_user_tags::environment_id
                            .eq(&env)
                            .and(end_user_tags::user_id.eq(&id)),
                    ),
                )
                .execute(conn)?;
                let deleted = diesel::delete(
                    end_users::table.filter(
                        end_users::environment_id
                            .eq(&env)
                            .and(end_users::id.eq(&id)),
                    ),
                )
                .execute(conn)?;
                Ok(deleted > 0)
            })
            .await
    }

    async fn merge_attributes(
        &self,
        environment_id: &str,
        user_id: &str,
        attributes: Map<String, Value>,
        at: chrono::DateTime<chrono::Utc>,
    ) -> Result<(), StorageError> {
        let (env, id) = (environment_id.to_owned(), user_id.to_owned());
        let at = at.naive_utc();
        self.db
            .transaction(move |conn| {
                let mine = || {
                    end_users::environment_id
                        .eq(env.clone())
                        .and(end_users::id.eq(id.clone()))
                };
                let read = end_users::table
                    .filter(mine())
                    .select(end_users::attributes);
                // The row locked until the commit on PostgreSQL (SQLite's writer is alone), so
                // that a concurrent put or merge is not undone by this one.
                let stored: Option<String> = match &mut *conn {
                    AnyConnection::Postgresql(c) => read.for_update().first(c).optional(),
                    AnyConnection::Sqlite(c) => read.first(c).optional(),
                }?;
                let Some(stored) = stored else {
                    let row = UserRow {
                        environment_id: env.clone(),
                        id: id.clone(),
                        test_user: false,
                        attributes: Value::Object(attributes).to_string(),
                        created: at,
                        updated: at,
                    };
                    // Another request may create it first: then it is merged into next time
                    // the token is first seen, and this one leaves it as it is.
                    crate::per_backend!(&mut *conn, c => diesel::insert_into(end_users::table)
                        .values(&row)
                        .on_conflict((end_users::environment_id, end_users::id))
                        .do_nothing()
                        .execute(c))?;
                    return Ok(());
                };
                let mut merged: Map<String, Value> = serde_json::from_str(&stored)
                    .map_err(|e| Failure::Domain(corrupt("user attributes", e)))?;
                let mut changed = false;
                for (name, value) in attributes {
                    // A new name past the most a user holds is left out; known ones update.
                    let room = merged.contains_key(&name)
                        || merged.len() < domain::audience::MAX_ATTRIBUTES_PER_USER;
                    if room && merged.get(&name) != Some(&value) {
                        merged.insert(name, value);
                        changed = true;
                    }
                }
                if changed {
                    diesel::update(end_users::table.filter(mine()))
                        .set((
                            end_users::attributes.eq(Value::Object(merged).to_string()),
                            end_users::updated.eq(at),
                        ))
                        .execute(conn)?;
                }
                Ok(())
            })
            .await
    }

    async fn list(
        &self,
        environment_id: &str,
        query: &UserQuery,
        page: &PageRequest,
    ) -> Result<Vec<EndUser>, StorageError> {
        let env = environment_id.to_owned();
        let query = query.clone();
        let page = page.clone();
        self.db
            .run(move |conn| {
                let rows = index_page(conn, |conn| {
                    Ok(users_matching!(env, query, page)
                        .select(UserRow::as_select())
                        .load(conn)?)
                })?;
                with_tags(conn, &env, rows)
            })
            .await
    }

    async fn ids(
        &self,
        environment_id: &str,
        query: &UserQuery,
        page: &PageRequest,
    ) -> Result<Vec<String>, StorageError> {
        let env = environment_id.to_owned();
        let query = query.clone();
        let page = page.clone();
        self.db
            .run(move |conn| {
                index_page(conn, |conn| {
                    Ok(match (&query.tag, query.test_user) {
                        // A tag alone: its primary key is (environment, tag, user) — one range
                        // read, in id order, no join.
                        (Some(tag), None) => {
                            let mut select = end_user_tags::table
                                .filter(end_user_tags::environment_id.eq(&env))
                                .filter(end_user_tags::tag.eq(tag))
                                .select(end_user_tags::user_id)
                                .order(end_user_tags::user_id)
                                .limit(i64::from(page.limit) + 1)
                                .into_boxed();
                            if let Some(after) = page.after {
                                select = select.filter(end_user_tags::user_id.gt(after));
                            }
                            select.load(conn)?
                        }
                        _ => users_matching!(env, query, page)
                            .select(end_users::id)
                            .load(conn)?,
                    })
                })
            })
            .await
    }
}
