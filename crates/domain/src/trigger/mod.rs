//! Triggering Action Flows (spec 4.3, contract §4): the request, its variables, and the
//! idempotency of `flowInvocationId`.

pub mod engine;
pub mod plan;
pub mod request;
pub mod variables;

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

pub use request::{parse, CardOptions, FlowElement, Payload, Platforms, Target, TriggerRequest};

/// Live (`/start`: published flows, every user) or test (`/test`: the draft if any, test
/// users only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Live,
    Test,
}

impl Mode {
    pub const fn as_str(self) -> &'static str {
        match self {
            Mode::Live => "live",
            Mode::Test => "test",
        }
    }
}

/// The fingerprint of what an invocation asked for: SHA-256 of the canonical JSON of its
/// target and payload (object keys sorted, so key order does not matter). The flow and the
/// mode are kept beside it: a reused id with another flow or mode is a different kind of
/// mismatch (422) than one with another target or payload (409).
pub fn fingerprint(element: &FlowElement) -> String {
    // serde_json's Map is ordered by key (no `preserve_order`), so this is canonical.
    let canonical =
        json!({"target": element.raw_target, "payload": normalise(&element.raw_payload)})
            .to_string();
    let digest = Sha256::digest(canonical.as_bytes());
    const HEX: &[u8; 16] = b"0123456789abcdef";
    digest
        .iter()
        .flat_map(|b| [HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]])
        .map(char::from)
        .collect()
}

/// An absent payload and an empty one ask for the same thing.
fn normalise(payload: &Value) -> Value {
    match payload {
        Value::Null => json!({}),
        other => other.clone(),
    }
}

#[cfg(test)]
pub(crate) mod tests;
