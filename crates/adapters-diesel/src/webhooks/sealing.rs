//! A subscription's secrets sealed at rest: the signing secrets and the custom header values,
//! with the record id as associated data.

use std::collections::BTreeMap;

use diesel::prelude::*;
use domain::webhook::{HttpMethod, Subscription};
use domain::StorageError;

use crate::crypto::SecretBox;
use crate::db::Database;
use crate::error::corrupt;
use crate::schema::webhook_subscriptions;

use super::rows::SubscriptionRow;

pub(super) fn secret_context(id: &str, field: &str) -> String {
    format!("webhook_subscriptions.{field}:{id}")
}

/// Custom header values (a receiver's `Authorization`, say) are secrets too (contract §16):
/// the JSON object of them is sealed whole. No headers are stored as `{}`, which holds
/// nothing to seal.
pub(super) fn seal_headers(
    secrets: &SecretBox,
    id: &str,
    headers: &BTreeMap<String, String>,
) -> Result<String, StorageError> {
    let json = serde_json::to_string(headers).map_err(|e| corrupt("headers", e))?;
    if headers.is_empty() {
        return Ok(json);
    }
    secrets.seal(&json, &secret_context(id, "headers"))
}

/// What [`seal_headers`] stored; a plain JSON object is `{}`, or a row written before header
/// values were sealed (sealed at start by [`DieselWebhookRepository::seal_plain_headers`]).
pub(super) fn open_headers(
    secrets: &SecretBox,
    id: &str,
    stored: &str,
) -> Result<BTreeMap<String, String>, StorageError> {
    let opened;
    let json = if is_sealed(stored) {
        opened = secrets.open(stored, &secret_context(id, "headers"))?;
        opened.as_str()
    } else {
        stored
    };
    serde_json::from_str(json).map_err(|e| corrupt("webhook headers", e))
}

/// Whether a stored value is sealed ([`SecretBox::seal`]'s format), not plain JSON.
pub(super) fn is_sealed(stored: &str) -> bool {
    stored.starts_with("v1.")
}

pub(super) fn seal(secrets: &SecretBox, s: &Subscription) -> Result<SubscriptionRow, StorageError> {
    Ok(SubscriptionRow {
        id: s.id.clone().into(),
        environment_id: s.environment_id.clone(),
        url: s.url.clone(),
        method: s.method.as_str().to_owned(),
        headers: seal_headers(secrets, &s.id, &s.headers)?,
        types: serde_json::to_string(&s.types).map_err(|e| corrupt("types", e))?,
        card_template_id: s.card_template_id.clone(),
        flow_id: s.flow_id.clone(),
        secret: secrets.seal(&s.secret, &secret_context(&s.id, "secret"))?,
        previous_secret: s
            .previous_secret
            .as_deref()
            .map(|p| secrets.seal(p, &secret_context(&s.id, "previous_secret")))
            .transpose()?,
        previous_secret_until: s.previous_secret_until.map(|t| t.naive_utc()),
        enabled: s.enabled,
        disabled_reason: s.disabled_reason.clone(),
        failing_since: s.failing_since.map(|t| t.naive_utc()),
        created: s.created.naive_utc(),
        updated: s.updated.naive_utc(),
        description: s.description.clone(),
    })
}

pub(super) fn open(
    secrets: &SecretBox,
    row: SubscriptionRow,
) -> Result<Subscription, StorageError> {
    let headers = open_headers(secrets, &row.id, &row.headers)?;
    let types: Vec<String> =
        serde_json::from_str(&row.types).map_err(|e| corrupt("webhook types", e))?;
    Ok(Subscription {
        secret: secrets.open(&row.secret, &secret_context(&row.id, "secret"))?,
        previous_secret: row
            .previous_secret
            .as_deref()
            .map(|p| secrets.open(p, &secret_context(&row.id, "previous_secret")))
            .transpose()?,
        method: HttpMethod::parse(&row.method)
            .ok_or_else(|| corrupt("webhook method", &row.method))?,
        id: row.id.into(),
        environment_id: row.environment_id,
        url: row.url,
        headers,
        types,
        card_template_id: row.card_template_id,
        flow_id: row.flow_id,
        description: row.description,
        previous_secret_until: row.previous_secret_until.map(|t| t.and_utc()),
        enabled: row.enabled,
        disabled_reason: row.disabled_reason,
        failing_since: row.failing_since.map(|t| t.and_utc()),
        created: row.created.and_utc(),
        updated: row.updated.and_utc(),
    })
}

/// [`DieselWebhookRepository::seal_plain_headers`](super::DieselWebhookRepository).
pub(super) async fn seal_plain_headers(
    db: &Database,
    secrets: &SecretBox,
) -> Result<usize, StorageError> {
    {
        let plain: Vec<(String, String)> = db
            .run(|conn| {
                Ok(webhook_subscriptions::table
                    .filter(webhook_subscriptions::headers.not_like("v1.%"))
                    .filter(webhook_subscriptions::headers.ne("{}"))
                    .select((webhook_subscriptions::id, webhook_subscriptions::headers))
                    .load(conn)?)
            })
            .await?;
        let mut sealed = Vec::with_capacity(plain.len());
        for (id, stored) in plain {
            let headers = open_headers(secrets, &id, &stored)?;
            let new = seal_headers(secrets, &id, &headers)?;
            sealed.push((id, stored, new));
        }
        db.transaction(move |conn| {
            let mut changed = 0;
            for (id, old, new) in &sealed {
                changed += diesel::update(
                    webhook_subscriptions::table
                        .filter(webhook_subscriptions::id.eq(id))
                        .filter(webhook_subscriptions::headers.eq(old)),
                )
                .set(webhook_subscriptions::headers.eq(new))
                .execute(conn)?;
            }
            Ok(changed)
        })
        .await
    }
}
