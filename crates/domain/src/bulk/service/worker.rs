//! The worker's step of [`BulkService`]: claiming a task and recording its next rows through
//! the trigger service, each chunk prepared while the ones before are recorded.

use std::collections::HashMap;

use futures_util::StreamExt;

use super::{file_error, BulkService, CHUNK_ROWS};
use crate::audience::UserQuery;
use crate::bulk::matching::{Matched, Matcher, Wanted};
use crate::bulk::{BulkStatus, BulkTask, CsvHeader, CsvRow, RowError, ROWS_PER_STEP};
use crate::trigger::invocation::MAX_RUNNING_BULK;
use crate::trigger::{FlowElement, PreparedElements};
use crate::{DomainError, PageRequest};

/// Chunks handed to the recorder and not yet recorded, at most, while the next is prepared:
/// the recorder writes the chunks waiting in one transaction, so a chunk prepared while one is
/// written joins the next.
const RECORDING: usize = 16;

/// Rows of a step prepared, to be recorded: the rows refused so far, and the rows of the
/// prepared elements, in order.
struct Chunk {
    errors: Vec<RowError>,
    rows: Vec<u64>,
    prepared: Option<PreparedElements>,
}

impl BulkService {
    /// One step of background work: up to [`ROWS_PER_STEP`] rows of one task to the engine.
    ///
    /// Claims one due task (a queued one only while its environment has a bulk-task slot
    /// free: [`MAX_RUNNING_BULK`]) and records its next rows, in order, each as the invocation
    /// of one trigger element with the validation and idempotency of `/start`; a row that
    /// cannot be read, targets no user or too many, or is refused by the trigger is a row
    /// error. Then saves the progress, fenced by the task's lease and cursor; a task with no
    /// row left, or fewer than [`ROWS_PER_STEP`], is completed. A save refused because the
    /// lease had passed to another holder is counted ([`take_stale`](Self::take_stale)).
    ///
    /// Answers false when no task was due, true when one was claimed. A step that panics or
    /// fails unexpectedly is tried again, up to [`crate::unit::ATTEMPTS`] times in all; then
    /// the task fails alone, with an `errorId` in its errors and in the log
    /// (docs/operations.md, When one unit of work fails). An error that waiting cures (an
    /// unreachable database) is returned with no progress saved: the task is claimed again
    /// when its lease runs out. Rows are recorded under ids of their own (their
    /// `flowInvocationId`, else their task and number), so a step tried again records none
    /// twice.
    pub async fn step(&self) -> Result<bool, DomainError> {
        let now = self.clock.now();
        let Some(task) = self
            .tasks
            .claim(now, now + self.claims.lease, MAX_RUNNING_BULK)
            .await?
        else {
            return Ok(false);
        };
        let (env, id, held) = (task.environment_id.clone(), task.id, task.lease_until);
        match crate::unit::attempts("csv task", &id.to_string(), || self.run_step(task.clone()))
            .await
        {
            Ok(outcome) => outcome,
            Err(failure) => {
                let errors = file_error(failure.message());
                self.held(
                    self.tasks
                        .fail(&env, id, errors, self.clock.now(), held)
                        .await?,
                );
                Ok(true)
            }
        }
    }

    /// Counts a write refused because the lease had passed to another holder.
    fn held(&self, held: bool) {
        self.claims.held(held);
    }

