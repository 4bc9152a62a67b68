//! The push outbox and its jobs. [`enqueue`] is called by every transaction that appends
//! analytics events, so a card's publication and its pushes commit together.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use chrono::NaiveDateTime;
use diesel::prelude::*;
use domain::card::AnalyticsEvent;
use domain::id::{new_id, IdKind};
use domain::push::{
    Device, PushJob, PushJobRepository, PushJobStatus, PushNext, PushRecord, PushStatus,
};
use domain::{StorageError, Timestamp};

use crate::crypto::SecretBox;
use crate::db::{AnyConnection, Database, Failure};
use crate::error::{read_number, write_number};
use crate::push::{device, open, DeviceRow, Row as PlatformRow};
use crate::rows::CardRow;
use crate::schema::{card_instances, devices, push_jobs, push_platforms};

const CHUNK: usize = 500;

#[derive(Queryable, Selectable, Insertable)]
#[diesel(table_name = push_jobs, treat_none_as_default_value = false)]
struct JobRow {
    id: String,
    environment_id: String,
    card_instance_id: String,
    user_id: String,
    token: String,
    app_id: String,
    platform: String,
    status: String,
    attempts: i32,
    status_code: Option<i32>,
    error: Option<String>,
    next_attempt_at: NaiveDateTime,
    created: NaiveDateTime,
    updated: NaiveDateTime,
}

/// The enabled push platforms of `envs`: environment, app and platform.
pub(crate) fn enabled_platforms(
    conn: &mut AnyConnection,
    envs: &[&str],
) -> Result<Vec<(String, String, String)>, Failure> {
    crate::outbox::enabled_in!(
        conn,
        envs,
        push_platforms,
        (environment_id, app_id, platform)
    )
}

/// The outbox half of every event write: one pending job per device of the card's user that
/// the card reaches through an enabled platform of the device's app, in the caller's
/// transaction. Which events and devices: `domain::push::{wants, targeted_platforms, reaches,
/// serves}`.
pub(crate) fn enqueue(conn: &mut AnyConnection, events: &[&AnalyticsEvent]) -> Result<(), Failure> {
    // The events that call for pushes, with their card.
    let wanted: Vec<&AnalyticsEvent> = events
        .iter()
        .copied()
        .filter(|e| domain::push::wants(e))
        .collect();
    if wanted.is_empty() {
        return Ok(());
    }
    let mut envs: Vec<&str> = wanted.iter().map(|e| e.environment_id()).collect();
    envs.sort_unstable();
    envs.dedup();
    // No enabled platform, no device to look up (the common case of a large fan-out).
    let mut enabled: Enabled = HashMap::new();
    for (env, app, platform) in enabled_platforms(conn, &envs)? {
        enabled.entry((env, app)).or_default().push(platform);
    }
    if enabled.is_empty() {
        return Ok(());
    }
    let by_user = devices_of(conn, &envs, &wanted)?;
    let rows = jobs_of(&wanted, &by_user, &enabled);
    if rows.is_empty() {
        return Ok(());
    }
    for chunk in rows.chunks(CHUNK) {
        crate::per_backend!(&mut *conn, c => diesel::insert_into(push_jobs::table)
            .values(chunk)
            .on_conflict_do_nothing()
            .execute(c))?;
    }
    crate::db::notices::queued(crate::Work::Pushes);
    Ok(())
}

/// The enabled platforms of each (environment, app).
type Enabled = HashMap<(String, String), Vec<String>>;

/// The devices of each (environment, user) of the `wanted` events' users in `envs`.
fn devices_of(
    conn: &mut AnyConnection,
    envs: &[&str],
    wanted: &[&AnalyticsEvent],
) -> Result<HashMap<(String, String), Vec<Device>>, Failure> {
    let mut users: Vec<&str> = wanted.iter().map(|e| e.user_id()).collect();
    users.sort_unstable();
    users.dedup();
    let mut by_user: HashMap<(String, String), Vec<Device>> = HashMap::new();
    for chunk in users.chunks(CHUNK) {
        let rows: Vec<DeviceRow> = devices::table
            .filter(devices::environment_id.eq_any(envs))
            .filter(devices::user_id.eq_any(chunk))
            .select(DeviceRow::as_select())
            .load(conn)?;
        for d in rows.into_iter().map(device) {
            by_user
                .entry((d.environment_id.clone(), d.user_id.clone()))
                .or_default()
                .push(d);
        }
    }
    Ok(by_user)
}

