//! The blocking-call bridge: work on a pooled connection, run on one of the database's
//! threads and answered by the call's deadline, plainly or in a write transaction; and what
//! each outcome tells the storage state.

use std::sync::{Arc, Mutex};

use diesel::connection::SimpleConnection;
use domain::StorageError;
use tokio::sync::OwnedSemaphorePermit;

use super::calls::{lock, CallState};
use super::connection::AnyConnection;
use super::failure::Failure;
use super::notices;
use super::transaction::{deadlocked, write_transaction};
use super::url::{Manager, Synchronous};
use super::{Database, Others};

/// Below this many free bytes, a disk I/O error on a write is taken for a full disk (SQLite
/// reports ENOSPC on its files as a plain I/O error).
const LOW_SPACE_BYTES: u64 = 1 << 20;

impl Database {
    /// `outcome` of a call, reported to [`Database::storage`]: a write refused for lack of
    /// space (also a disk I/O error when the last sample found the disk all but full, as SQLite
    /// reports ENOSPC) is [`StorageError::Full`]; a write transaction that succeeded while the
    /// disk has room (as last sampled, on SQLite) clears it.
    pub(super) fn reported<T>(
        &self,
        outcome: Result<T, StorageError>,
        wrote: bool,
    ) -> Result<T, StorageError> {
        match outcome {
            Ok(value) => {
                // A transaction that committed ends a refusal only when the disk has room
                // again: one that changed nothing (an empty claim) commits on a full disk too.
                let room = self
                    .storage
                    .free_bytes()
                    .is_none_or(|free| free >= LOW_SPACE_BYTES);
                if wrote && room {
                    self.storage.write_succeeded();
                }
                Ok(value)
            }
            Err(StorageError::Internal(message))
                if message.contains("disk I/O error")
                    && self
                        .storage
                        .free_bytes()
                        .is_some_and(|free| free < LOW_SPACE_BYTES) =>
            {
                self.storage.write_refused();
                Err(StorageError::Full(message))
            }
            Err(full @ StorageError::Full(_)) => {
                self.storage.write_refused();
                Err(full)
            }
            Err(other) => Err(other),
        }
    }

    /// Runs `work` with a pooled connection on tokio's blocking pool.
    pub(crate) async fn run<T, F>(&self, work: F) -> Result<T, StorageError>
    where
        T: Send + 'static,
        F: FnOnce(&mut AnyConnection) -> Result<T, Failure> + Send + 'static,
    {
        let outcome = self.run_unreported(self.deadline(), work).await;
        self.reported(outcome, false)
    }

    /// Runs `work` on one of the database's threads, answering by the call's deadline
    /// (contract §20). At most the pool's size of calls hold a thread; the others wait for
    /// their turn as futures. A call past its deadline is answered `Unavailable` at once; its
    /// thread, blocked on a hung server, ends when the server or the network gives up, runs
    /// none of its work if it had not started, and discards its connection.
    pub(super) async fn run_unreported<T, F>(
        &self,
        deadline: tokio::time::Instant,
        work: F,
    ) -> Result<T, StorageError>
    where
        T: Send + 'static,
        F: FnOnce(&mut AnyConnection) -> Result<T, Failure> + Send + 'static,
    {
        let asked = std::time::Instant::now();
        let turn = self.call_turn(deadline, asked).await?;
        let checkout = Checkout {
            pool: self.pool.clone(),
            pool_wait: self.waits.pool,
            checkouts: self.checkouts.clone(),
            asked,
            deadline,
        };
        // The turn goes back when both sides let go of it: after the waiter has the answer
        // (the thread is then back among the idle ones, so the next call reuses it rather
        // than starting another), or, for a call given up, when its thread ends.
        let turn = Arc::new(turn);
        let thread_turn = turn.clone();
        let span = tracing::Span::current();
        // Where the call stands, decided under one lock by the thread and by the waiter, so
        // that a cancel only ever reaches a statement of this call, and a connection goes back
        // to the pool only when its work ended before the call was given up.
        let state: Arc<Mutex<CallState>> = Arc::default();
        let shared = state.clone();
        let (answer, answered) = tokio::sync::oneshot::channel();
        let call = move || {
            let _turn = thread_turn;
            let _entered = span.enter();
            checkout.run(&shared, work)
        };
        let handed = self.threads.run(Box::new(move || {
            let _ = answer.send(call());
        }));
        if let Err(e) = handed {
            return Err(StorageError::Unavailable(format!(
                "no thread could be started for the database: {e}"
            )));
        }
        let joined = tokio::time::timeout_at(deadline, answered).await;
        drop(turn);
        match joined {
            Ok(answer) => answer.unwrap_or_else(|_| {
                Err(StorageError::Internal(
                    "database task failed: the call panicked".into(),
                ))
            }),
            Err(_) => {
                self.abandon(&state);
                Err(self.timed_out())
            }
        }
    }

