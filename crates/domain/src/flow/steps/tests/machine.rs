//! The step machine: each step type's transitions, deadlines, and the instance's state.

use std::collections::BTreeSet;

use chrono::{DateTime, Duration};
use serde_json::{json, Map, Value};

use super::super::*;
use super::valid;
use crate::time::{latest, parse_timestamp};
use crate::Timestamp;

fn t(text: &str) -> Timestamp {
    parse_timestamp(text).expect("timestamp")
}

const T0: &str = "2027-03-01T12:00:00.000Z";

fn program() -> Program {
    Program::parse(&valid()).expect("valid")
}

fn step(id: &str) -> StepDefinition {
    program().step(id).cloned().expect("step")
}

fn start<'a>(facts: &'a Facts, card: Option<&'a ClosedCard>) -> Event<'a> {
    Event::Started(Start {
        at: t(T0),
        facts,
        card,
    })
}

fn wait(until: WaitUntil) -> StepDefinition {
    StepDefinition {
        id: "w".into(),
        kind: StepKind::Wait(Wait {
            until,
            next: vec!["after".into()],
        }),
    }
}

#[test]
fn a_card_step_runs_then_is_done_with_created() {
    let facts = Facts::default();
    let ask = step("ask");
    let running = transition(&ask, &StepState::Pending, start(&facts, None));
    assert_eq!(running.state, StepState::Running);
    assert!(running.follow.is_empty() && running.changed);
    let done = transition(&ask, &running.state, Event::CardCreated);
    assert_eq!(done.follow, ["listen"]);
    assert_eq!(done.state.status(), StepStatus::Done);
    // A second "created" (a retried save) changes nothing and leads nowhere again.
    let again = transition(&ask, &done.state, Event::CardCreated);
    assert!(!again.changed && again.follow.is_empty());
    assert_eq!(again.state, done.state);
}

#[test]
fn a_timed_wait_fixes_its_deadline_at_start() {
    let facts = Facts::default();
    let pause = step("pause");
    let waiting = transition(&pause, &StepState::Pending, start(&facts, None));
    let deadline = t("2027-03-01T12:30:00.000Z");
    assert_eq!(waiting.state, StepState::Waiting { deadline });
    // A reading before the deadline (an early timer, a clock behind) changes nothing.
    let early = Event::DeadlineReached {
        at: t("2027-03-01T12:29:59.999Z"),
    };
    assert!(!transition(&pause, &waiting.state, early).changed);
    let due = transition(
        &pause,
        &waiting.state,
        Event::DeadlineReached { at: deadline },
    );
    assert_eq!(
        due.state,
        StepState::Done {
            outcome: Outcome::Elapsed,
            data: StepData::None
        }
    );
    assert_eq!(due.follow, ["remind"]);
    let twice = transition(&pause, &due.state, Event::DeadlineReached { at: deadline });
    assert!(!twice.changed);
}

#[test]
fn passed_and_far_deadlines_end_the_wait_at_once() {
    let facts = Facts::default();
    let cases = [
        ("2027-03-01T11:00:00Z", Outcome::Past),
        (T0, Outcome::Past),
        ("2028-03-01T12:00:00Z", Outcome::Capped),
    ];
    for (until, outcome) in cases {
        let w = wait(WaitUntil::At(t(until)));
        let done = transition(&w, &StepState::Pending, start(&facts, None));
        let expected = StepState::Done {
            outcome,
            data: StepData::None,
        };
        assert_eq!(done.state, expected, "{until}");
        assert_eq!(done.follow, ["after"]);
    }
    // Exactly 365 days ahead still waits.
    let year = wait(WaitUntil::At(t("2028-02-29T12:00:00Z")));
    let waiting = transition(&year, &StepState::Pending, start(&facts, None));
    assert_eq!(waiting.state.status(), StepStatus::Waiting);
}