/// A pending job for each device of an event's user that the event reaches through an
/// enabled platform of the device's app.
fn jobs_of(
    wanted: &[&AnalyticsEvent],
    by_user: &HashMap<(String, String), Vec<Device>>,
    enabled: &Enabled,
) -> Vec<JobRow> {
    let mut rows = Vec::new();
    for event in wanted {
        let Some(devices) = by_user.get(&(event.environment_id().into(), event.user_id().into()))
        else {
            continue;
        };
        let targets = domain::push::targeted_platforms(event);
        let at = event.created.naive_utc();
        for d in devices {
            let served = enabled
                .get(&(d.environment_id.clone(), d.app_id.clone()))
                .is_some_and(|ps| ps.iter().any(|p| domain::push::serves(p, &d.platform)));
            if !served || !domain::push::reaches(targets, &d.platform) {
                continue;
            }
            rows.push(JobRow {
                id: new_id(IdKind::Push),
                environment_id: event.environment_id().into(),
                card_instance_id: event.card_instance_id().into(),
                user_id: event.user_id().into(),
                token: d.token.clone(),
                app_id: d.app_id.clone(),
                platform: d.platform.clone(),
                status: PushJobStatus::Pending.as_str().into(),
                attempts: 0,
                status_code: None,
                error: None,
                next_attempt_at: at,
                created: at,
                updated: at,
            });
        }
    }
    rows
}

/// The domain's `PushJobRepository` port on the service's database.
pub struct DieselPushJobRepository {
    db: Database,
    secrets: Arc<SecretBox>,
}

impl DieselPushJobRepository {
    /// Over `db`, with `secrets` sealing what it stores secret.
    pub fn new(db: Database, secrets: Arc<SecretBox>) -> Self {
        Self { db, secrets }
    }
}

fn status(row: JobRow) -> Result<PushStatus, StorageError> {
    Ok(PushStatus {
        attempts: read_number("push attempts", row.attempts)?,
        status_code: row
            .status_code
            .map(|c| read_number("push status code", c))
            .transpose()?,
        next_attempt_at: (row.status == PushJobStatus::Pending.as_str())
            .then(|| row.next_attempt_at.and_utc()),
        id: row.id,
        card_instance_id: row.card_instance_id,
        token: row.token,
        app_id: row.app_id,
        platform: row.platform,
        status: row.status,
        error: row.error,
        created: row.created.and_utc(),
        updated: row.updated.and_utc(),
    })
}

#[async_trait]
impl PushJobRepository for DieselPushJobRepository {
    async fn claim(
        &self,
        now: Timestamp,
        lease_until: Timestamp,
        limit: u32,
    ) -> Result<Vec<PushJob>, StorageError> {
        let (now, lease) = (now.naive_utc(), lease_until.naive_utc());
        let claimed = self
            .db
            .claim_transaction(move |conn| claim_due(conn, now, lease, limit))
            .await?;
        claimed_jobs(&self.secrets, claimed, lease_until)
    }

    async fn record(&self, records: Vec<PushRecord>) -> Result<u64, StorageError> {
        if records.is_empty() {
            return Ok(0);
        }
        self.db
            .transaction(move |conn| {
                let mut stale = 0u64;
                for r in &records {
                    let at = r.at.naive_utc();
                    let next = match r.next {
                        PushNext::RetryAt(t) => t.naive_utc(),
                        _ => at,
                    };
                    // Contract §19: only the claim that holds the push saves its outcome.
                    let before: i32 = write_number("push attempts", r.attempt.saturating_sub(1))
                        .map_err(Failure::Domain)?;
                    let attempt: i32 =
                        write_number("push attempts", r.attempt).map_err(Failure::Domain)?;
                    let changed = diesel::update(
                        push_jobs::table
                            .filter(push_jobs::id.eq(&r.job_id))
                            .filter(push_jobs::status.eq(PushJobStatus::Pending.as_str()))
                            .filter(push_jobs::attempts.eq(before))
                            .filter(push_jobs::next_attempt_at.eq(r.lease.naive_utc())),
                    )
                    .set((
                        push_jobs::status.eq(r.next.status().as_str()),
                        push_jobs::attempts.eq(attempt),
                        push_jobs::status_code.eq(r.status_code.map(i32::from)),
                        push_jobs::error.eq(&r.error),
                        push_jobs::next_attempt_at.eq(next),
                        push_jobs::updated.eq(at),
                    ))
                    .execute(conn)?;
                    if changed == 0 {
                        stale += 1;
                        continue;
                    }
                    if r.next == PushNext::DeadToken {
                        // Only while the token is still this user's: a device registered again
                        // by someone else since is a new registration.
                        diesel::delete(
                            devices::table
                                .filter(devices::environment_id.eq(&r.environment_id))
                                .filter(devices::token.eq(&r.token))
                                .filter(devices::user_id.eq(&r.user_id))
                                .filter(devices::updated.le(at)),
                        )
                        .execute(conn)?;
                    }
                }
                Ok(stale)
            })
            .await
    }

