//! Triggering Action Flows (docs/api.md, Triggers): the request, its variables, the
//! idempotency of `flowInvocationId`, the invocations and their port, the [`TriggerService`]
//! that checks and records them and the [`Engine`] that runs them (docs/architecture.md, The
//! engine).

mod batch;
pub mod engine;
pub mod idempotency;
pub mod instances;
pub mod invocation;
pub mod plan;
pub mod request;
pub mod service;
pub mod variables;
pub mod views;
pub mod waits;

use sha2::{Digest, Sha256};

pub use engine::Engine;
pub use invocation::{
    BatchResult, Invocation, InvocationFilter, InvocationRepository, InvocationStatus, SaveTurn,
    BATCH_USERS, LEASE_SECONDS,
};
pub use request::{parse, CardOptions, FlowElement, Payload, Platforms, Target, TriggerRequest};
pub use service::{PreparedElements, TriggerService, Triggered};

/// Live (`/start`: published flows, every user) or test (`/test`: the draft if any, test
/// users only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `/start` (and `csv-task`): the latest published version of a published, unarchived
    /// flow, for every user targeted.
    Live,
    /// `/test` (and `csv-task/test`): the draft when there is one, else the latest published
    /// version; users who are not test users are left out.
    Test,
}

crate::spelling::spelled!(Mode {
    Live => "live",
    Test => "test",
});

/// The fingerprint of what an invocation asked for: SHA-256 of the canonical JSON of its
/// target and payload (object keys sorted, so key order does not matter), its first 128 bits
/// in hex (stored with every invocation; the whole hash was 32 bytes more of each, issue 27). The
/// flow and the mode are kept beside it: a reused id with another flow or mode is a different kind
/// of mismatch (422) than one with another target or payload (409).
pub fn fingerprint(element: &FlowElement) -> String {
    fingerprint_of(
        &element.raw_target.to_string(),
        &element.raw_payload.to_string(),
    )
}

/// [`fingerprint`] of a target and a payload given as their JSON text (as `serde_json`
/// writes them): the hash of `{"payload": ..., "target": ...}` (keys in order), an absent
/// payload (`null`) taken as an empty one.
pub fn fingerprint_of(target: &str, payload: &str) -> String {
    let mut hash = Sha256::new();
    hash.update(b"{\"payload\":");
    hash.update(if payload == "null" {
        "{}".as_bytes()
    } else {
        payload.as_bytes()
    });
    hash.update(b",\"target\":");
    hash.update(target.as_bytes());
    hash.update(b"}");
    crate::secret::hex(&hash.finalize()[..FINGERPRINT_BYTES])
}

/// Bytes of the hash a fingerprint keeps.
const FINGERPRINT_BYTES: usize = 16;

#[cfg(test)]
pub(crate) mod tests;
