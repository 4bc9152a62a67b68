//! Config validation throughput: a 50-step, 20-template configuration validated repeatedly
//! on one thread. Run: `cargo bench -p workbench-domain --bench validate` (goal ≥ 10,000/s).

use std::hint::black_box;
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};
use workbench_domain::flow::config::validate;

/// 50 create-card steps in a diamond-rich DAG over 20 templates, each template with five
/// elements, two variables and variable references.
fn big_config() -> Value {
    let mut steps = Map::new();
    for i in 0..50 {
        let next: Vec<String> = [i + 1, i + 2]
            .iter()
            .filter(|n| **n < 50)
            .map(|n| format!("s{n}"))
            .collect();
        steps.insert(
            format!("s{i}"),
            json!({"id": format!("s{i}"), "type": "create-card", "next": next,
                   "properties": {"cardTemplateId": format!("t{}", i % 20),
                       "output": {"type": "default"}}}),
        );
    }
    let mut templates = Map::new();
    for t in 0..20 {
        templates.insert(
            format!("t{t}"),
            json!({
                "metadata": {"cardName": format!("Card {t}"), "cardDescription": "d",
                    "delivery": {"priority": 1 + t % 10}},
                "variables": {"amount": {"type": "number", "source": "static", "default": 10},
                              "due": {"type": "date", "source": "event", "default": "22/11/2026",
                                  "defaultFormatterOption": "dd/MM/yyyy"}},
                "defaultView": {
                    "content": [
                        {"key": "h", "type": "headline",
                            "attributes": {"text": "Hello %{firstName}"}},
                        {"key": "t", "type": "text",
                            "attributes": {"text": "Pay %{amount} by %{due}"}},
                        {"key": "i", "type": "image", "attributes": {"src": "%{assetv1:logo}",
                            "label": "logo"}}
                    ],
                    "actions": [
                        {"key": "ok", "type": "submitButton", "attributes": {"text": "OK",
                            "values": {"answer": "yes"}}},
                        {"key": "no", "type": "submitButton", "attributes": {"text": "No"}}
                    ]
                },
                "notification": {"attributes": {"body": "Hi %{firstName}"}}
            }),
        );
    }
    json!({
        "type": "card", "version": "1", "initialSteps": ["s0"],
        "variables": {"firstName": {"type": "string", "source": "event", "default": "there",
            "required": true}},
        "steps": steps, "cardTemplates": templates
    })
}

fn main() {
    let config = big_config();
    assert!(
        validate(&config, "config").is_empty(),
        "the benchmark configuration must be valid"
    );
    let size = config.to_string().len();
    for _ in 0..1000 {
        black_box(validate(black_box(&config), "config"));
    }
    let mut rounds = Vec::new();
    for _ in 0..5 {
        let started = Instant::now();
        let mut n = 0u64;
        while started.elapsed() < Duration::from_secs(1) {
            black_box(validate(black_box(&config), "config"));
            n += 1;
        }
        rounds.push(n as f64 / started.elapsed().as_secs_f64());
    }
    rounds.sort_by(f64::total_cmp);
    let median = rounds[rounds.len() / 2];
    println!("config validation: 50 steps, 20 templates, {size} bytes of JSON");
    println!(
        "  median of 5 one-second rounds: {median:.0} validations/s ({:.1} µs each), min \
        {:.0}, max {:.0}",
        1e6 / median,
        rounds[0],
        rounds[4]
    );
}