#[test]
fn deadlines_from_a_date_variable_and_its_offset() {
    let mut facts = Facts::default();
    let day_before = WaitUntil::Variable {
        name: "renewal".into(),
        offset: Duration::days(-1),
    };
    let none = wait_deadline(&day_before, t(T0), &facts);
    assert_eq!(
        none,
        Err(StepError::NoDate {
            name: "renewal".into()
        })
    );
    facts
        .variables
        .insert("renewal".into(), json!("2027-03-10T00:00:00Z"));
    let at = wait_deadline(&day_before, t(T0), &facts);
    assert_eq!(at, Ok(Deadline::At(t("2027-03-09T00:00:00Z"))));
    facts.variables.insert("renewal".into(), json!(12));
    let failed = transition(
        &wait(day_before.clone()),
        &StepState::Pending,
        start(&facts, None),
    );
    assert_eq!(failed.state.status(), StepStatus::Failed);
    // Near the ends of time, arithmetic gives an outcome, never a panic.
    facts
        .variables
        .insert("renewal".into(), json!("1970-01-01T00:00:00Z"));
    assert_eq!(
        wait_deadline(&day_before, t(T0), &facts),
        Ok(Deadline::Past)
    );
    let far = WaitUntil::Variable {
        name: "renewal".into(),
        offset: Duration::days(365),
    };
    facts
        .variables
        .insert("renewal".into(), json!("9999-12-31T00:00:00Z"));
    assert_eq!(wait_deadline(&far, t(T0), &facts), Ok(Deadline::Capped));
    let end = latest();
    let after = WaitUntil::After(Duration::days(2));
    assert_eq!(wait_deadline(&after, end, &facts), Ok(Deadline::Capped));
    let epoch = DateTime::UNIX_EPOCH;
    let before = WaitUntil::After(Duration::days(-2));
    assert_eq!(wait_deadline(&before, epoch, &facts), Ok(Deadline::Past));
}

fn closed(closure: CardClosure, values: Value) -> ClosedCard {
    let values: Map<String, Value> = values.as_object().cloned().unwrap_or_default();
    ClosedCard { closure, values }
}

#[test]
fn a_card_listener_hears_the_first_of_close_and_timeout() {
    let facts = Facts::default();
    let listen = step("listen");
    let waiting = transition(&listen, &StepState::Pending, start(&facts, None));
    let deadline = t("2027-03-02T12:00:00.000Z");
    assert_eq!(waiting.state, StepState::Waiting { deadline });
    let submitted = closed(CardClosure::Submitted, json!({"rating": 5}));
    let heard = transition(&listen, &waiting.state, Event::CardClosed(&submitted));
    assert_eq!(heard.follow, ["route"]);
    let StepState::Done { outcome, data } = &heard.state else {
        panic!("done");
    };
    assert_eq!(*outcome, Outcome::Submitted);
    assert_eq!(*data, StepData::Values(submitted.values.clone()));
    // `closed` covers the ways of closing that `on` does not name.
    let dismissed = closed(CardClosure::Dismissed, json!({}));
    let other = transition(&listen, &waiting.state, Event::CardClosed(&dismissed));
    assert_eq!(other.follow, ["thanks"]);
    let timeout = transition(
        &listen,
        &waiting.state,
        Event::DeadlineReached { at: deadline },
    );
    assert_eq!(timeout.follow, ["pause"]);
    // After the timeout, the card closing is heard by nobody.
    let late = transition(&listen, &timeout.state, Event::CardClosed(&submitted));
    assert!(!late.changed);
}

#[test]
fn a_card_closed_before_the_listener_started_ends_it_at_once() {
    let facts = Facts::default();
    let listen = step("listen");
    let expired = closed(CardClosure::Expired, json!({}));
    let done = transition(&listen, &StepState::Pending, start(&facts, Some(&expired)));
    let expected = StepState::Done {
        outcome: Outcome::Expired,
        data: StepData::None,
    };
    assert_eq!(done.state, expected);
    assert_eq!(done.follow, ["thanks"]);
    // An outcome neither named nor covered by `closed` ends the path.
    let mut bare = listen.clone();
    if let StepKind::WaitForCard(w) = &mut bare.kind {
        w.on.clear();
    }
    let ended = transition(&bare, &StepState::Pending, start(&facts, Some(&expired)));
    assert!(ended.follow.is_empty() && ended.changed);
}

