//! An instance run forward: from its start, on deadlines and on closed cards; its records
//! stored and read back.

use chrono::{Duration, TimeZone, Utc};
use serde_json::{json, Map, Value};

use super::super::run::{self, Advance, Records};
use super::super::*;
use super::valid;
use crate::Timestamp;

fn t(seconds: i64) -> Timestamp {
    Utc.timestamp_opt(1_800_000_000 + seconds, 0)
        .single()
        .expect("an instant")
}

fn program() -> Program {
    Program::parse(&valid()).expect("valid")
}

fn vars(pairs: Value) -> Map<String, Value> {
    pairs.as_object().cloned().unwrap_or_default()
}

/// Card ids `c1`, `c2`, ... in the order asked.
fn cards() -> impl FnMut() -> String {
    let mut n = 0;
    move || {
        n += 1;
        format!("c{n}")
    }
}

fn outcome(advance: &Advance, step: &str) -> Option<Outcome> {
    match advance.records.get(step)?.state {
        StepState::Done { outcome, .. } => Some(outcome),
        _ => None,
    }
}

fn started() -> Advance {
    run::start(
        &program(),
        &vars(json!({"plan": "gold"})),
        t(0),
        &mut cards(),
    )
}

fn submitted(rating: i64) -> ClosedCard {
    ClosedCard {
        closure: CardClosure::Submitted,
        values: vars(json!({"rating": rating})),
    }
}

#[test]
fn a_start_makes_the_first_card_and_waits_for_it() {
    let first = started();
    assert_eq!(first.cards, [("ask".to_owned(), "c1".to_owned())]);
    assert_eq!(outcome(&first, "ask"), Some(Outcome::Created));
    assert_eq!(first.records["ask"].card.as_deref(), Some("c1"));
    assert_eq!(
        first.records["listen"].state,
        StepState::Waiting {
            deadline: t(86_400)
        }
    );
    assert_eq!(first.due, Some(t(86_400)));
    assert_eq!(first.state, InstanceState::Active);
    assert_eq!(first.records.len(), 2, "nothing past the wait");
}

#[test]
fn nothing_changes_before_a_deadline_and_no_card_closed() {
    let first = started();
    let again = run::resume(
        &program(),
        &Map::new(),
        first.records.clone(),
        t(10),
        &|_| None,
        &mut cards(),
    );
    assert!(!again.changed);
    assert_eq!(again.records, first.records);
    assert_eq!(again.due, first.due);
    assert!(again.cards.is_empty());
}

#[test]
fn a_submit_branches_on_its_values() {
    let program = program();
    for (rating, then) in [(5, "thanks"), (2, "before")] {
        let first = started();
        let card = submitted(rating);
        let on = run::resume(
            &program,
            &vars(json!({"plan": "gold", "vip": "false",
                         "renewal": "2027-02-10T00:00:00Z"})),
            first.records,
            t(60),
            &|id| (id == "c1").then(|| card.clone()),
            &mut cards(),
        );
        assert_eq!(outcome(&on, "listen"), Some(Outcome::Submitted), "{rating}");
        assert_eq!(outcome(&on, "route"), Some(Outcome::Matched), "{rating}");
        assert!(
            on.records.contains_key(then),
            "{rating}: {:?}",
            on.records.keys()
        );
        if then == "thanks" {
            assert_eq!(on.cards, [("thanks".to_owned(), "c1".to_owned())]);
            assert_eq!(on.state, InstanceState::Completed);
            assert_eq!(on.due, None);
        } else {
            // The second condition held: a wait until the renewal less a day.
            assert!(on.cards.is_empty());
            assert_eq!(
                on.records["before"].state,
                StepState::Waiting {
                    deadline: Utc.with_ymd_and_hms(2027, 2, 9, 0, 0, 0).unwrap()
                }
            );
            assert_eq!(on.state, InstanceState::Active);
        }
    }
}

#[test]
fn a_timeout_follows_its_own_path_and_the_card_stays() {
    let first = started();
    let on = run::resume(
        &program(),
        &Map::new(),
        first.records,
        t(86_400),
        &|_| None,
        &mut cards(),
    );
    assert_eq!(outcome(&on, "listen"), Some(Outcome::Timeout));
    assert_eq!(
        on.records["pause"].state,
        StepState::Waiting {
            deadline: t(86_400) + Duration::minutes(30)
        }
    );
    let later = run::resume(
        &program(),
        &Map::new(),
        on.records,
        t(86_400 + 1_800),
        &|_| None,
        &mut cards(),
    );
    assert_eq!(outcome(&later, "pause"), Some(Outcome::Elapsed));
    assert_eq!(later.cards, [("remind".to_owned(), "c1".to_owned())]);
    assert_eq!(later.state, InstanceState::Completed);
}

