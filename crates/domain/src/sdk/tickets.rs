//! Stream tickets (docs/api.md, Browser access): how a browser's `EventSource`, which cannot
//! send an `Authorization` header, opens an end user's feed stream. The page trades its user
//! token for a ticket (`POST .../cards/stream-tickets`) and opens the stream with
//! `?ticket=`. A ticket is random, stored only as its hash, opens one stream of one user once,
//! and only within [`STREAM_TICKET_SECONDS`]; the stream it opens then holds as long as the
//! token it was minted with would (its expiry, its SDK key unchanged).

use std::sync::Arc;

use async_trait::async_trait;
use chrono::Duration;

use super::{SdkKeyService, TicketGrant};
use crate::id::EnvironmentId;
use crate::secret::{generate, SecretHash};
use crate::{Clock, DomainError, Principal, StorageError, Timestamp};

/// How long a ticket may wait for its stream: long enough for a page to open it, too short to
/// be worth stealing from a log.
pub const STREAM_TICKET_SECONDS: i64 = 60;
/// What a ticket's text starts with.
const TICKET_PREFIX: &str = "wst_";
/// The longest text taken for a ticket; a longer one is none.
const TICKET_MAX_CHARS: usize = 64;

/// A ticket as stored: its hash, never its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamTicket {
    /// The hash of the ticket's text.
    pub hash: SecretHash,
    /// The environment of the user whose stream it opens.
    pub environment_id: String,
    /// The user whose stream it opens.
    pub end_user: String,
    /// The token it was minted with.
    pub grant: TicketGrant,
    /// Past this instant it opens nothing.
    pub expires: Timestamp,
}

/// Storage of stream tickets (a port), shared by every process of the service, so that a
/// ticket minted through one opens a stream on another.
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait StreamTicketRepository: Send + Sync {
    /// Stores a new ticket, and removes those that expired before `now`.
    async fn insert(&self, ticket: &StreamTicket, now: Timestamp) -> Result<(), StorageError>;
    /// Takes the ticket of this hash for `end_user` of the environment, if it is unused and
    /// has not expired at `now`: it is then used, and no later call takes it again (across
    /// processes too). `None` otherwise.
    async fn redeem(
        &self,
        hash: &SecretHash,
        environment_id: &str,
        end_user: &str,
        now: Timestamp,
    ) -> Result<Option<TicketGrant>, StorageError>;
}

/// Mints and redeems stream tickets, checking user tokens through the [`SdkKeyService`].
pub struct StreamTicketService {
    sdk: Arc<SdkKeyService>,
    tickets: Arc<dyn StreamTicketRepository>,
    clock: Arc<dyn Clock>,
}

impl StreamTicketService {
    /// A service storing tickets in `tickets`, checking tokens with `sdk`, and reading the time
    /// from `clock` (the database's, so that every process agrees when a ticket expires).
    pub fn new(
        sdk: Arc<SdkKeyService>,
        tickets: Arc<dyn StreamTicketRepository>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            sdk,
            tickets,
            clock,
        }
    }

    /// A new ticket for `end_user`'s stream, minted with the user's own `token` (refused as
    /// [`SdkKeyService::authenticate_user`] refuses it): its text, handed out once, and when
    /// it expires.
    pub async fn mint(
        &self,
        env: &EnvironmentId,
        end_user: &str,
        token: &str,
    ) -> Result<(String, Timestamp), DomainError> {
        let grant = self.sdk.grant(env, end_user, token).await?;
        let now = self.clock.now();
        let expires = now
            .checked_add_signed(Duration::seconds(STREAM_TICKET_SECONDS))
            .ok_or_else(|| StorageError::Internal("the clock is at the calendar's end".into()))?;
        let secret = generate(TICKET_PREFIX);
        let ticket = StreamTicket {
            hash: secret.hash,
            environment_id: env.to_string(),
            end_user: end_user.to_owned(),
            grant,
            expires,
        };
        self.tickets.insert(&ticket, now).await?;
        Ok((secret.plaintext, expires))
    }

    /// The end user a ticket opens the stream of, and what it holds on to: the ticket is used
    /// up. A ticket unknown, used, expired, another user's or another environment's is
    /// [`DomainError::Unauthenticated`]; so is one whose token no longer signs in.
    pub async fn redeem(
        &self,
        env: &EnvironmentId,
        end_user: &str,
        ticket: &str,
    ) -> Result<(Principal, TicketGrant), DomainError> {
        if !ticket.starts_with(TICKET_PREFIX) || ticket.len() > TICKET_MAX_CHARS {
            return Err(DomainError::Unauthenticated);
        }
        let hash = SecretHash::of(ticket);
        let now = self.clock.now();
        let grant = self
            .tickets
            .redeem(&hash, env, end_user, now)
            .await?
            .ok_or(DomainError::Unauthenticated)?;
        if !self.holds(env, &grant).await? {
            return Err(DomainError::Unauthenticated);
        }
        let principal = Principal::end_user(&grant.key_id, env, end_user);
        Ok((principal, grant))
    }

    /// Whether a stream opened with a ticket minted under `grant` may go on.
    pub async fn holds(
        &self,
        env: &EnvironmentId,
        grant: &TicketGrant,
    ) -> Result<bool, DomainError> {
        self.sdk.grant_holds(env, grant).await
    }
}
