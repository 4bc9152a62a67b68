//! Building one batch of an invocation: a flow instance per user, with its cards and their
//! events, shared by the request path (runs recorded with their invocation) and the engine.

use std::sync::Arc;

use serde_json::{Map, Value};

use super::instances::FlowInstance;
use super::invocation::{BatchResult, Invocation, InvocationStatus, DEFAULT_PRIORITY};
use super::plan::{CardStep, FlowPlan};
use super::request::{CardOptions, FlowElement, Payload, Platforms};
use super::variables::{resolve, Platform, ResolvedVariables};
use super::Mode;
use crate::audience::{Stream, StreamRepository};
use crate::card::{card_event, trigger_context, CardContent, CardInstance, CardStatus};
use crate::flow::steps::run;
use crate::flow::steps::Program;
use crate::id::{new_id, IdKind};
use crate::{DomainError, StorageError, Timestamp};

/// The users of one batch, and where the next batch starts.
pub(super) struct Audience {
    pub(super) users: Vec<String>,
    pub(super) next: Option<String>,
}

/// The environment's default stream, created if it has none yet.
pub(super) async fn default_stream_of(
    streams: &dyn StreamRepository,
    env: &str,
    now: Timestamp,
) -> Result<String, StorageError> {
    streams
        .list(env, Stream::default_for(env, now))
        .await?
        .into_iter()
        .find(|s| s.is_default)
        .map(|s| s.id.into_string())
        .ok_or_else(|| StorageError::Internal("no default stream".into()))
}

/// One batch of `invocation` for `audience`: a flow instance per user, with a card and its
/// event per `create-card` step it reaches at once (every one, for a flow that neither waits
/// nor branches; else those before its waits, and the instance itself, stored as it goes).
pub(super) fn batch_for(
    invocation: &Invocation,
    plan: &FlowPlan,
    payload: &Payload,
    variables: &ResolvedVariables,
    audience: Audience,
    default_stream: &str,
    now: Timestamp,
) -> BatchResult {
    let mut batch = empty_batch(invocation, now);
    // What an instance's first run does depends on the invocation alone (its variables and
    // the time), so it is run once, with placeholder card ids, for every user of the batch.
    let first = plan.program.as_ref().map(|program| {
        let mut n = 0usize;
        run::start(program, &flow_variables(variables), now, &mut || {
            n += 1;
            n.to_string()
        })
    });
    let steps: Vec<&CardStep> = match &first {
        Some(first) => first
            .cards
            .iter()
            .filter_map(|(step, _)| plan.card_step(step))
            .collect(),
        None => plan.cards.iter().collect(),
    };
    // Everything but the ids and the user is the same for every card of a step: rendered
    // once per batch, shared by the cards.
    let mut prototypes: Vec<CardInstance> = steps
        .iter()
        .map(|step| card_prototype(invocation, step, payload, variables, default_stream, now))
        .collect();
    let users = audience.users.len();
    batch.cards.reserve(users * prototypes.len());
    batch.events.reserve(users * prototypes.len());
    for (n, user) in audience.users.iter().enumerate() {
        // The last user's cards take the prototypes (a CSV row's one user: a copy fewer).
        let cards = if n + 1 == users {
            std::mem::take(&mut prototypes)
        } else {
            prototypes.clone()
        };
        add_user(&mut batch, invocation, user, cards, first.as_ref(), now);
    }
    batch.users_targeted = audience.users.len() as u64;
    batch.cards_created = batch.cards.len() as u64;
    batch.cursor = audience.next.clone().or(invocation.cursor.clone());
    batch.status = if audience.next.is_some() {
        InvocationStatus::Running
    } else {
        InvocationStatus::Completed
    };
    batch
}

