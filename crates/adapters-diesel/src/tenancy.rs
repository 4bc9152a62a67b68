use async_trait::async_trait;
use chrono::NaiveDateTime;
use diesel::prelude::*;
use domain::secret::SecretHash;
use domain::{
    AccessTokenGrant, ApiKey, Environment, EnvironmentGrant, KeyAccess, KeySummary, Organisation,
    PageRequest, Role, Scope, StorageError, TenancyRepository, Timestamp,
};

use crate::db::{AnyConnection, Database, Failure};
use crate::schema::{access_tokens, api_key_environments, api_keys, environments, organisations};

#[derive(Queryable, Selectable, Insertable)]
#[diesel(table_name = organisations)]
struct OrganisationRow {
    id: String,
    name: String,
    created: NaiveDateTime,
}

#[derive(Queryable, Selectable, Insertable)]
#[diesel(table_name = environments)]
struct EnvironmentRow {
    id: String,
    organisation_id: String,
    name: String,
    created: NaiveDateTime,
}

#[derive(Queryable, Selectable, Insertable)]
#[diesel(table_name = api_keys)]
struct ApiKeyRow {
    id: String,
    organisation_id: String,
    name: Option<String>,
    secret_hash: String,
    /// Comma-separated role names; empty for a fine-grained key.
    roles: String,
    /// Comma-separated scope names; empty for a legacy key.
    scopes: String,
    all_environments: bool,
    created: NaiveDateTime,
    revoked: Option<NaiveDateTime>,
}

#[derive(Queryable, Selectable, Insertable)]
#[diesel(table_name = access_tokens)]
struct AccessTokenRow {
    token_hash: String,
    key_id: String,
    created: NaiveDateTime,
    expires: NaiveDateTime,
}

impl From<OrganisationRow> for Organisation {
    fn from(r: OrganisationRow) -> Self {
        Organisation {
            id: r.id.into(),
            name: r.name,
            created: r.created.and_utc(),
        }
    }
}

impl From<EnvironmentRow> for Environment {
    fn from(r: EnvironmentRow) -> Self {
        Environment {
            id: r.id.into(),
            organisation_id: r.organisation_id,
            name: r.name,
            created: r.created.and_utc(),
        }
    }
}

fn join<T: std::fmt::Display>(items: &[T]) -> String {
    items
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

fn split<T: std::str::FromStr<Err = String>>(text: &str) -> Result<Vec<T>, StorageError> {
    text.split(',')
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse()
                .map_err(|e: String| StorageError::Internal(format!("stored key: {e}")))
        })
        .collect()
}

impl ApiKeyRow {
    fn from_key(k: &ApiKey) -> Self {
        ApiKeyRow {
            id: k.id.clone().into(),
            organisation_id: k.organisation_id.clone(),
            name: k.name.clone(),
            secret_hash: k.secret_hash.as_str().to_owned(),
            roles: join(k.access.roles()),
            scopes: join(k.access.scopes()),
            all_environments: k.environments == EnvironmentGrant::All,
            created: k.created.naive_utc(),
            revoked: k.revoked.map(|t| t.naive_utc()),
        }
    }

    fn into_key(self, granted: Vec<String>) -> Result<ApiKey, StorageError> {
        let roles: Vec<Role> = split(&self.roles)?;
        // A scope a newer version added (and granted by a migration) is none of this
        // version's permissions: skipped, so that a key keeps working during a rolling upgrade.
        let scopes: Vec<Scope> = self
            .scopes
            .split(',')
            .filter_map(|s| s.parse().ok())
            .collect();
        let access = if roles.is_empty() {
            KeyAccess::Scopes(scopes)
        } else {
            KeyAccess::Roles(roles)
        };
        Ok(ApiKey {
            id: self.id.into(),
            organisation_id: self.organisation_id,
            name: self.name,
            secret_hash: SecretHash::from_stored(self.secret_hash),
            access,
            environments: if self.all_environments {
                EnvironmentGrant::All
            } else {
                EnvironmentGrant::Only(granted)
            },
            created: self.created.and_utc(),
            revoked: self.revoked.map(|t| t.and_utc()),
        })
    }
}

fn load_key(conn: &mut AnyConnection, row: Option<ApiKeyRow>) -> Result<Option<ApiKey>, Failure> {
    let Some(row) = row else { return Ok(None) };
    let granted = api_key_environments::table
        .filter(api_key_environments::key_id.eq(&row.id))
        .select(api_key_environments::environment_id)
        .order(api_key_environments::environment_id)
        .load::<String>(conn)?;
    row.into_key(granted).map(Some).map_err(Failure::Domain)
}

