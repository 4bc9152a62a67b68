//! The checks of a trigger's elements against the flow, beyond their shape: variables and
//! their types, the streams named, the segment, and the size of the push payload.

use std::collections::BTreeSet;

use serde_json::Value;

use super::TriggerService;
use crate::id::IdKind;
use crate::trigger::plan::FlowPlan;
use crate::trigger::request::{Payload, Rejected, Target};
use crate::trigger::variables::{render, resolve, Platform, ResolvedVariables};
use crate::trigger::Mode;
use crate::{DomainError, FieldError};

impl TriggerService {
    /// A rejected request's problems, with those the flow finds in its drafts. Without a
    /// runnable flow, the problems of its shape alone.
    pub(super) async fn all_problems(
        &self,
        env: &str,
        flow_id: &str,
        mode: Mode,
        rejected: Rejected,
    ) -> Result<DomainError, DomainError> {
        let Rejected {
            mut problems,
            drafts,
            strict_variables,
        } = rejected;
        let Ok((_, _, plan)) = self.runnable(env, flow_id, mode).await else {
            return Ok(DomainError::Validation(problems));
        };
        let known_streams = self
            .known_streams(env, drafts.iter().map(|d| &d.payload))
            .await?;
        let shape = problems.len();
        for (i, draft) in drafts.iter().enumerate() {
            let (found, _) = self
                .check_element(
                    env,
                    &plan,
                    (draft.target.as_ref(), &draft.payload),
                    strict_variables,
                    &format!("flows[{i}]"),
                    &known_streams,
                )
                .await?;
            // A field whose shape was wrong is not reported twice (a variable that did not
            // parse is also missing from the payload).
            let overlaps = |f: &FieldError| {
                problems[..shape]
                    .iter()
                    .any(|p| p.field.starts_with(&f.field) || f.field.starts_with(&p.field))
            };
            let found: Vec<FieldError> = found.into_iter().filter(|f| !overlaps(f)).collect();
            problems.extend(found);
        }
        // In the order of the elements, each element's shape first.
        problems.sort_by_key(|p| element_index(&p.field));
        Ok(DomainError::Validation(problems))
    }

    /// What is wrong with one element beyond its shape (variables, streams, the segment), and
    /// its variables when they resolve.
    pub(super) async fn check_element(
        &self,
        env: &str,
        plan: &FlowPlan,
        (target, payload): (Option<&Target>, &Payload),
        strict: bool,
        path: &str,
        known_streams: &BTreeSet<String>,
    ) -> Result<(Vec<FieldError>, Option<ResolvedVariables>), DomainError> {
        let at = |rest: &str| {
            if path.is_empty() {
                rest.to_owned()
            } else {
                format!("{path}.{rest}")
            }
        };
        let mut errors = Vec::new();
        let resolved = match resolve(&plan.config, payload, strict, &at("payload")) {
            Err(mut e) => {
                errors.append(&mut e);
                None
            }
            Ok(variables) => {
                errors.extend(push_payload_problems(
                    plan,
                    payload,
                    &variables,
                    &at("payload"),
                ));
                Some(variables)
            }
        };
        if let Some(ids) = &payload.card_options.target_stream_ids {
            for (j, id) in ids.iter().enumerate() {
                if !known_streams.contains(id) {
                    errors.push(FieldError::new(
                        at(&format!("payload.cardOptions.targetStreamIds[{j}]")),
                        format!("`{id}` is not a stream of this environment"),
                    ));
                }
            }
        }
        if let Some(Target::Segment(segment)) = target {
            if self.segments.get(env, segment).await?.is_none() {
                errors.push(FieldError::new(
                    at("target.targetSegmentId"),
                    format!("`{segment}` is not a segment of this environment"),
                ));
            }
        }
        Ok((errors, resolved))
    }
}

/// The element a problem's path names (`flows[3].payload...` is 3); the request's own
/// fields come first.
fn element_index(path: &str) -> Option<usize> {
    let rest = path.strip_prefix("flows[")?;
    rest[..rest.find(']')?].parse().ok()
}

/// The push payload (the notification as rendered for iOS and Android, the trigger's
/// `notificationDetail` and the ids the SDKs need) must fit in 2 KB (docs/api.md, Triggers,
/// and its Sending pushes). Checked at
/// trigger time with ids of their longest form, so a card never fails to push for its size.
pub(crate) fn push_payload_problems(
    plan: &FlowPlan,
    payload: &Payload,
    variables: &ResolvedVariables,
    path: &str,
) -> Vec<FieldError> {
    let templates = plan.notifying_templates();
    if templates.is_empty() {
        return Vec::new();
    }
    let platforms = payload.card_options.target_platforms.unwrap_or_default();
    let detail = payload
        .notification_detail
        .clone()
        .map(Value::Object)
        .unwrap_or(Value::Null);
    let longest_id = format!("{}_{}", IdKind::Stream.prefix(), "0".repeat(26));
    let mut errors = Vec::new();
    for (template_id, template) in templates {
        for (name, platform, on) in [
            ("iOS", Platform::Ios, platforms.ios),
            ("Android", Platform::Android, platforms.android),
        ] {
            let rendered = render(template, variables, platform);
            let message = rendered.get("notification").and_then(|n| {
                crate::push::PushMessage::new(n, &longest_id, &longest_id, &detail, None)
            });
            let size = message.map_or(0, |m| m.payload_bytes());
            if on && size > crate::push::MAX_PUSH_PAYLOAD_BYTES {
                errors.push(FieldError::new(
                    path,
                    format!(
                        "the push notification of card template `{template_id}` on {name} would be \
                            {size} bytes (its rendered text and notificationDetail); the limit is \
                                {} bytes",
                        crate::push::MAX_PUSH_PAYLOAD_BYTES
                    ),
                ));
            }
        }
    }
    errors
}