    /// A call's turn at the gate, by its deadline. A full pool queues callers here:
    /// WORKBENCH_DATABASE_POOL_TIMEOUT bounds that wait too.
    async fn call_turn(
        &self,
        deadline: tokio::time::Instant,
        asked: std::time::Instant,
    ) -> Result<OwnedSemaphorePermit, StorageError> {
        let turn_by = deadline.min(tokio::time::Instant::now() + self.waits.pool);
        let Ok(Ok(turn)) =
            tokio::time::timeout_at(turn_by, self.gate.clone().acquire_owned()).await
        else {
            self.checkouts.observe(asked.elapsed());
            return Err(self.timed_out());
        };
        Ok(turn)
    }

    /// Gives up the call `state` stands for: the statement it runs, if any, is cancelled on
    /// the server (PostgreSQL).
    fn abandon(&self, state: &Mutex<CallState>) {
        let running = std::mem::replace(&mut *lock(state), CallState::Abandoned);
        if let (Some(canceller), CallState::Running(Some(process))) = (&self.canceller, running) {
            canceller.cancel(process);
        }
    }

    /// Like [`Database::run`], inside one write transaction (see [`write_transaction`]).
    pub(crate) async fn transaction<T, F>(&self, work: F) -> Result<T, StorageError>
    where
        T: Send + 'static,
        F: FnOnce(&mut AnyConnection) -> Result<T, Failure> + Send + 'static,
    {
        let deadline = self.deadline();
        let _turn = self.writers_turn(deadline).await?;
        let told = self.told.clone();
        let outcome = self
            .run_unreported(deadline, move |conn| {
                let outcome = write_transaction(conn, work);
                told.tell(notices::take());
                outcome
            })
            .await;
        self.reported(outcome, true)
    }

    /// Like [`Database::transaction`], for work that may end early to hand the writers' turn
    /// on: `work` is told whether another writer waits for it ([`Others`]), and commits what
    /// it did so far when it ends.
    pub(crate) async fn transaction_handing_on<T, F>(&self, work: F) -> Result<T, StorageError>
    where
        T: Send + 'static,
        F: FnOnce(&mut AnyConnection, &Others) -> Result<T, Failure> + Send + 'static,
    {
        let others = Others::of(self.writers.clone());
        self.transaction(move |conn| work(conn, &others)).await
    }

    /// Like [`Database::run`], in this writer's turn on SQLite but in no transaction: for a
    /// statement that makes its own (`PRAGMA incremental_vacuum`).
    pub(crate) async fn write<T, F>(&self, work: F) -> Result<T, StorageError>
    where
        T: Send + 'static,
        F: FnOnce(&mut AnyConnection) -> Result<T, Failure> + Send + 'static,
    {
        let deadline = self.deadline();
        let _turn = self.writers_turn(deadline).await?;
        let outcome = self.run_unreported(deadline, work).await;
        self.reported(outcome, true)
    }

