//! Bulk tasks' half of triggering (CSV rows): each element validated and built on its own,
//! then recorded, one bad element refused alone.

use super::{invocation_of, reuse_problem, TriggerService};
use crate::trigger::invocation::{BatchResult, Invocation};
use crate::trigger::request::FlowElement;
use crate::trigger::Mode;
use crate::{DomainError, FieldError, StorageError};

/// Elements of a bulk task validated and built, not yet recorded: per element why it was
/// refused, and the valid ones' invocations with their runs.
#[derive(Debug)]
pub struct PreparedElements {
    outcome: Vec<Result<String, String>>,
    valid: Vec<(usize, Invocation, Option<BatchResult>)>,
}

impl TriggerService {
    /// For bulk tasks (CSV rows), with [`record_prepared`](Self::record_prepared): each element
    /// validated and recorded on its own; one bad element does not stop the others. This half
    /// does not write: each element validated, its invocation and its run (see
    /// [`INLINE_USERS`]) built. A bulk task prepares its next rows while the last ones are
    /// recorded.
    ///
    /// No caller is checked: the task's creator was. Fails for the whole call, as
    /// [`trigger`](Self::trigger) does, when the flow cannot run in `mode` (not found, nothing
    /// to run, archived), and on a storage error; an element's problems are its own, kept in
    /// the answer as one line (`path: message; ...`).
    ///
    /// [`INLINE_USERS`]: crate::trigger::invocation::INLINE_USERS
    pub async fn prepare_elements(
        &self,
        env: &str,
        flow_id: &str,
        mode: Mode,
        elements: Vec<FlowElement>,
    ) -> Result<PreparedElements, DomainError> {
        let (flow, version, plan) = self.runnable(env, flow_id, mode).await?;
        let known_streams = self
            .known_streams(env, elements.iter().map(|f| &f.payload))
            .await?;
        let now = self.clock.now();
        let mut outcome: Vec<Result<String, String>> = Vec::with_capacity(elements.len());
        let mut valid: Vec<(usize, Invocation, Option<BatchResult>)> = Vec::new();
        for (i, mut element) in elements.into_iter().enumerate() {
            let (problems, variables) = self
                .check_element(
                    env,
                    &plan,
                    (Some(&element.target), &element.payload),
                    false,
                    "",
                    &known_streams,
                )
                .await?;
            match variables {
                Some(variables) if problems.is_empty() => {
                    let invocation =
                        invocation_of(env, &flow.id, mode, version, &mut element, false, now);
                    let run = self
                        .inline_run(&invocation, &element, &plan, &variables)
                        .await?;
                    valid.push((i, invocation, run));
                    outcome.push(Ok(String::new()));
                }
                _ => outcome.push(Err(describe(&problems))),
            }
        }
        Ok(PreparedElements { outcome, valid })
    }

    /// Records what [`prepare_elements`](Self::prepare_elements) built. Per element, in order,
    /// its invocation id or why it was refused: its problems, or its `flowInvocationId` reused
    /// with another run (the others are recorded all the same).
    ///
    /// Fails with a storage error, and with [`StorageError::Unavailable`] when ids were still
    /// being reused for other runs meanwhile after the refused ones were left out.
    pub async fn record_prepared(
        &self,
        prepared: PreparedElements,
    ) -> Result<Vec<Result<String, String>>, DomainError> {
        let PreparedElements {
            mut outcome,
            mut valid,
        } = prepared;
        // A reused id that does not match refuses the whole record call: drop such elements
        // and record the rest again.
        for _ in 0..2 {
            // The runs are moved, not copied: after a refusal (rare) the rest are recorded
            // again without them, for the workers to run.
            let asked: Vec<(Invocation, Option<BatchResult>)> = valid
                .iter_mut()
                .map(|(_, inv, run)| (inv.clone(), run.take()))
                .collect();
            let stored = self.invocations.record_run(asked).await?;
            let mut refused = Vec::new();
            for ((i, inv, _), stored) in valid.iter().zip(&stored) {
                if let Some(problem) = reuse_problem(inv, stored.as_ref(), "flowInvocationId") {
                    refused.push(*i);
                    outcome[*i] = Err(problem.to_string());
                }
            }
            if refused.is_empty() {
                for (i, inv, _) in &valid {
                    outcome[*i] = Ok(inv.id.clone().into());
                }
                return Ok(outcome);
            }
            valid.retain(|(i, _, _)| !refused.contains(i));
        }
        Err(DomainError::Storage(StorageError::Unavailable(
            "invocation ids kept being reused concurrently".into(),
        )))
    }
}

/// Field problems as one line: `path: message; ...`.
fn describe(problems: &[FieldError]) -> String {
    problems
        .iter()
        .map(|e| {
            if e.field.is_empty() {
                e.message.clone()
            } else {
                format!("{}: {}", e.field, e.message)
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}
