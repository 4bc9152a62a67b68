//! The documented bodies of subscribe and update: the domain reads them field by field.

use std::collections::BTreeMap;

use utoipa::ToSchema;

/// Body of a subscribe request.
#[derive(ToSchema)]
#[allow(dead_code)] // documents the request; the domain reads the body field by field
#[schema(example = json!({"types": ["card-completed"], "url": "https://93.184.215.14/hooks",
    "headers": {"X-Token": "abc"}}))]
pub struct SubscribeRequest {
    /// Event names: card-published, card-embargoed, card-snoozed, card-unsnoozed,
    /// card-completed, card-dismissed, card-expired, card-cancelled.
    types: Vec<String>,
    /// http(s); must not resolve to a private, loopback, link-local or metadata address.
    url: String,
    /// At most 20; `webhook-*`, `content-type` and the like are reserved.
    headers: Option<BTreeMap<String, String>>,
    #[schema(rename = "cardTemplateId")]
    card_template_id: Option<String>,
    #[schema(rename = "actionFlowConfigId")]
    action_flow_config_id: Option<String>,
    /// `POST` (default) or `PUT`.
    method: Option<String>,
    /// What the subscription is for; tabs and line breaks allowed, no other control character.
    #[schema(
        max_length = 1000,
        pattern = "^[^\\u0000-\\u0008\\u000b\\u000c\\u000e-\\u001f\\u007f-\\u009f]*$"
    )]
    description: Option<String>,
}

/// The body of `PATCH /webhook/{id}`: the subscribe fields, every one optional; those left out
/// are kept, and `null` clears a filter (`cardTemplateId`, `actionFlowConfigId`) or the
/// description.
#[derive(ToSchema)]
#[allow(dead_code)] // documents the request; the domain reads the body field by field
#[schema(example = json!({"headers": {"X-Token": "abc"}, "types": ["card-completed"]}))]
pub struct UpdateWebhookRequest {
    /// Event names, as on subscribe.
    #[schema(nullable = false)]
    types: Option<Vec<String>>,
    /// http(s); must not resolve to a private, loopback, link-local or metadata address.
    #[schema(nullable = false)]
    url: Option<String>,
    /// At most 20; `webhook-*`, `content-type` and the like are reserved.
    headers: Option<BTreeMap<String, String>>,
    #[schema(rename = "cardTemplateId")]
    card_template_id: Option<String>,
    #[schema(rename = "actionFlowConfigId")]
    action_flow_config_id: Option<String>,
    /// `POST` or `PUT`.
    method: Option<String>,
    /// What the subscription is for; `null` clears it.
    #[schema(
        max_length = 1000,
        pattern = "^[^\\u0000-\\u0008\\u000b\\u000c\\u000e-\\u001f\\u007f-\\u009f]*$"
    )]
    description: Option<String>,
}

#[cfg(test)]
mod tests {
    use utoipa::PartialSchema;

    #[test]
    fn the_documented_description_limit_is_the_validators() {
        for schema in [
            super::SubscribeRequest::schema(),
            super::UpdateWebhookRequest::schema(),
        ] {
            let json = serde_json::to_value(schema).expect("json");
            assert_eq!(
                json["properties"]["description"]["maxLength"],
                domain::webhook::MAX_DESCRIPTION_CHARS
            );
        }
    }
}