    /// One step of a claimed task.
    async fn run_step(&self, mut task: BulkTask) -> Result<bool, DomainError> {
        let now = self.clock.now();
        let header = match task.header.as_deref().map(CsvHeader::parse) {
            Some(Ok(h)) => h,
            _ => {
                let held = self
                    .tasks
                    .fail(
                        &task.environment_id,
                        task.id,
                        file_error("the stored header is unreadable".into()),
                        now,
                        task.lease_until,
                    )
                    .await?;
                self.held(held);
                return Ok(true);
            }
        };
        let rows = self
            .tasks
            .rows(&task.environment_id, task.id, task.cursor, ROWS_PER_STEP)
            .await?;
        let from = task.cursor;
        if rows.is_empty() {
            task.status = BulkStatus::Completed;
            task.updated = self.clock.now();
            let held = self
                .tasks
                .save_progress(&task, from, 0, 0, Vec::new())
                .await?;
            self.held(held);
            return Ok(true);
        }
        // In chunks, each prepared while the ones before are recorded: the recorder works on
        // threads of its own (building a chunk's rows, then writing them), so a chunk is
        // handed to it as soon as it is prepared, up to RECORDING chunks at once.
        let matched = self.match_by_attributes(&task, &header, &rows).await?;
        let mut errors: Vec<RowError> = Vec::new();
        let mut recording = futures_util::stream::FuturesOrdered::new();
        for rows in rows.chunks(CHUNK_ROWS) {
            let prepare = std::pin::pin!(self.prepare_chunk(&task, &header, rows, &matched));
            let prepared = recorded_while(&mut recording, prepare, &mut errors).await?;
            recording.push_back(self.record_chunk(prepared));
            while recording.len() > RECORDING {
                if let Some(recorded) = recording.next().await {
                    errors.extend(recorded?);
                }
            }
        }
        while let Some(recorded) = recording.next().await {
            errors.extend(recorded?);
        }
        errors.sort_by_key(|e| e.row);
        let last = rows.last().map(|(n, _)| *n).unwrap_or(from);
        task.cursor = last;
        task.updated = self.clock.now();
        if rows.len() < ROWS_PER_STEP as usize {
            task.status = BulkStatus::Completed;
        }
        let failed = errors.len() as u64;
        let held = self
            .tasks
            .save_progress(&task, from, rows.len() as u64, failed, errors)
            .await?;
        self.held(held);
        Ok(true)
    }

    /// The users each of the step's rows without an `id` matches by its attributes, in one
    /// read of the environment's users (see [`crate::bulk::matching`]).
    async fn match_by_attributes(
        &self,
        task: &BulkTask,
        header: &CsvHeader,
        rows: &[(u64, Vec<String>)],
    ) -> Result<HashMap<u64, Matched>, DomainError> {
        let wanted = rows
            .iter()
            .filter_map(|(number, cells)| {
                let row = header.row(cells).ok()?;
                if row.attributes.contains_key("id") {
                    return None;
                }
                let filter = row.filter().ok()?;
                Some(Wanted {
                    number: *number,
                    attributes: row.attributes.into_iter().collect(),
                    filter,
                })
            })
            .collect();
        let mut matcher = Matcher::new(wanted);
        if matcher.is_empty() {
            return Ok(HashMap::new());
        }
        let mut after = None;
        loop {
            let page = PageRequest {
                limit: 1_000,
                after: after.clone(),
            };
            let users = self
                .users
                .list(&task.environment_id, &UserQuery::default(), &page)
                .await?;
            let more = users.len() > 1_000;
            for user in users.iter().take(1_000) {
                matcher.offer(user);
            }
            if !more {
                break;
            }
            after = (users.get(999).map(|u| u.id.clone())).map(Into::into);
        }
        Ok(matcher.finish())
    }

    /// The rows' elements validated and built, not yet recorded.
    async fn prepare_chunk(
        &self,
        task: &BulkTask,
        header: &CsvHeader,
        rows: &[(u64, Vec<String>)],
        matched: &HashMap<u64, Matched>,
    ) -> Result<Chunk, DomainError> {
        let mut chunk = Chunk {
            errors: Vec::new(),
            rows: Vec::new(),
            prepared: None,
        };
        let mut elements: Vec<FlowElement> = Vec::new();
        for (number, cells) in rows {
            match self.element(task, header, *number, cells, matched).await? {
                Ok(element) => {
                    elements.push(element);
                    chunk.rows.push(*number);
                }
                Err(message) => chunk.errors.push(RowError {
                    row: *number,
                    message,
                }),
            }
        }
        if elements.is_empty() {
            return Ok(chunk);
        }
        let prepared = self
            .triggers
            .prepare_elements(&task.environment_id, &task.flow_id, task.mode, elements)
            .await;
        match prepared {
            Ok(prepared) => chunk.prepared = Some(prepared),
            // The flow was unpublished, archived or deleted meanwhile: every row fails.
            Err(e @ (DomainError::NotFound(_) | DomainError::Conflict { .. })) => {
                for row in std::mem::take(&mut chunk.rows) {
                    chunk.errors.push(RowError {
                        row,
                        message: e.to_string(),
                    });
                }
            }
            Err(other) => return Err(other),
        }
        Ok(chunk)
    }