/// Adds `user`'s flow instance to `batch`: its `cards` (made from the prototypes) with their
/// events and, for a flow with a program, the instance as its `first` run left it.
fn add_user(
    batch: &mut BatchResult,
    invocation: &Invocation,
    user: &str,
    cards: Vec<CardInstance>,
    first: Option<&run::Advance>,
    now: Timestamp,
) {
    // The user's flow instance: its cards, which carry its id.
    let instance = new_id(IdKind::FlowInstance);
    let mut records = first.map(|f| f.records.clone());
    for prototype in cards {
        let card = Arc::new(CardInstance {
            id: new_id(IdKind::Card).into(),
            user_id: user.to_owned(),
            flow_instance_id: instance.clone(),
            ..prototype
        });
        if let Some(record) = records.as_mut().and_then(|r| r.get_mut(&card.step_id)) {
            record.card = Some(card.id.to_string());
        }
        batch.events.push(card_event(card.clone(), None, None, now));
        batch.cards.push(card);
    }
    if let (Some(first), Some(records)) = (first, records) {
        batch.instances.push(FlowInstance {
            environment_id: invocation.environment_id.clone(),
            id: instance,
            invocation_id: invocation.id.to_string(),
            flow_id: invocation.flow_id.clone(),
            flow_version: invocation.flow_version,
            user_id: user.to_owned(),
            state: first.state,
            records,
            due: first.due,
            revision: 0,
            created: now,
            updated: now,
        });
    }
}

/// The flow variables an instance's conditions and waits read: each variable's value as the
/// trigger resolved it (payload, else default), as text.
pub(super) fn flow_variables(variables: &ResolvedVariables) -> Map<String, Value> {
    variables
        .values
        .iter()
        .map(|(name, v)| (name.clone(), Value::String(v.web.clone())))
        .collect()
}

/// The cards, with their events, that the steps `made` ((step id, card id)) of one instance
/// make when it runs on.
#[allow(clippy::too_many_arguments)]
pub(super) fn instance_cards(
    invocation: &Invocation,
    plan: &FlowPlan,
    payload: &Payload,
    variables: &ResolvedVariables,
    default_stream: &str,
    instance: &FlowInstance,
    made: &[(String, String)],
    now: Timestamp,
) -> (Vec<Arc<CardInstance>>, Vec<crate::card::AnalyticsEvent>) {
    let mut cards = Vec::with_capacity(made.len());
    let mut events = Vec::with_capacity(made.len());
    for (step, id) in made {
        let Some(step) = plan.card_step(step) else {
            continue;
        };
        let card = Arc::new(CardInstance {
            id: id.clone().into(),
            user_id: instance.user_id.clone(),
            flow_instance_id: instance.id.clone(),
            ..card_prototype(invocation, step, payload, variables, default_stream, now)
        });
        events.push(card_event(card.clone(), None, None, now));
        cards.push(card);
    }
    (cards, events)
}

/// The element an invocation stored (its target and payload) and its variables resolved
/// against the flow version's configuration, as the trigger resolved them.
pub(super) fn inputs_of(
    invocation: &Invocation,
    plan: &FlowPlan,
) -> Result<(FlowElement, ResolvedVariables), DomainError> {
    let element = super::request::parse_element(serde_json::json!({
        "target": invocation.target.value(),
        "payload": invocation.payload.value(),
    }))
    .map_err(DomainError::Validation)?;
    let variables = resolve(
        &plan.config,
        &element.payload,
        invocation.strict_variables,
        "payload",
    )
    .map_err(DomainError::Validation)?;
    Ok((element, variables))
}

/// The program of a staged plan.
pub(super) fn program_of(plan: &FlowPlan) -> Option<&Program> {
    plan.program.as_deref()
}

/// A batch that changes nothing but ends the claim.
pub(super) fn empty_batch(invocation: &Invocation, now: Timestamp) -> BatchResult {
    BatchResult {
        environment_id: invocation.environment_id.clone(),
        invocation_id: invocation.id.clone().into(),
        from_cursor: invocation.cursor.clone(),
        cursor: invocation.cursor.clone(),
        status: invocation.status,
        users_targeted: 0,
        cards_created: 0,
        errors: Vec::new(),
        cards: Vec::new(),
        events: Vec::new(),
        instances: Vec::new(),
        updated: now,
        lease_until: None,
    }
}