#[test]
fn a_branch_takes_the_first_condition_that_holds() {
    let route = step("route");
    let mut facts = Facts::default();
    let unmatched = transition(&route, &StepState::Pending, start(&facts, None));
    assert_eq!(unmatched.follow, ["sorry"]);
    assert!(matches!(
        unmatched.state,
        StepState::Done {
            outcome: Outcome::Otherwise,
            ..
        }
    ));
    let values = json!({"rating": 4})
        .as_object()
        .cloned()
        .unwrap_or_default();
    facts.values.insert("listen".into(), values);
    let matched = transition(&route, &StepState::Pending, start(&facts, None));
    assert_eq!(matched.follow, ["thanks"]);
    let StepState::Done { outcome, data } = matched.state else {
        panic!("done");
    };
    assert_eq!((outcome, data), (Outcome::Matched, StepData::Condition(0)));
    let mut no_otherwise = route.clone();
    if let StepKind::Branch(b) = &mut no_otherwise.kind {
        b.otherwise = None;
    }
    let ended = transition(
        &no_otherwise,
        &StepState::Pending,
        start(&Facts::default(), None),
    );
    assert!(ended.follow.is_empty());
    assert!(matches!(
        ended.state,
        StepState::Done {
            outcome: Outcome::Unmatched,
            ..
        }
    ));
}

#[test]
fn cancel_and_failure_end_any_step_not_yet_ended() {
    let pause = step("pause");
    let waiting = StepState::Waiting {
        deadline: t("2027-03-01T12:30:00Z"),
    };
    for state in [StepState::Pending, StepState::Running, waiting.clone()] {
        let cancelled = transition(&pause, &state, Event::Cancel);
        assert_eq!(cancelled.state, StepState::Cancelled);
        assert!(cancelled.follow.is_empty());
        let failed = transition(&pause, &state, Event::Failed(StepError::Engine("x".into())));
        assert_eq!(failed.state.status(), StepStatus::Failed);
    }
    // Nothing runs after a cancel: its deadline coming changes nothing.
    let due = Event::DeadlineReached {
        at: t("2027-03-02T00:00:00Z"),
    };
    assert!(!transition(&pause, &StepState::Cancelled, due).changed);
    // A second start of a step already started is ignored.
    let facts = Facts::default();
    assert!(!transition(&pause, &waiting, start(&facts, None)).changed);
}

#[test]
fn instance_states_follow_their_steps_and_cards() {
    let done = StepState::Done {
        outcome: Outcome::Created,
        data: StepData::None,
    };
    let waiting = StepState::Waiting { deadline: t(T0) };
    let failed = StepState::Failed {
        error: StepError::Engine("gone".into()),
    };
    assert_eq!(
        instance_state([&done], false, false),
        InstanceState::Completed
    );
    assert_eq!(instance_state([&done], true, false), InstanceState::Active);
    assert_eq!(
        instance_state([&done, &waiting], false, false),
        InstanceState::Active
    );
    assert_eq!(
        instance_state([&waiting, &failed], true, false),
        InstanceState::Failed
    );
    assert_eq!(
        instance_state([&waiting], true, true),
        InstanceState::Cancelled
    );
    assert_eq!(instance_state([], false, false), InstanceState::Completed);
}

#[test]
fn a_step_with_several_parents_is_reached_once() {
    let mut reached: BTreeSet<String> = ["ask", "thanks"].map(String::from).into();
    let follow: Vec<String> = ["thanks", "sorry", "sorry"].map(String::from).into();
    assert_eq!(first_reached(&reached, &follow), ["sorry"]);
    reached.insert("sorry".into());
    assert!(first_reached(&reached, &follow).is_empty());
}
