//! What a push says ([`PushMessage`]), built from a card's rendered notification, and the
//! payload its size limit applies to.

use serde_json::{json, Map, Value};

use super::target::card_platform;
use crate::card::CardInstance;
use crate::Timestamp;

/// The push payload limit, in bytes of [`PushMessage::payload`] as JSON (docs/api.md, Sending
/// pushes: the 2 KB limit): the payload every provider gets, before its envelope.
pub const MAX_PUSH_PAYLOAD_BYTES: usize = 2_048;
/// The key of the object that marks a push as the service's, for the SDKs.
pub const PAYLOAD_KEY: &str = "workbench";

/// What a push says, whatever the provider: the adapter puts it in the provider's format.
#[derive(Debug, Clone, PartialEq)]
pub struct PushMessage {
    /// The notification's `attributes.title`, when the template has one.
    pub title: Option<String>,
    /// The notification's `attributes.body`; never blank.
    pub body: String,
    /// The object the SDKs recognise under [`PAYLOAD_KEY`]: `cardInstanceId`, `streamId` and
    /// `detail` (the trigger's `notificationDetail`).
    pub data: Value,
    /// Repeats of one card replace each other on the device.
    pub collapse_id: String,
    /// The provider stops trying when the card expires.
    pub expires_at: Option<Timestamp>,
}

impl PushMessage {
    /// A message from a rendered `notification`: its `attributes.body`, and its
    /// `attributes.title` when the template has one (docs/api.md, Sending pushes). None when
    /// there is no body to show (none, not a string, or blank). A `detail` that is not an
    /// object is sent as `{}`.
    pub fn new(
        notification: &Value,
        card_instance_id: &str,
        stream_id: &str,
        detail: &Value,
        expires_at: Option<Timestamp>,
    ) -> Option<PushMessage> {
        let text = |key: &str| {
            notification
                .pointer(&format!("/attributes/{key}"))
                .and_then(Value::as_str)
                .filter(|s| !s.trim().is_empty())
                .map(str::to_owned)
        };
        let body = text("body")?;
        let detail = match detail {
            Value::Object(_) => detail.clone(),
            _ => Value::Object(Map::new()),
        };
        Some(PushMessage {
            title: text("title"),
            body,
            data: json!({
                "cardInstanceId": card_instance_id,
                "streamId": stream_id,
                "detail": detail,
            }),
            collapse_id: card_instance_id.to_owned(),
            expires_at,
        })
    }

    /// The message of `card` for a device of `device_platform`: the notification as rendered
    /// for that platform. The stream is the card's first, `All cards`, which every card is in.
    pub fn of_card(card: &CardInstance, device_platform: &str) -> Option<PushMessage> {
        let platform = card_platform(device_platform)?;
        let view = card.content.view(platform, &card.platforms)?;
        PushMessage::new(
            view.get("notification")?,
            &card.id,
            card.stream_ids
                .first()
                .map(String::as_str)
                .unwrap_or_default(),
            card.context
                .value()
                .get("notificationDetail")
                .unwrap_or(&Value::Null),
            card.expires_at,
        )
    }

    /// The payload the limit applies to: title, body and the service's object, as JSON.
    pub fn payload(&self) -> Value {
        let mut payload = Map::new();
        if let Some(title) = &self.title {
            payload.insert("title".into(), Value::String(title.clone()));
        }
        payload.insert("body".into(), Value::String(self.body.clone()));
        payload.insert(PAYLOAD_KEY.into(), self.data.clone());
        Value::Object(payload)
    }

    /// The size of [`payload`](Self::payload) as compact JSON, in bytes: what
    /// [`MAX_PUSH_PAYLOAD_BYTES`] limits.
    pub fn payload_bytes(&self) -> usize {
        self.payload().to_string().len()
    }
}