    /// SQLite: this writer's turn, within the call's deadline.
    async fn writers_turn(
        &self,
        deadline: tokio::time::Instant,
    ) -> Result<Option<tokio::sync::MutexGuard<'_, ()>>, StorageError> {
        match &self.writers {
            Some(writers) => tokio::time::timeout_at(deadline, writers.turn())
                .await
                .map(Some)
                .map_err(|_| self.timed_out()),
            None => Ok(None),
        }
    }

    /// Like [`Database::transaction`], for a claim: a write whose loss on a power failure (or
    /// a crash of PostgreSQL) is harmless, because the work it claims is then claimed again.
    /// Its commit does not wait for the disk: SQLite runs it with `synchronous = NORMAL`,
    /// PostgreSQL with `synchronous_commit = off`. The log is written in order, so the next
    /// durable commit makes it durable too: an outcome saved never outlives its claim.
    pub(crate) async fn claim_transaction<T, F>(&self, work: F) -> Result<T, StorageError>
    where
        T: Send + 'static,
        F: FnOnce(&mut AnyConnection) -> Result<T, Failure> + Send + 'static,
    {
        let deadline = self.deadline();
        let _turn = self.writers_turn(deadline).await?;
        let relax = self.synchronous == Synchronous::Full;
        let told = self.told.clone();
        let outcome = self
            .run_unreported(deadline, move |conn| {
                let outcome = match conn {
                    AnyConnection::Sqlite(c) if relax => {
                        c.batch_execute("PRAGMA synchronous = NORMAL")?;
                        let outcome = write_transaction(conn, work);
                        // Setting a pragma outside a transaction fails only on a broken
                        // connection, which the pool discards.
                        let restored = match conn {
                            AnyConnection::Sqlite(c) => {
                                c.batch_execute("PRAGMA synchronous = FULL")
                            }
                            AnyConnection::Postgresql(_) => Ok(()),
                        };
                        let value = outcome?;
                        restored?;
                        Ok(value)
                    }
                    AnyConnection::Sqlite(_) => write_transaction(conn, work),
                    AnyConnection::Postgresql(_) => write_transaction(conn, |conn| {
                        if let AnyConnection::Postgresql(c) = &mut *conn {
                            c.batch_execute("SET LOCAL synchronous_commit = off")?;
                        }
                        work(conn)
                    }),
                };
                told.tell(notices::take());
                outcome
            })
            .await;
        self.reported(outcome, true)
    }

    /// Like [`Database::transaction`], on the calling thread, which must be a thread of its own
    /// (not one of an async runtime): it blocks while waiting for its turn and the connection.
    /// Work that may ask to be run again ([`Failure::Retry`]): its transaction is then rolled
    /// back and `None` returned. So it is when PostgreSQL ended the transaction to break a
    /// deadlock: two writers inserting the same keys in other orders (two processes, or a
    /// recorder's two writers), of which the other went on.
    pub(crate) fn transaction_blocking_or_retry<T, F>(
        &self,
        work: F,
    ) -> Result<Option<T>, StorageError>
    where
        F: FnOnce(&mut AnyConnection) -> Result<T, Failure>,
    {
        let _turn = self.writers.as_ref().map(|writers| writers.blocking_turn());
        let started = std::time::Instant::now();
        let pooled = self.pool.get_timeout(self.waits.pool);
        self.checkouts.observe(started.elapsed());
        let mut pooled = pooled.map_err(|e| StorageError::Unavailable(e.to_string()))?;
        let written = write_transaction(&mut pooled.conn, work);
        self.told.tell(notices::take());
        let outcome = match written {
            Ok(value) => Ok(Some(value)),
            Err(Failure::Retry) => Ok(None),
            Err(Failure::Query(e)) if deadlocked(&e) => Ok(None),
            Err(failure) => Err(StorageError::from(failure)),
        };
        // Its callers were answered by their deadline (contract §20); a connection that took
        // longer than that hung, and is not used again.
        if started.elapsed() > self.waits.request {
            pooled.discard = true;
        }
        self.reported(outcome, true)
    }
}

/// What a call's thread needs of the database to get a connection by the call's deadline.
struct Checkout {
    pool: r2d2::Pool<Manager>,
    pool_wait: std::time::Duration,
    checkouts: Arc<domain::health::Durations>,
    /// When the call was asked for: its wait for a connection is counted from then.
    asked: std::time::Instant,
    deadline: tokio::time::Instant,
}

impl Checkout {
    /// On the call's thread: runs `work` on a pooled connection, unless the call was given up
    /// (at its deadline, or by its waiter, as `shared` says) before it started; a connection
    /// whose call was given up meanwhile is discarded.
    fn run<T, F>(self, shared: &Mutex<CallState>, work: F) -> Result<T, StorageError>
    where
        F: FnOnce(&mut AnyConnection) -> Result<T, Failure>,
    {
        let gave_up = || StorageError::Unavailable("gave up before starting".into());
        let left = self
            .deadline
            .saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() || lock(shared).is_abandoned() {
            return Err(gave_up());
        }
        let pooled = self.pool.get_timeout(left.min(self.pool_wait));
        self.checkouts.observe(self.asked.elapsed());
        let mut pooled = pooled.map_err(|e| StorageError::Unavailable(e.to_string()))?;
        {
            let mut state = lock(shared);
            if state.is_abandoned() {
                pooled.discard = true;
                return Err(gave_up());
            }
            *state = CallState::Running(pooled.backend);
        }
        let outcome = work(&mut pooled.conn).map_err(StorageError::from);
        let mut state = lock(shared);
        if state.is_abandoned() {
            pooled.discard = true;
        } else {
            *state = CallState::Ended;
        }
        outcome
    }
}