    async fn of_card(
        &self,
        environment_id: &str,
        user_id: &str,
        card_id: &str,
    ) -> Result<Option<Vec<PushStatus>>, StorageError> {
        let (env, user, card) = (
            environment_id.to_owned(),
            user_id.to_owned(),
            card_id.to_owned(),
        );
        let rows = self
            .db
            .run(move |conn| {
                let exists: i64 = card_instances::table
                    .filter(card_instances::environment_id.eq(&env))
                    .filter(card_instances::user_id.eq(&user))
                    .filter(card_instances::id.eq(&card))
                    .count()
                    .get_result(conn)?;
                if exists == 0 {
                    return Ok(None);
                }
                Ok(Some(
                    push_jobs::table
                        .filter(push_jobs::environment_id.eq(&env))
                        .filter(push_jobs::card_instance_id.eq(&card))
                        .order((push_jobs::created, push_jobs::id))
                        .select(JobRow::as_select())
                        .load(conn)?,
                ))
            })
            .await?;
        rows.map(|rows| rows.into_iter().map(status).collect())
            .transpose()
    }
}

/// What a claim read in its transaction: the jobs, their cards, their devices and the
/// platforms of the devices' apps.
type Claimed = (Vec<JobRow>, Vec<CardRow>, Vec<Device>, Vec<PlatformRow>);

/// Inside the claim's transaction: leases up to `limit` due jobs until `lease`, oldest due
/// first, and reads what they carry.
fn claim_due(
    conn: &mut AnyConnection,
    now: NaiveDateTime,
    lease: NaiveDateTime,
    limit: u32,
) -> Result<Claimed, Failure> {
    let due = push_jobs::table
        .filter(push_jobs::status.eq(PushJobStatus::Pending.as_str()))
        .filter(push_jobs::next_attempt_at.le(now))
        .order(push_jobs::next_attempt_at)
        .limit(i64::from(limit));
    // Several processes share PostgreSQL: skip rows another one is claiming.
    let jobs: Vec<JobRow> = match &mut *conn {
        AnyConnection::Postgresql(c) => due
            .select(JobRow::as_select())
            .for_update()
            .skip_locked()
            .load(c)?,
        AnyConnection::Sqlite(c) => due.select(JobRow::as_select()).load(c)?,
    };
    if jobs.is_empty() {
        return Ok((jobs, Vec::new(), Vec::new(), Vec::new()));
    }
    let ids: Vec<&String> = jobs.iter().map(|j| &j.id).collect();
    diesel::update(push_jobs::table.filter(push_jobs::id.eq_any(ids)))
        .set(push_jobs::next_attempt_at.eq(lease))
        .execute(conn)?;
    let mut envs: Vec<&String> = jobs.iter().map(|j| &j.environment_id).collect();
    envs.sort_unstable();
    envs.dedup();
    let card_ids: Vec<&String> = jobs.iter().map(|j| &j.card_instance_id).collect();
    let cards: Vec<CardRow> = card_instances::table
        .filter(card_instances::id.eq_any(card_ids))
        .select(CardRow::as_select())
        .load(conn)?;
    let tokens: Vec<&String> = jobs.iter().map(|j| &j.token).collect();
    let devices: Vec<Device> = devices::table
        .filter(devices::environment_id.eq_any(&envs))
        .filter(devices::token.eq_any(tokens))
        .select(DeviceRow::as_select())
        .load(conn)?
        .into_iter()
        .map(device)
        .collect();
    let apps: Vec<&String> = devices.iter().map(|d| &d.app_id).collect();
    let platforms: Vec<PlatformRow> = push_platforms::table
        .filter(push_platforms::environment_id.eq_any(&envs))
        .filter(push_platforms::app_id.eq_any(apps))
        .select(PlatformRow::as_select())
        .load(conn)?;
    Ok((jobs, cards, devices, platforms))
}

/// The jobs of what a claim read: each with its card, device and platform (secrets opened),
/// where they still exist.
fn claimed_jobs(
    secrets: &SecretBox,
    (jobs, cards, devices, platforms): Claimed,
    lease_until: Timestamp,
) -> Result<Vec<PushJob>, StorageError> {
    let mut card_by_id = HashMap::new();
    for row in cards {
        let card = crate::rows::card(row)?;
        card_by_id.insert(card.id.clone(), card);
    }
    let device_by_token: HashMap<(String, String), _> = devices
        .into_iter()
        .map(|d| ((d.environment_id.clone(), d.token.clone()), d))
        .collect();
    let platforms = platforms
        .into_iter()
        .map(|row| open(secrets, row))
        .collect::<Result<Vec<_>, _>>()?;
    jobs.into_iter()
        .map(|j| {
            let device = device_by_token
                .get(&(j.environment_id.clone(), j.token.clone()))
                .cloned();
            let platform = device
                .as_ref()
                .and_then(|d| domain::push::platform_for(&platforms, d))
                .cloned();
            Ok(PushJob {
                card: card_by_id
                    .get(j.card_instance_id.as_str())
                    .filter(|c| c.environment_id == j.environment_id)
                    .cloned(),
                attempt: read_number::<_, u32>("push attempts", j.attempts)? + 1,
                id: j.id,
                environment_id: j.environment_id,
                user_id: j.user_id,
                token: j.token,
                device,
                platform,
                lease_until,
            })
        })
        .collect()
}
