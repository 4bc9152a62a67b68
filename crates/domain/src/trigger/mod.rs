//! Triggering Action Flows (spec 4.3, contract §4): the request, its variables, and the
//! idempotency of `flowInvocationId`.

pub mod engine;
pub mod plan;
pub mod request;
pub mod variables;

use serde_json::Value;
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
    // The text of `{"payload": ..., "target": ...}` (keys in order), written part by part into
    // the hash rather than built as a copy of both. serde_json's Map is ordered by key (no
    // `preserve_order`), so this is canonical.
    let mut hash = Sha256::new();
    hash.update(b"{\"payload\":");
    match &element.raw_payload {
        Value::Null => hash.update(b"{}"),
        payload => write_json(&mut hash, payload),
    }
    hash.update(b",\"target\":");
    write_json(&mut hash, &element.raw_target);
    hash.update(b"}");
    let digest = hash.finalize();
    const HEX: &[u8; 16] = b"0123456789abcdef";
    digest
        .iter()
        .flat_map(|b| [HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]])
        .map(char::from)
        .collect()
}

/// Writes `value`'s JSON text into `hash`.
fn write_json(hash: &mut Sha256, value: &Value) {
    struct Hashing<'a>(&'a mut Sha256);
    impl std::io::Write for Hashing<'_> {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.update(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    // Writing a Value cannot fail, and neither can this writer.
    let _ = serde_json::to_writer(Hashing(hash), value);
}

#[cfg(test)]
pub(crate) mod tests;