fn insert_key_rows(conn: &mut AnyConnection, key: &ApiKey) -> Result<(), Failure> {
    diesel::insert_into(api_keys::table)
        .values(ApiKeyRow::from_key(key))
        .execute(conn)?;
    if let EnvironmentGrant::Only(ids) = &key.environments {
        for env in ids {
            diesel::insert_into(api_key_environments::table)
                .values((
                    api_key_environments::key_id.eq(key.id.as_str()),
                    api_key_environments::environment_id.eq(env),
                ))
                .execute(conn)?;
        }
    }
    Ok(())
}

fn org_row(o: &Organisation) -> OrganisationRow {
    OrganisationRow {
        id: o.id.clone().into(),
        name: o.name.clone(),
        created: o.created.naive_utc(),
    }
}

fn env_row(e: &Environment) -> EnvironmentRow {
    EnvironmentRow {
        id: e.id.clone().into(),
        organisation_id: e.organisation_id.clone(),
        name: e.name.clone(),
        created: e.created.naive_utc(),
    }
}

/// The domain's `TenancyRepository` port on the service's database.
pub struct DieselTenancyRepository {
    db: Database,
}

impl DieselTenancyRepository {
    /// Over `db`.
    pub fn new(db: Database) -> Self {
        Self { db }
    }
}

#[async_trait]
impl TenancyRepository for DieselTenancyRepository {
    async fn find_organisation_by_name(
        &self,
        name: &str,
    ) -> Result<Option<Organisation>, StorageError> {
        let name = name.to_owned();
        self.db
            .run(move |conn| {
                let row = organisations::table
                    .filter(organisations::name.eq(name))
                    .select(OrganisationRow::as_select())
                    .first(conn)
                    .optional()?;
                Ok(row.map(Organisation::from))
            })
            .await
    }

    async fn insert_organisation(&self, org: &Organisation) -> Result<(), StorageError> {
        let row = org_row(org);
        self.db
            .run(move |conn| {
                diesel::insert_into(organisations::table)
                    .values(&row)
                    .execute(conn)?;
                Ok(())
            })
            .await
    }

    async fn insert_environment(&self, env: &Environment) -> Result<(), StorageError> {
        let row = env_row(env);
        self.db
            .run(move |conn| {
                diesel::insert_into(environments::table)
                    .values(&row)
                    .execute(conn)?;
                Ok(())
            })
            .await
    }

    async fn list_environments(
        &self,
        organisation_id: &str,
    ) -> Result<Vec<Environment>, StorageError> {
        let org = organisation_id.to_owned();
        self.db
            .run(move |conn| {
                let rows = environments::table
                    .filter(environments::organisation_id.eq(org))
                    .order((environments::created, environments::id))
                    .select(EnvironmentRow::as_select())
                    .load(conn)?;
                Ok(rows.into_iter().map(Environment::from).collect())
            })
            .await
    }

    async fn insert_key(&self, key: &ApiKey) -> Result<(), StorageError> {
        let key = key.clone();
        self.db
            .transaction(move |conn| insert_key_rows(conn, &key))
            .await
    }

    async fn find_key(&self, key_id: &str) -> Result<Option<ApiKey>, StorageError> {
        let id = key_id.to_owned();
        self.db
            .run(move |conn| {
                let row = api_keys::table
                    .filter(api_keys::id.eq(id))
                    .select(ApiKeyRow::as_select())
                    .first(conn)
                    .optional()?;
                load_key(conn, row)
            })
            .await
    }

    async fn find_key_by_secret_hash(
        &self,
        hash: &SecretHash,
    ) -> Result<Option<ApiKey>, StorageError> {
        let hash = hash.as_str().to_owned();
        self.db
            .run(move |conn| {
                let row = api_keys::table
                    .filter(api_keys::secret_hash.eq(hash))
                    .select(ApiKeyRow::as_select())
                    .first(conn)
                    .optional()?;
                load_key(conn, row)
            })
            .await
    }

