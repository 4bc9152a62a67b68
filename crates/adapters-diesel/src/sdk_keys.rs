//! SDK keys (contract §15): the public keys that verify end users' tokens, one row per key
//! with its public keys, issuers, claim mappings and origins as JSON text.

use std::collections::BTreeMap;

use async_trait::async_trait;
use chrono::NaiveDateTime;
use diesel::prelude::*;
use domain::sdk::{SdkKey, SdkKeyKind, SdkKeyRepository, VerifyingKey};
use domain::StorageError;
use serde::{Deserialize, Serialize};

use crate::db::{Database, Failure};
use crate::error::corrupt;
use crate::schema::sdk_keys;

#[derive(Queryable, Selectable, Insertable)]
#[diesel(table_name = sdk_keys)]
struct SdkKeyRow {
    id: String,
    environment_id: String,
    name: String,
    public_keys: String,
    max_token_expiry_days: i32,
    allowed_issuers: String,
    claim_mappings: String,
    created: NaiveDateTime,
    updated: NaiveDateTime,
    allowed_origins: String,
}

/// One public key as stored in `public_keys`.
#[derive(Serialize, Deserialize)]
struct StoredKey {
    #[serde(rename = "type")]
    kind: String,
    pem: String,
}

fn row(key: &SdkKey) -> SdkKeyRow {
    let keys: Vec<StoredKey> = key
        .keys
        .iter()
        .map(|k| StoredKey {
            kind: k.kind.as_str().to_owned(),
            pem: k.pem.clone(),
        })
        .collect();
    SdkKeyRow {
        id: key.id.to_string(),
        environment_id: key.environment_id.clone(),
        name: key.name.clone(),
        public_keys: serde_json::to_string(&keys).unwrap_or_else(|_| "[]".into()),
        max_token_expiry_days: i32::try_from(key.max_token_expiry_days).unwrap_or(i32::MAX),
        allowed_issuers: serde_json::to_string(&key.allowed_issuers)
            .unwrap_or_else(|_| "[]".into()),
        claim_mappings: serde_json::to_string(&key.claim_mappings).unwrap_or_else(|_| "{}".into()),
        created: key.created.naive_utc(),
        updated: key.updated.naive_utc(),
        allowed_origins: serde_json::to_string(&key.allowed_origins)
            .unwrap_or_else(|_| "[]".into()),
    }
}

fn key(row: SdkKeyRow) -> Result<SdkKey, Failure> {
    let stored: Vec<StoredKey> = serde_json::from_str(&row.public_keys)
        .map_err(|e| Failure::Domain(corrupt("SDK public keys", e)))?;
    let keys = stored
        .into_iter()
        .map(|k| {
            let kind = SdkKeyKind::parse(&k.kind)
                .ok_or_else(|| Failure::Domain(corrupt("SDK key type", format!("`{}`", k.kind))))?;
            Ok(VerifyingKey { kind, pem: k.pem })
        })
        .collect::<Result<Vec<_>, Failure>>()?;
    let allowed_issuers: Vec<String> = serde_json::from_str(&row.allowed_issuers)
        .map_err(|e| Failure::Domain(corrupt("SDK key issuers", e)))?;
    let claim_mappings: BTreeMap<String, String> = serde_json::from_str(&row.claim_mappings)
        .map_err(|e| Failure::Domain(corrupt("SDK key claim mappings", e)))?;
    let allowed_origins: Vec<String> = serde_json::from_str(&row.allowed_origins)
        .map_err(|e| Failure::Domain(corrupt("SDK key origins", e)))?;
    Ok(SdkKey {
        id: row.id.into(),
        environment_id: row.environment_id,
        name: row.name,
        keys,
        max_token_expiry_days: u32::try_from(row.max_token_expiry_days).unwrap_or(0),
        allowed_issuers,
        claim_mappings,
        allowed_origins,
        created: row.created.and_utc(),
        updated: row.updated.and_utc(),
    })
}

/// The domain's `SdkKeyRepository` port on the service's database.
pub struct DieselSdkKeyRepository {
    db: Database,
}

impl DieselSdkKeyRepository {
    /// Over `db`.
    pub fn new(db: Database) -> Self {
        Self { db }
    }
}

#[async_trait]
impl SdkKeyRepository for DieselSdkKeyRepository {
    async fn insert(&self, key: &SdkKey) -> Result<(), StorageError> {
        let row = row(key);
        self.db
            .transaction(move |conn| {
                diesel::insert_into(sdk_keys::table)
                    .values(&row)
                    .execute(conn)?;
                Ok(())
            })
            .await
    }

    async fn get(&self, environment_id: &str, id: &str) -> Result<Option<SdkKey>, StorageError> {
        let (env, id) = (environment_id.to_owned(), id.to_owned());
        self.db
            .run(move |conn| {
                sdk_keys::table
                    .filter(sdk_keys::environment_id.eq(&env).and(sdk_keys::id.eq(&id)))
                    .select(SdkKeyRow::as_select())
                    .first(conn)
                    .optional()?
                    .map(key)
                    .transpose()
            })
            .await
    }

    async fn find_by_name(
        &self,
        environment_id: &str,
        name: &str,
    ) -> Result<Option<SdkKey>, StorageError> {
        let (env, name) = (environment_id.to_owned(), name.to_owned());
        self.db
            .run(move |conn| {
                sdk_keys::table
                    .filter(
                        sdk_keys::environment_id
                            .eq(&env)
                            .and(sdk_keys::name.eq(&name)),
                    )
                    .select(SdkKeyRow::as_select())
                    .first(conn)
                    .optional()?
                    .map(key)
                    .transpose()
            })
            .await
    }

    async fn list(&self, environment_id: &str) -> Result<Vec<SdkKey>, StorageError> {
        let env = environment_id.to_owned();
        self.db
            .run(move |conn| {
                sdk_keys::table
                    .filter(sdk_keys::environment_id.eq(&env))
                    .order((sdk_keys::name, sdk_keys::id))
                    .select(SdkKeyRow::as_select())
                    .load(conn)?
                    .into_iter()
                    .map(key)
                    .collect()
            })
            .await
    }

    async fn update(&self, key: &SdkKey) -> Result<bool, StorageError> {
        let row = row(key);
        self.db
            .transaction(move |conn| {
                let updated = diesel::update(
                    sdk_keys::table.filter(
                        sdk_keys::environment_id
                            .eq(&row.environment_id)
                            .and(sdk_keys::id.eq(&row.id)),
                    ),
                )
                .set((
                    sdk_keys::name.eq(&row.name),
                    sdk_keys::public_keys.eq(&row.public_keys),
                    sdk_keys::max_token_expiry_days.eq(row.max_token_expiry_days),
                    sdk_keys::allowed_issuers.eq(&row.allowed_issuers),
                    sdk_keys::claim_mappings.eq(&row.claim_mappings),
                    sdk_keys::allowed_origins.eq(&row.allowed_origins),
                    sdk_keys::updated.eq(row.updated),
                ))
                .execute(conn)?;
                Ok(updated > 0)
            })
            .await
    }

    async fn delete(&self, environment_id: &str, id: &str) -> Result<bool, StorageError> {
        let (env, id) = (environment_id.to_owned(), id.to_owned());
        self.db
            .transaction(move |conn| {
                let deleted = diesel::delete(
                    sdk_keys::table
                        .filter(sdk_keys::environment_id.eq(&env).and(sdk_keys::id.eq(&id))),
                )
                .execute(conn)?;
                Ok(deleted > 0)
            })
            .await
    }
}
