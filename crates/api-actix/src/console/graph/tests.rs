use std::collections::BTreeMap;

use domain::flow::steps::{run, Program};
use domain::stats::steps::StepTotals;
use serde_json::{json, Map, Value};

use super::{Marks, StepGraph};

/// The rating journey of docs/flows.md, with a template name that is markup.
fn rating() -> Value {
    json!({
        "type": "card",
        "initialSteps": ["survey"],
        "steps": {
            "survey": {"id": "survey", "type": "create-card",
                       "properties": {"cardTemplateId": "rating"}, "next": ["ask"]},
            "ask": {"id": "ask", "type": "wait-for-card",
                    "properties": {"cardStep": "survey", "timeout": "P7D",
                                   "on": {"submitted": ["route"], "timeout": ["nudge"]}}},
            "nudge": {"id": "nudge", "type": "wait", "properties": {"duration": "PT2H"},
                      "next": ["sorry"]},
            "route": {"id": "route", "type": "branch", "properties": {
                "conditions": [{"if": {"variable": "steps.ask.values.rating",
                                       "op": "greaterOrEqual", "value": 4},
                                "next": ["thanks"]}],
                "otherwise": ["sorry"]}},
            "thanks": {"id": "thanks", "type": "create-card",
                       "properties": {"cardTemplateId": "thanks"}},
            "sorry": {"id": "sorry", "type": "create-card",
                      "properties": {"cardTemplateId": "sorry"}}
        },
        "cardTemplates": {
            "rating": {"metadata": {"cardName": "<script>alert(1)</script>"}},
            "thanks": {"metadata": {"cardName": "Thank you"}},
            "sorry": {"metadata": {"cardName": "Tell us more"}}
        }
    })
}

fn graph(config: &Value) -> StepGraph {
    let program = Program::parse(config).expect("valid");
    StepGraph::of(&program, config)
}

#[test]
fn every_step_and_arrow_is_drawn_with_its_words() {
    let drawn = graph(&rating())
        .draw("Steps of v1", &Marks::Nothing)
        .into_string();
    for text in [
        "Card · survey",
        "Wait for card · ask",
        "survey&#39;s card, up to 1 week",
        "Wait · nudge",
        "for 2 hours",
        "Branch · route",
        "if rating of ask&#39;s card ≥ 4",
        ">otherwise<",
        ">submitted<",
        ">timeout<",
        "Thank you",
    ] {
        assert!(drawn.contains(text), "{text} in {drawn}");
    }
    assert_eq!(drawn.matches("<path class=\"edge").count(), 6, "{drawn}");
    assert!(!drawn.contains("<script>"), "names are escaped: {drawn}");
    assert!(drawn.contains("&lt;script&gt;"));
    // The table says the same for readers who do not see the drawing.
    assert!(drawn.contains("thanks (if rating of ask's card ≥ 4), sorry (otherwise)"));
}

#[test]
fn counts_mark_each_step() {
    let counts = BTreeMap::from([
        (
            "ask".to_owned(),
            StepTotals {
                reached: 10,
                waiting: 4,
                outcomes: BTreeMap::from([("submitted".into(), 5), ("timeout".into(), 1)]),
            },
        ),
        (
            "survey".to_owned(),
            StepTotals {
                reached: 10,
                waiting: 0,
                outcomes: BTreeMap::from([("created".into(), 10)]),
            },
        ),
    ]);
    let drawn = graph(&rating())
        .draw("v1", &Marks::Counts(&counts))
        .into_string();
    assert!(drawn.contains("10 reached · 4 waiting"), "{drawn}");
    assert!(drawn.contains("5 submitted · 1 timeout"), "{drawn}");
    assert!(
        drawn.contains("0 reached"),
        "steps nothing reached say 0: {drawn}"
    );
    assert!(
        !drawn.contains("10 created"),
        "a card's only outcome is not repeated"
    );
}

#[test]
fn a_path_marks_reached_waiting_and_unreached_steps() {
    let config = rating();
    let program = Program::parse(&config).expect("valid");
    let at = domain::testing::t0();
    let first = run::start(&program, &Map::new(), at, &mut || "crd_1".to_owned());
    let drawn = StepGraph::of(&program, &config)
        .draw("u1", &Marks::Path(&first.records))
        .into_string();
    assert!(drawn.contains("step card reached"), "{drawn}");
    assert!(drawn.contains("step listen waiting"), "{drawn}");
    assert!(drawn.contains("until 2026-11-29 10:00 UTC"), "{drawn}");
    assert_eq!(drawn.matches(" unreached\"").count(), 4, "{drawn}");
    assert!(drawn.contains("not reached"));
    assert!(drawn.contains("edge untaken"));
}

#[test]
fn fifty_steps_stay_four_across() {
    let mut steps = Map::new();
    let mut templates = Map::new();
    // A chain of 10 branches, each leading to four cards and the next branch.
    for b in 0..10 {
        let cards: Vec<String> = (0..4).map(|c| format!("c{b}_{c}")).collect();
        let mut next = cards.clone();
        if b < 9 {
            next.push(format!("b{}", b + 1));
        }
        steps.insert(
            format!("b{b}"),
            json!({"id": format!("b{b}"), "type": "branch", "properties": {
                "conditions": [{"if": {"variable": "n", "op": "greaterThan", "value": b},
                                "next": next}]}}),
        );
        for c in cards {
            steps.insert(
                c.clone(),
                json!({"id": c, "type": "create-card", "properties": {"cardTemplateId": "t"}}),
            );
        }
    }
    templates.insert("t".into(), json!({"metadata": {"cardName": "T"}}));
    let config = json!({"type": "card", "initialSteps": ["b0"], "steps": steps,
        "cardTemplates": templates,
        "variables": {"n": {"type": "number", "default": 1}}});
    let program = Program::parse(&config).expect("valid");
    let g = StepGraph::of(&program, &config);
    assert_eq!(g.len(), 50);
    let drawn = g.draw("fifty", &Marks::Nothing).into_string();
    let width: f64 = drawn
        .split("width=\"")
        .nth(1)
        .and_then(|w| w.split('"').next())
        .and_then(|w| w.parse().ok())
        .expect("a width");
    // `main` is 1100 px wide; its padding, the section's and the frame's leave about 1020.
    assert!(
        width <= 1000.0,
        "fits a laptop's page without scrolling: {width}"
    );
}