/// The card of one step of `invocation`, without its id, user and flow instance (empty).
fn card_prototype(
    invocation: &Invocation,
    step: &CardStep,
    payload: &Payload,
    variables: &ResolvedVariables,
    default_stream: &str,
    now: Timestamp,
) -> CardInstance {
    let options: &CardOptions = &payload.card_options;
    let platforms = options.target_platforms.unwrap_or_default();
    let priority = options
        .priority
        .or(step.priority)
        .unwrap_or(DEFAULT_PRIORITY);
    let embargo = options.embargo.filter(|e| *e > now);
    // Bounded when accepted; held in range all the same (docs/api.md, Bounded values: no
    // arithmetic on outside values may panic).
    let expires_at = options.expires.or_else(|| {
        options
            .expires_interval
            .map(|d| crate::time::saturating_after(embargo.unwrap_or(now), d))
    });
    let status = if embargo.is_some() {
        CardStatus::Embargoed
    } else {
        CardStatus::Active
    };
    let stream_ids = match &options.target_stream_ids {
        Some(ids) if !ids.is_empty() => {
            // Every card is in `All cards` too.
            let mut ids = ids.clone();
            if !ids.iter().any(|i| i == default_stream) {
                ids.insert(0, default_stream.to_owned());
            }
            ids
        }
        _ => vec![default_stream.to_owned()],
    };
    CardInstance {
        id: String::new().into(),
        environment_id: invocation.environment_id.clone(),
        user_id: String::new(),
        flow_instance_id: String::new(),
        invocation_id: invocation.id.clone().into(),
        flow_id: invocation.flow_id.clone(),
        flow_version: invocation.flow_version,
        step_id: step.step_id.clone(),
        template_id: step.template_id.clone(),
        template_name: step.template_name.clone(),
        status,
        priority,
        stream_ids,
        platforms: Platforms::names(&platforms)
            .into_iter()
            .map(str::to_owned)
            .collect(),
        content: content_of(step, &platforms, variables),
        context: trigger_context(
            invocation.mode == Mode::Test,
            variables.values.iter().map(|(k, v)| (k, &v.web)),
            payload.metadata.as_ref(),
            payload.notification_detail.as_ref(),
        ),
        embargo_until: embargo,
        expires_at,
        snoozed_until: None,
        published_at: (status == CardStatus::Active).then_some(now),
        created: now,
        updated: now,
    }
}

/// The card content of `step` on each of `platforms`: one view for all when it renders alike
/// on each (see [`CardContent`]).
fn content_of(
    step: &CardStep,
    platforms: &Platforms,
    variables: &ResolvedVariables,
) -> CardContent {
    let on: Vec<(&str, Platform)> = [
        ("Web", Platform::Web, platforms.web),
        ("iOS", Platform::Ios, platforms.ios),
        ("Android", Platform::Android, platforms.android),
    ]
    .into_iter()
    .filter(|(_, _, on)| *on)
    .map(|(name, platform, _)| (name, platform))
    .collect();
    let Some((_, first)) = on.first() else {
        return CardContent::default();
    };
    let notifies = step.view.notifies();
    if step.view.same_on_every_platform(variables) {
        return CardContent::shared(&step.view.render(variables, *first), notifies);
    }
    let views: Vec<(&str, String)> = on
        .iter()
        .map(|(name, platform)| (*name, step.view.render(variables, *platform)))
        .collect();
    if views.iter().all(|(_, v)| *v == views[0].1) {
        return CardContent::shared(&views[0].1, notifies);
    }
    let views: Vec<(&str, &str)> = views.iter().map(|(n, v)| (*n, v.as_str())).collect();
    CardContent::per_platform(&views, notifies)
}