    /// Records a prepared chunk; its rows' errors.
    async fn record_chunk(&self, chunk: Chunk) -> Result<Vec<RowError>, DomainError> {
        let mut errors = chunk.errors;
        if let Some(prepared) = chunk.prepared {
            let results = self.triggers.record_prepared(prepared).await?;
            for (row, result) in chunk.rows.iter().zip(results) {
                if let Err(message) = result {
                    errors.push(RowError { row: *row, message });
                }
            }
        }
        Ok(errors)
    }

    /// The trigger element of one row, or why the row is refused.
    async fn element(
        &self,
        task: &BulkTask,
        header: &CsvHeader,
        number: u64,
        cells: &[String],
        matched: &HashMap<u64, Matched>,
    ) -> Result<Result<FlowElement, String>, DomainError> {
        let row = match header.row(cells) {
            Ok(r) => r,
            Err(e) => return Ok(Err(e)),
        };
        let users = match self.users_of(task, &row, matched.get(&number)).await? {
            Ok(u) => u,
            Err(e) => return Ok(Err(e)),
        };
        let element = row.element(users, || format!("csv-{}-{number}", task.id));
        Ok(match crate::trigger::request::parse_element(element) {
            Ok(element) => Ok(element),
            Err(problems) => Err(problems
                .iter()
                .map(|p| format!("{}: {}", p.field.trim_start_matches("flows[0]."), p.message))
                .collect::<Vec<_>>()
                .join("; ")),
        })
    }

    /// The users a row targets: its `id` (checked against its other attributes), or the users
    /// its attributes matched, at most [`MAX_USERS_PER_ROW`](crate::bulk::MAX_USERS_PER_ROW)
    /// (`matched`: from [`BulkService::match_by_attributes`]).
    async fn users_of(
        &self,
        task: &BulkTask,
        row: &CsvRow,
        matched: Option<&Matched>,
    ) -> Result<Result<Vec<String>, String>, DomainError> {
        if let (Some(id), 1) = (row.attributes.get("id"), row.attributes.len()) {
            // Only the id: a user target, exactly as /start takes it (no filter to build: an
            // `id` condition on a string is always valid).
            return Ok(Ok(vec![id.clone()]));
        }
        let filter = match row.filter() {
            Ok(f) => f,
            Err(e) => return Ok(Err(e)),
        };
        let env = &task.environment_id;
        if let Some(id) = row.attributes.get("id") {
            return Ok(match self.users.get(env, id).await? {
                Some(user) if filter.matches(&user) => Ok(vec![id.clone()]),
                Some(_) => Err(format!(
                    "end user {id:?} does not have the row's target.attributes"
                )),
                None if row.attributes.len() == 1 => Ok(vec![id.clone()]),
                None => Err(format!("no end user {id:?}")),
            });
        }
        // No id: the users its attributes matched, found for the whole step at once.
        Ok(matched
            .cloned()
            .unwrap_or_else(|| Err("matches no end user".into())))
    }
}

/// Awaits `work` while the chunks in `recording` go on being recorded, collecting the row
/// errors of those that end meanwhile. `recording` is polled first, so that a chunk just
/// pushed reaches the recorder before `work` takes the thread.
async fn recorded_while<R, W, T>(
    recording: &mut futures_util::stream::FuturesOrdered<R>,
    mut work: std::pin::Pin<&mut W>,
    errors: &mut Vec<RowError>,
) -> Result<T, DomainError>
where
    R: std::future::Future<Output = Result<Vec<RowError>, DomainError>>,
    W: std::future::Future<Output = Result<T, DomainError>>,
{
    use futures_util::future::{select, Either};
    loop {
        if recording.is_empty() {
            return work.await;
        }
        match select(recording.next(), work.as_mut()).await {
            Either::Left((Some(recorded), _)) => errors.extend(recorded?),
            Either::Left((None, _)) => {}
            Either::Right((done, _)) => return done,
        }
    }
}