#[test]
fn a_dismissed_card_follows_closed() {
    let first = started();
    let dismissed = ClosedCard {
        closure: CardClosure::Dismissed,
        values: Map::new(),
    };
    let on = run::resume(
        &program(),
        &Map::new(),
        first.records,
        t(5),
        &|_| Some(dismissed.clone()),
        &mut cards(),
    );
    assert_eq!(outcome(&on, "listen"), Some(Outcome::Dismissed));
    assert_eq!(on.cards, [("thanks".to_owned(), "c1".to_owned())]);
}

/// A card that closed before the `wait-for-card` step started (an earlier wait was running)
/// ends that step the moment it starts.
#[test]
fn a_card_closed_before_its_wait_starts_ends_it_at_once() {
    let config = json!({
        "type": "card", "initialSteps": ["ask"],
        "steps": {
            "ask": {"id": "ask", "type": "create-card", "next": ["pause"],
                    "properties": {"cardTemplateId": "t"}},
            "pause": {"id": "pause", "type": "wait", "next": ["listen"],
                      "properties": {"duration": "PT1M"}},
            "listen": {"id": "listen", "type": "wait-for-card",
                       "properties": {"cardStep": "ask", "timeout": "PT1H",
                                      "on": {"submitted": ["after"]}}},
            "after": {"id": "after", "type": "create-card", "properties": {"cardTemplateId": "t"}}
        },
        "cardTemplates": {"t": {"metadata": {"cardName": "T"}}}
    });
    let program = Program::parse(&config).expect("valid");
    let first = run::start(&program, &Map::new(), t(0), &mut cards());
    assert_eq!(first.due, Some(t(60)));
    let card = submitted(1);
    let on = run::resume(
        &program,
        &Map::new(),
        first.records,
        t(60),
        &|id| (id == "c1").then(|| card.clone()),
        &mut || "c2".to_owned(),
    );
    assert_eq!(outcome(&on, "pause"), Some(Outcome::Elapsed));
    assert_eq!(outcome(&on, "listen"), Some(Outcome::Submitted));
    assert_eq!(on.cards, [("after".to_owned(), "c2".to_owned())]);
    assert_eq!(on.state, InstanceState::Completed);
}

#[test]
fn a_step_with_two_parents_runs_once() {
    let config = json!({
        "type": "card", "initialSteps": ["a", "b"],
        "steps": {
            "a": {"id": "a", "type": "create-card", "next": ["joined"],
                  "properties": {"cardTemplateId": "t"}},
            "b": {"id": "b", "type": "wait", "next": ["joined"],
                  "properties": {"duration": "PT1S"}},
            "joined": {"id": "joined", "type": "create-card", "properties": {"cardTemplateId": "t"}}
        },
        "cardTemplates": {"t": {"metadata": {"cardName": "T"}}}
    });
    let program = Program::parse(&config).expect("valid");
    let first = run::start(&program, &Map::new(), t(0), &mut cards());
    assert_eq!(first.cards.len(), 2, "a, then joined through a");
    let on = run::resume(
        &program,
        &Map::new(),
        first.records,
        t(1),
        &|_| None,
        &mut cards(),
    );
    assert_eq!(outcome(&on, "b"), Some(Outcome::Elapsed));
    assert!(on.cards.is_empty(), "joined ran already: {:?}", on.cards);
}

#[test]
fn a_wait_on_a_missing_date_fails_the_instance() {
    let config = json!({
        "type": "card", "initialSteps": ["w"],
        "variables": {"d": {"type": "date", "source": "event"}},
        "steps": {"w": {"id": "w", "type": "wait", "next": [],
                        "properties": {"untilVariable": "d"}}},
        "cardTemplates": {}
    });
    let program = Program::parse(&config).expect("valid");
    let first = run::start(
        &program,
        &vars(json!({"d": "not a date"})),
        t(0),
        &mut cards(),
    );
    assert_eq!(first.state, InstanceState::Failed);
    assert!(matches!(first.records["w"].state, StepState::Failed { .. }));
}

#[test]
fn cancel_ends_every_step_still_waiting() {
    let mut records = started().records;
    run::cancel(&mut records, t(3));
    assert_eq!(records["listen"].state, StepState::Cancelled);
    assert_eq!(records["listen"].finished, Some(t(3)));
    assert_eq!(
        outcome_of(&records, "ask"),
        Some(Outcome::Created),
        "a done step stays"
    );
}

fn outcome_of(records: &Records, step: &str) -> Option<Outcome> {
    match records.get(step)?.state {
        StepState::Done { outcome, .. } => Some(outcome),
        _ => None,
    }
}

#[test]
fn records_round_trip_through_their_stored_text() {
    let first = started();
    let card = submitted(2);
    let on = run::resume(
        &program(),
        &vars(json!({"plan": "basic"})),
        first.records.clone(),
        t(60),
        &|_| Some(card.clone()),
        &mut cards(),
    );
    for records in [first.records, on.records] {
        let text = run::encode(&records);
        assert_eq!(run::decode(&text), Ok(records), "{text}");
    }
}

