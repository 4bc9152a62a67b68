use async_trait::async_trait;
use chrono::NaiveDateTime;
use diesel::prelude::*;
use domain::{Folder, FolderRepository, StorageError, Timestamp};

use crate::db::Database;
use crate::schema::{action_flows, folders};

#[derive(Queryable, Selectable, Insertable)]
#[diesel(table_name = folders)]
struct FolderRow {
    id: String,
    environment_id: String,
    organisation_id: String,
    parent_id: Option<String>,
    name: String,
    created: NaiveDateTime,
    updated: NaiveDateTime,
}

impl From<FolderRow> for Folder {
    fn from(r: FolderRow) -> Self {
        Folder {
            id: r.id.into(),
            name: r.name,
            environment_id: r.environment_id,
            organisation_id: r.organisation_id,
            parent_id: r.parent_id,
            created: r.created.and_utc(),
            updated: r.updated.and_utc(),
        }
    }
}

impl From<&Folder> for FolderRow {
    fn from(f: &Folder) -> Self {
        FolderRow {
            id: f.id.clone().into(),
            environment_id: f.environment_id.clone(),
            organisation_id: f.organisation_id.clone(),
            parent_id: f.parent_id.clone(),
            name: f.name.clone(),
            created: f.created.naive_utc(),
            updated: f.updated.naive_utc(),
        }
    }
}

/// The domain's `FolderRepository` port on the service's database.
pub struct DieselFolderRepository {
    db: Database,
}

impl DieselFolderRepository {
    /// Over `db`.
    pub fn new(db: Database) -> Self {
        Self { db }
    }
}

#[async_trait]
impl FolderRepository for DieselFolderRepository {
    async fn list(&self, environment_id: &str) -> Result<Vec<Folder>, StorageError> {
        let env = environment_id.to_owned();
        self.db
            .run(move |conn| {
                let rows = folders::table
                    .filter(folders::environment_id.eq(env))
                    .select(FolderRow::as_select())
                    .load(conn)?;
                Ok(rows.into_iter().map(Folder::from).collect())
            })
            .await
    }

    async fn get(
        &self,
        environment_id: &str,
        folder_id: &str,
    ) -> Result<Option<Folder>, StorageError> {
        let (env, id) = (environment_id.to_owned(), folder_id.to_owned());
        self.db
            .run(move |conn| {
                let row = folders::table
                    .filter(folders::environment_id.eq(env).and(folders::id.eq(id)))
                    .select(FolderRow::as_select())
                    .first(conn)
                    .optional()?;
                Ok(row.map(Folder::from))
            })
            .await
    }

    async fn insert(&self, folder: &Folder) -> Result<(), StorageError> {
        let row = FolderRow::from(folder);
        self.db
            .run(move |conn| {
                diesel::insert_into(folders::table)
                    .values(&row)
                    .execute(conn)?;
                Ok(())
            })
            .await
    }

    async fn rename(
        &self,
        environment_id: &str,
        folder_id: &str,
        name: &str,
        updated: Timestamp,
    ) -> Result<Option<Folder>, StorageError> {
        let (env, id, name) = (
            environment_id.to_owned(),
            folder_id.to_owned(),
            name.to_owned(),
        );
        self.db
            .transaction(move |conn| {
                let target = folders::table
                    .filter(folders::environment_id.eq(&env).and(folders::id.eq(&id)));
                let changed = diesel::update(target)
                    .set((
                        folders::name.eq(name),
                        folders::updated.eq(updated.naive_utc()),
                    ))
                    .execute(conn)?;
                if changed == 0 {
                    return Ok(None);
                }
                let row = target.select(FolderRow::as_select()).first(conn)?;
                Ok(Some(row.into()))
            })
            .await
    }

    async fn has_children(
        &self,
        environment_id: &str,
        folder_id: &str,
    ) -> Result<bool, StorageError> {
        let (env, id) = (environment_id.to_owned(), folder_id.to_owned());
        self.db
            .run(move |conn| {
                let child = folders::table.filter(
                    folders::environment_id
                        .eq(env)
                        .and(folders::parent_id.eq(id)),
                );
                Ok(diesel::select(diesel::dsl::exists(child)).get_result(conn)?)
            })
            .await
    }

    async fn delete_and_unfile_flows(
        &self,
        environment_id: &str,
        folder_id: &str,
    ) -> Result<bool, StorageError> {
        let (env, id) = (environment_id.to_owned(), folder_id.to_owned());
        self.db
            .transaction(move |conn| {
                // The flows filed in the folder stay, uncategorised.
                diesel::update(
                    action_flows::table.filter(
                        action_flows::environment_id
                            .eq(&env)
                            .and(action_flows::folder_id.eq(&id)),
                    ),
                )
                .set(action_flows::folder_id.eq(None::<String>))
                .execute(conn)?;
                let deleted = diesel::delete(
                    folders::table
                        .filter(folders::environment_id.eq(&env).and(folders::id.eq(&id))),
                )
                .execute(conn)?;
                Ok(deleted > 0)
            })
            .await
    }
}
