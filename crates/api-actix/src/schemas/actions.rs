//! The bodies of actions on what the service runs: a cancel of a flow's instances, an end
//! user's action on a card, and a webhook's recovery of failed deliveries.

use serde_json::{json, Value};

/// The actions' bodies, by component name.
pub(super) fn bodies() -> [(&'static str, Value); 3] {
    [
        (
            "CancelRequest",
            json!({
                "type": "object",
                "properties": {
                    "endUserId": {"type": ["string", "null"], "minLength": 1, "maxLength": 255},
                    "flowInvocationId": {"type": ["string", "null"], "minLength": 1,
                        "maxLength": 255},
                    "flowConfigVersion": {"type": ["integer", "null"], "minimum": 1,
                                          "maximum": domain::flow::MAX_FLOW_VERSION},
                    "cancelCards": {"type": ["boolean", "null"],
                        "description":
                            "Default true; false stops the instances and leaves their cards"},
                },
                "example": {"endUserId": "user-1", "cancelCards": true},
            }),
        ),
        (
            "CardActionRequest",
            json!({
                "type": "object", "required": ["action"],
                "description": "`snoozeUntil` is required with `snooze` and must be in the future",
                "properties": {
                    "action": {"type": "string", "enum": ["submit", "dismiss", "snooze"]},
                    "values": {"type": ["object", "null"],
                        "description":
                            "With `submit`: the user's input, passed to `card-completed`"},
                    "snoozeUntil": {"type": ["string", "null"], "format": "date-time"},
                },
                "example": {"action": "submit", "values": {"answer": "yes"}},
            }),
        ),
        (
            "RecoverRequest",
            json!({
                "type": "object", "required": ["since"],
                "properties": {"since": {"type": "string", "format": "date-time",
                    "description": "Failed deliveries of events since then are queued again"}},
                "example": {"since": "2026-11-21T00:00:00Z"},
            }),
        ),
    ]
}
