//! The console editor's texts of flow versions ([`EditorTextRepository`]): one row per
//! (environment, flow, version), replaced by each save.

use async_trait::async_trait;
use diesel::prelude::*;
use domain::flow::texts::EditorTextRepository;
use domain::StorageError;

use crate::db::Database;
use crate::error::write_number;
use crate::schema::editor_texts;

/// Editor texts on the service's database.
pub struct DieselEditorTextRepository {
    db: Database,
}

impl DieselEditorTextRepository {
    /// Texts kept on `db`.
    pub fn new(db: Database) -> Self {
        Self { db }
    }
}

#[async_trait]
impl EditorTextRepository for DieselEditorTextRepository {
    async fn put(
        &self,
        environment_id: &str,
        flow_id: &str,
        version: u32,
        text: String,
    ) -> Result<(), StorageError> {
        let (env, flow) = (environment_id.to_owned(), flow_id.to_owned());
        let version: i32 = write_number("a flow version", version)?;
        self.db
            .transaction(move |conn| {
                let key = editor_texts::table
                    .filter(editor_texts::environment_id.eq(&env))
                    .filter(editor_texts::flow_id.eq(&flow))
                    .filter(editor_texts::version.eq(version));
                diesel::delete(key).execute(conn)?;
                diesel::insert_into(editor_texts::table)
                    .values((
                        editor_texts::environment_id.eq(&env),
                        editor_texts::flow_id.eq(&flow),
                        editor_texts::version.eq(version),
                        editor_texts::text.eq(&text),
                    ))
                    .execute(conn)?;
                Ok(())
            })
            .await
    }

    async fn get(
        &self,
        environment_id: &str,
        flow_id: &str,
        version: u32,
    ) -> Result<Option<String>, StorageError> {
        let (env, flow) = (environment_id.to_owned(), flow_id.to_owned());
        let Ok(version) = i32::try_from(version) else {
            return Ok(None);
        };
        self.db
            .run(move |conn| {
                Ok(editor_texts::table
                    .filter(editor_texts::environment_id.eq(&env))
                    .filter(editor_texts::flow_id.eq(&flow))
                    .filter(editor_texts::version.eq(version))
                    .select(editor_texts::text)
                    .first(conn)
                    .optional()?)
            })
            .await
    }
}