#[test]
fn stored_text_that_is_not_records_is_an_error_not_a_panic() {
    for text in [
        "",
        "[]",
        "{\"a\":{}}",
        "{\"a\":{\"s\":\"waiting\",\"t\":0}}",
        "{\"a\":{\"s\":\"done\",\"t\":0,\"o\":\"nope\"}}",
        "{\"a\":{\"s\":\"teleported\",\"t\":0}}",
        "{\"a\":{\"s\":\"pending\",\"t\":9223372036854775807}}",
        "[9223372036854775807,{\"a\":{\"s\":\"p\",\"t\":1}}]",
        "[0,{\"a\":{\"s\":\"w\"}}]",
        "[0]",
        "[\"x\",{}]",
        "{\"a\":{\"s\":\"pending\"}}",
        "{\"a\":{\"s\":\"p\",\"t\":0}}",
        "[0,{\"a\":{\"s\":\"pending\"}}]",
    ] {
        assert!(run::decode(text).is_err(), "{text}");
    }
}

/// A waiting instance stores little: a record per step reached, with short keys.
#[test]
fn a_waiting_instance_stores_few_bytes() {
    let text = run::encode(&started().records);
    assert!(text.len() <= 140, "{} bytes: {text}", text.len());
}

/// The short form (one-letter states, instants after the earliest), which a later version may
/// write while this one still serves, reads as the form written does.
#[test]
fn records_of_the_short_form_are_read() {
    let written = concat!(
        r#"{"pause":{"s":"waiting","t":1796313174225,"d":1796313194225,"n":1},"#,
        r#""s1":{"s":"done","o":"created","t":1796313174225,"c":"crd_01m8y9qm6m7tggjbm1ng9ns672"}}"#
    );
    let records = run::decode(written).expect("the form written");
    assert_eq!(run::encode(&records), written);
    let at = |ms| Timestamp::from_timestamp_millis(ms).expect("instant");
    let pause = &records["pause"];
    assert_eq!(
        pause.state,
        StepState::Waiting {
            deadline: at(1_796_313_194_225)
        }
    );
    assert_eq!((pause.started, pause.order), (at(1_796_313_174_225), 1));
    let card = &records["s1"];
    assert_eq!(card.finished, Some(at(1_796_313_174_225)));
    assert_eq!(card.card.as_deref(), Some("crd_01m8y9qm6m7tggjbm1ng9ns672"));
    let short = run::encode_short(&records);
    assert!(short.starts_with("[1796313174225,{"), "{short}");
    assert!(short.len() + 30 < written.len(), "{short}");
    assert_eq!(run::decode(&short), Ok(records));
    let on = run::resume(
        &program(),
        &vars(json!({"plan": "basic"})),
        started().records,
        t(60),
        &|_| Some(submitted(2)),
        &mut cards(),
    );
    assert_eq!(run::decode(&run::encode_short(&on.records)), Ok(on.records));
}

#[test]
fn counts_follow_an_instance_from_its_start() {
    use std::collections::BTreeMap;
    let first = started();
    let mut counts = BTreeMap::new();
    run::tally(None, (&first.records, first.state), &mut counts);
    let get = |c: &BTreeMap<(String, String), i64>, step: &str, metric: &str| {
        c.get(&(step.to_owned(), metric.to_owned()))
            .copied()
            .unwrap_or(0)
    };
    assert_eq!(get(&counts, "", "active"), 1);
    assert_eq!(get(&counts, "ask", "reached"), 1);
    assert_eq!(get(&counts, "ask", "outcome.created"), 1);
    assert_eq!(get(&counts, "listen", "waiting"), 1);
    let card = submitted(5);
    let on = run::resume(
        &program(),
        &Map::new(),
        first.records.clone(),
        t(60),
        &|_| Some(card.clone()),
        &mut cards(),
    );
    let mut delta = BTreeMap::new();
    run::tally(
        Some((&first.records, first.state)),
        (&on.records, on.state),
        &mut delta,
    );
    assert_eq!(get(&delta, "", "active"), -1);
    assert_eq!(get(&delta, "", "completed"), 1);
    assert_eq!(get(&delta, "listen", "waiting"), -1);
    assert_eq!(get(&delta, "listen", "done"), 1);
    assert_eq!(get(&delta, "listen", "outcome.submitted"), 1);
    assert_eq!(get(&delta, "listen", "reached"), 0, "reached once");
    assert_eq!(get(&delta, "route", "reached"), 1);
    assert_eq!(get(&delta, "thanks", "outcome.created"), 1);
    assert_eq!(get(&delta, "ask", "reached"), 0);
    let mut none = BTreeMap::new();
    run::tally(
        Some((&on.records, on.state)),
        (&on.records, on.state),
        &mut none,
    );
    assert!(none.is_empty(), "no change, no count: {none:?}");
}
