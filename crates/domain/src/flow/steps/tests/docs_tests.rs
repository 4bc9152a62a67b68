//! The three configurations of docs/flows.md, "Flows that wait and branch": each validates,
//! and each is the document's own (checked when the document is beside the crate, as it is in
//! the repository).

use serde_json::Value;

use super::super::*;
use crate::flow::config::validate;

/// A reminder a day after a card, when it is still open.
const REMINDER: &str = r#"
{
  "type": "card",
  "initialSteps": ["ask"],
  "steps": {
    "ask": {
      "id": "ask",
      "type": "create-card",
      "properties": {"cardTemplateId": "question-card"},
      "next": ["listen"]
    },
    "listen": {
      "id": "listen",
      "type": "wait-for-card",
      "properties": {"cardStep": "ask", "timeout": "P1D", "on": {"timeout": ["reminder"]}}
    },
    "reminder": {
      "id": "reminder",
      "type": "create-card",
      "properties": {"cardTemplateId": "reminder-card"}
    }
  },
  "cardTemplates": {
    "question-card": {
      "metadata": {"cardName": "Your details"},
      "defaultView": {
        "content": [
          {"key": "title", "type": "headline", "attributes": {"text": "Please check your details"}}
        ],
        "actions": [
          {"key": "done", "type": "submitButton", "attributes": {"text": "They are right"}}
        ]
      }
    },
    "reminder-card": {
      "metadata": {"cardName": "Reminder"},
      "defaultView": {
        "content": [
          {"key": "title", "type": "headline", "attributes": {"text": "Your details are waiting"}}
        ]
      }
    }
  }
}
"#;

/// A branch on the rating a card was submitted with.
const RATING: &str = r#"
{
  "type": "card",
  "initialSteps": ["survey"],
  "steps": {
    "survey": {
      "id": "survey",
      "type": "create-card",
      "properties": {"cardTemplateId": "rating-card"},
      "next": ["ask"]
    },
    "ask": {
      "id": "ask",
      "type": "wait-for-card",
      "properties": {"cardStep": "survey", "timeout": "P7D", "on": {"submitted": ["route"]}}
    },
    "route": {
      "id": "route",
      "type": "branch",
      "properties": {
        "conditions": [
          {
            "if": {"variable": "steps.ask.values.rating", "op": "greaterOrEqual", "value": 4},
            "next": ["thanks"]
          }
        ],
        "otherwise": ["sorry"]
      }
    },
    "thanks": {
      "id": "thanks",
      "type": "create-card",
      "properties": {"cardTemplateId": "thanks-card"}
    },
    "sorry": {
      "id": "sorry",
      "type": "create-card",
      "properties": {"cardTemplateId": "sorry-card"}
    }
  },
  "cardTemplates": {
    "rating-card": {
      "metadata": {"cardName": "How did we do?"},
      "defaultView": {
        "content": [
          {"key": "title", "type": "headline", "attributes": {"text": "Rate us, 1 to 5"}}
        ],
        "actions": [
          {"key": "send", "type": "submitButton", "attributes": {"text": "Send"}}
        ]
      }
    },
    "thanks-card": {
      "metadata": {"cardName": "Thank you"},
      "defaultView": {
        "content": [
          {"key": "title", "type": "headline", "attributes": {"text": "Thanks for the rating"}}
        ]
      }
    },
    "sorry-card": {
      "metadata": {"cardName": "Tell us more"},
      "defaultView": {
        "content": [
          {"key": "title", "type": "headline", "attributes": {"text": "What could we do better?"}}
        ]
      }
    }
  }
}
"#;

/// A wait until a day before a date variable.
const DAY_BEFORE: &str = r#"
{
  "type": "card",
  "initialSteps": ["before"],
  "variables": {
    "renewalDate": {"type": "date", "source": "event"}
  },
  "steps": {
    "before": {
      "id": "before",
      "type": "wait",
      "properties": {"untilVariable": "renewalDate", "offset": "-P1D"},
      "next": ["renew"]
    },
    "renew": {
      "id": "renew",
      "type": "create-card",
      "properties": {"cardTemplateId": "renew-card"}
    }
  },
  "cardTemplates": {
    "renew-card": {
      "metadata": {"cardName": "Renewal"},
      "defaultView": {
        "content": [
          {"key": "title", "type": "headline", "attributes": {"text": "Renewal: %{renewalDate}"}}
        ]
      }
    }
  }
}
"#;

const EXAMPLES: [(&str, &str); 3] = [
    ("reminder after a day", REMINDER),
    ("rating branch", RATING),
    ("a day before a date", DAY_BEFORE),
];

fn parse(text: &str) -> Value {
    serde_json::from_str(text).expect("an example is JSON")
}

#[test]
fn the_documented_examples_validate() {
    for (name, text) in EXAMPLES {
        assert_eq!(validate(&parse(text), "config"), vec![], "{name}");
        assert!(Program::parse(&parse(text)).is_ok(), "{name}");
    }
}

#[test]
fn the_documented_examples_are_the_documents() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/flows.md");
    // Out of the repository (the crate vendored alone) there is no document to hold them to.
    let Ok(text) = std::fs::read_to_string(path) else {
        return;
    };
    let Some((_, section)) = text.split_once("## Flows that wait and branch") else {
        panic!("docs/flows.md lacks its section on flows that wait and branch");
    };
    let blocks: Vec<Value> = section
        .split("```json")
        .skip(1)
        .filter_map(|block| block.split("```").next())
        .filter_map(|block| serde_json::from_str(block).ok())
        .collect();
    for (name, example) in EXAMPLES {
        assert!(
            blocks.contains(&parse(example)),
            "docs/flows.md lacks {name}"
        );
    }
}

#[test]
fn the_date_example_needs_its_variable_from_each_start() {
    let config = parse(DAY_BEFORE);
    let missing = missing_wait_variables(&config, &|_| false, "flows[0].payload");
    let fields: Vec<&str> = missing.iter().map(|e| e.field.as_str()).collect();
    assert_eq!(fields, ["flows[0].payload.variables.renewalDate"]);
}

#[test]
fn a_start_without_the_date_is_refused_by_the_trigger() {
    use crate::trigger::request::{Payload, VariableValue};
    use crate::trigger::variables::resolve;
    let config = parse(DAY_BEFORE);
    let refused = resolve(&config, &Payload::default(), false, "flows[0].payload");
    let fields: Vec<String> = refused
        .err()
        .into_iter()
        .flatten()
        .map(|e| e.field)
        .collect();
    assert_eq!(fields, ["flows[0].payload.variables.renewalDate"]);
    let date = VariableValue {
        value: serde_json::json!("2027-05-01T09:00:00Z"),
        ios: None,
        android: None,
    };
    let payload = Payload {
        variables: vec![("renewalDate".to_owned(), date)],
        ..Payload::default()
    };
    assert!(resolve(&config, &payload, false, "flows[0].payload").is_ok());
}
