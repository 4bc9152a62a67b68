//! Stream tickets (docs/api.md, Browser access): one row per ticket, by the hash of its text.
//! Redeeming reads first (text that is no ticket writes nothing), then is one conditional
//! `UPDATE`: of two processes redeeming one ticket at once, one changes the row and the other
//! finds it used.

use async_trait::async_trait;
use chrono::NaiveDateTime;
use diesel::prelude::*;
use domain::sdk::{StreamTicket, StreamTicketRepository, TicketGrant};
use domain::secret::SecretHash;
use domain::{StorageError, Timestamp};

use crate::db::Database;
use crate::schema::stream_tickets;

#[derive(Insertable)]
#[diesel(table_name = stream_tickets)]
struct TicketRow {
    hash: String,
    environment_id: String,
    end_user: String,
    kid: String,
    sdk_key_id: String,
    key_updated: NaiveDateTime,
    token_expires: i64,
    expires: NaiveDateTime,
    used: bool,
}

/// The domain's `StreamTicketRepository` port on the service's database.
pub struct DieselStreamTicketRepository {
    db: Database,
}

impl DieselStreamTicketRepository {
    /// Over `db`.
    pub fn new(db: Database) -> Self {
        Self { db }
    }
}

#[async_trait]
impl StreamTicketRepository for DieselStreamTicketRepository {
    async fn insert(&self, ticket: &StreamTicket, now: Timestamp) -> Result<(), StorageError> {
        let row = TicketRow {
            hash: ticket.hash.as_str().to_owned(),
            environment_id: ticket.environment_id.clone(),
            end_user: ticket.end_user.clone(),
            kid: ticket.grant.kid.clone(),
            sdk_key_id: ticket.grant.key_id.to_string(),
            key_updated: ticket.grant.key_updated.naive_utc(),
            token_expires: ticket.grant.token_expires,
            expires: ticket.expires.naive_utc(),
            used: false,
        };
        let now = now.naive_utc();
        self.db
            .transaction(move |conn| {
                // Those expired since the last ticket: a minute's worth at most, by the index.
                diesel::delete(stream_tickets::table.filter(stream_tickets::expires.lt(now)))
                    .execute(conn)?;
                diesel::insert_into(stream_tickets::table)
                    .values(&row)
                    .execute(conn)?;
                Ok(())
            })
            .await
    }

    async fn redeem(
        &self,
        hash: &SecretHash,
        environment_id: &str,
        end_user: &str,
        now: Timestamp,
    ) -> Result<Option<TicketGrant>, StorageError> {
        let (hash, env, user) = (
            hash.as_str().to_owned(),
            environment_id.to_owned(),
            end_user.to_owned(),
        );
        let now = now.naive_utc();
        // A read first: text that is no ticket (anyone may send some) takes no write lock.
        let (h, e, u) = (hash.clone(), env.clone(), user.clone());
        let known: i64 = self
            .db
            .run(move |conn| {
                Ok(stream_tickets::table
                    .filter(stream_tickets::hash.eq(&h))
                    .filter(stream_tickets::environment_id.eq(&e))
                    .filter(stream_tickets::end_user.eq(&u))
                    .filter(stream_tickets::used.eq(false))
                    .count()
                    .get_result(conn)?)
            })
            .await?;
        if known == 0 {
            return Ok(None);
        }
        self.db
            .transaction(move |conn| {
                let this = stream_tickets::table
                    .filter(stream_tickets::hash.eq(&hash))
                    .filter(stream_tickets::environment_id.eq(&env))
                    .filter(stream_tickets::end_user.eq(&user));
                let taken = diesel::update(
                    this.filter(stream_tickets::used.eq(false))
                        .filter(stream_tickets::expires.gt(now)),
                )
                .set(stream_tickets::used.eq(true))
                .execute(conn)?;
                if taken == 0 {
                    return Ok(None);
                }
                let (kid, key_id, key_updated, token_expires) = this
                    .select((
                        stream_tickets::kid,
                        stream_tickets::sdk_key_id,
                        stream_tickets::key_updated,
                        stream_tickets::token_expires,
                    ))
                    .first::<(String, String, NaiveDateTime, i64)>(conn)?;
                Ok(Some(TicketGrant {
                    kid,
                    key_id: key_id.into(),
                    key_updated: key_updated.and_utc(),
                    token_expires,
                }))
            })
            .await
    }
}