    async fn list_keys(
        &self,
        organisation_id: Option<String>,
        environment_id: Option<String>,
        page: &PageRequest,
    ) -> Result<Vec<KeySummary>, StorageError> {
        let (org, env) = (organisation_id, environment_id);
        let page = page.clone();
        self.db
            .run(move |conn| {
                let mut query = api_keys::table
                    .select((ApiKeyRow::as_select(), api_keys::last_used))
                    .order(api_keys::id)
                    .limit(i64::from(page.limit) + 1)
                    .into_boxed();
                if let Some(org) = &org {
                    query = query.filter(api_keys::organisation_id.eq(org.clone()));
                }
                if let Some(env) = &env {
                    let granted = api_key_environments::table
                        .filter(api_key_environments::environment_id.eq(env.clone()))
                        .select(api_key_environments::key_id);
                    query = query.filter(
                        api_keys::all_environments
                            .eq(true)
                            .or(api_keys::id.eq_any(granted)),
                    );
                }
                if let Some(after) = &page.after {
                    query = query.filter(api_keys::id.gt(after.clone()));
                }
                let rows: Vec<(ApiKeyRow, Option<NaiveDateTime>)> = query.load(conn)?;
                let ids: Vec<String> = rows.iter().map(|(r, _)| r.id.clone()).collect();
                let mut grants: std::collections::HashMap<String, Vec<String>> =
                    std::collections::HashMap::new();
                for (key, env) in api_key_environments::table
                    .filter(api_key_environments::key_id.eq_any(&ids))
                    .select((
                        api_key_environments::key_id,
                        api_key_environments::environment_id,
                    ))
                    .order((
                        api_key_environments::key_id,
                        api_key_environments::environment_id,
                    ))
                    .load::<(String, String)>(conn)?
                {
                    grants.entry(key).or_default().push(env);
                }
                rows.into_iter()
                    .map(|(row, last_used)| {
                        let granted = grants.remove(&row.id).unwrap_or_default();
                        Ok(KeySummary {
                            key: row.into_key(granted).map_err(Failure::Domain)?,
                            last_used: last_used.map(|t| t.and_utc()),
                        })
                    })
                    .collect()
            })
            .await
    }

    /// Written in the background: a request never waits for it (a database that hangs must
    /// not make each authentication wait twice), and a write that fails is left out.
    async fn mark_key_used(&self, key_id: &str, at: Timestamp) -> Result<(), StorageError> {
        let (id, db) = (key_id.to_owned(), self.db.clone());
        tokio::spawn(async move {
            let written = db
                .run(move |conn| {
                    diesel::update(api_keys::table.filter(api_keys::id.eq(id)))
                        .set(api_keys::last_used.eq(Some(at.naive_utc())))
                        .execute(conn)?;
                    Ok(())
                })
                .await;
            if let Err(e) = written {
                tracing::debug!(error = %e, "a key's last use was not recorded");
            }
        });
        Ok(())
    }

    async fn revoke_key(&self, key_id: &str, at: Timestamp) -> Result<bool, StorageError> {
        let id = key_id.to_owned();
        self.db
            .transaction(move |conn| {
                diesel::update(
                    api_keys::table.filter(api_keys::id.eq(&id).and(api_keys::revoked.is_null())),
                )
                .set(api_keys::revoked.eq(at.naive_utc()))
                .execute(conn)?;
                diesel::delete(access_tokens::table.filter(access_tokens::key_id.eq(&id)))
                    .execute(conn)?;
                let exists = api_keys::table.filter(api_keys::id.eq(&id));
                Ok(diesel::select(diesel::dsl::exists(exists)).get_result(conn)?)
            })
            .await
    }

    async fn insert_access_token(&self, token: &AccessTokenGrant) -> Result<(), StorageError> {
        let row = AccessTokenRow {
            token_hash: token.token_hash.as_str().to_owned(),
            key_id: token.key_id.clone(),
            created: token.created.naive_utc(),
            expires: token.expires.naive_utc(),
        };
        self.db
            .transaction(move |conn| {
                // Housekeeping: tokens that expired before this one was issued are dead weight.
                diesel::delete(access_tokens::table.filter(access_tokens::expires.lt(row.created)))
                    .execute(conn)?;
                diesel::insert_into(access_tokens::table)
                    .values(&row)
                    .execute(conn)?;
                Ok(())
            })
            .await
    }

    async fn find_access_token(
        &self,
        hash: &SecretHash,
    ) -> Result<Option<AccessTokenGrant>, StorageError> {
        let hash = hash.as_str().to_owned();
        self.db
            .run(move |conn| {
                let row = access_tokens::table
                    .filter(access_tokens::token_hash.eq(hash))
                    .select(AccessTokenRow::as_select())
                    .first(conn)
                    .optional()?;
                Ok(row.map(|r| AccessTokenGrant {
                    token_hash: SecretHash::from_stored(r.token_hash),
                    key_id: r.key_id,
                    created: r.created.and_utc(),
                    expires: r.expires.and_utc(),
                }))
            })
            .await
    }

    async fn bootstrap_if_empty(
        &self,
        org: &Organisation,
        env: &Environment,
        key: &ApiKey,
    ) -> Result<bool, StorageError> {
        let (org, env, key) = (org_row(org), env_row(env), key.clone());
        self.db
            .transaction(move |conn| {
                let any = organisations::table.select(organisations::id);
                if diesel::select(diesel::dsl::exists(any)).get_result::<bool>(conn)? {
                    return Ok(false);
                }
                diesel::insert_into(organisations::table)
                    .values(&org)
                    .execute(conn)?;
                diesel::insert_into(environments::table)
                    .values(&env)
                    .execute(conn)?;
                insert_key_rows(conn, &key)?;
                Ok(true)
            })
            .await
    }
}
