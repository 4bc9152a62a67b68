//! The idempotency of `flowInvocationId`: what an id already recorded means for a new request
//! that names it (docs/api.md, Triggers).
//!
//! A pure decision: the stored run's key and the asked one in, the answer out. The
//! [`TriggerService`](super::service::TriggerService) uses it for every element it records;
//! another service keeping its own invocations can use it the same way.
//!
//! ```
//! use workbench_domain::trigger::idempotency::{decide, Reuse, RunKey};
//! use workbench_domain::trigger::{fingerprint_of, Mode};
//!
//! let print = fingerprint_of(r#"{"targetUserIds":["u1"]}"#, "null");
//! let asked = RunKey { flow_id: "flw_1", mode: Mode::Live, fingerprint: &print };
//!
//! // A new id, and a replay of the same request, are both accepted.
//! assert_eq!(decide(&asked, None), Reuse::New);
//! assert_eq!(decide(&asked, Some(&asked)), Reuse::Replay);
//!
//! // Another payload under the same id is a conflict (409)...
//! let other = fingerprint_of(r#"{"targetUserIds":["u1"]}"#, r#"{"variables":{"a":1}}"#);
//! let stored = RunKey { fingerprint: &other, ..asked };
//! assert_eq!(decide(&asked, Some(&stored)), Reuse::Conflict);
//!
//! // ...and another flow or mode is a mismatch (422).
//! let stored = RunKey { mode: Mode::Test, ..asked };
//! assert_eq!(decide(&asked, Some(&stored)), Reuse::Mismatch);
//! let problem = Reuse::Mismatch.problem("inv_1", &stored, "flowInvocationId");
//! assert!(problem.is_some_and(|p| p.to_string().contains("test mode")));
//! ```

use super::Mode;
use crate::{ConflictKind, DomainError};

/// What identifies the run an invocation id was recorded for: its flow, its mode and the
/// fingerprint of its target and payload ([`fingerprint_of`](super::fingerprint_of)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunKey<'a> {
    /// The Action Flow triggered.
    pub flow_id: &'a str,
    /// Live (`/start`) or test (`/test`).
    pub mode: Mode,
    /// The hash of the request's target and payload.
    pub fingerprint: &'a str,
}

/// What a request naming an invocation id gets, given what the id was recorded for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reuse {
    /// The id is new: record the invocation.
    New,
    /// The id was recorded for this very run: answer with the stored invocation, record
    /// nothing.
    Replay,
    /// The id was recorded for the same flow and mode with another target or payload: 409
    /// `invocation_conflict`.
    Conflict,
    /// The id was recorded for another flow or mode: 422 `invocation_mismatch`.
    Mismatch,
}

/// The decision for `asked`, given the run its id is stored with (`None`: not stored).
pub fn decide(asked: &RunKey<'_>, stored: Option<&RunKey<'_>>) -> Reuse {
    match stored {
        None => Reuse::New,
        Some(stored) if stored.flow_id != asked.flow_id || stored.mode != asked.mode => {
            Reuse::Mismatch
        }
        Some(stored) if same_request(stored.fingerprint, asked.fingerprint) => Reuse::Replay,
        Some(_) => Reuse::Conflict,
    }
}

/// Whether a stored fingerprint is of the request asked: the same, or (recorded before
/// fingerprints kept 128 bits) the whole hash that the one asked begins.
fn same_request(stored: &str, asked: &str) -> bool {
    stored == asked || (stored.len() == 64 && asked.len() == 32 && stored.starts_with(asked))
}

impl Reuse {
    /// The error that refuses the request, if this decision refuses it: `id` is the invocation
    /// id asked, `stored` the run it was recorded for, `path` the request field that named it
    /// (for the message).
    pub fn problem(self, id: &str, stored: &RunKey<'_>, path: &str) -> Option<DomainError> {
        match self {
            Reuse::New | Reuse::Replay => None,
            Reuse::Mismatch => Some(DomainError::InvocationMismatch(format!(
                "{path} `{id}` was used with {} in {} mode; an invocation id belongs to one flow \
                    and one mode",
                stored.flow_id,
                stored.mode.as_str()
            ))),
            Reuse::Conflict => Some(DomainError::conflict(
                ConflictKind::InvocationConflict,
                format!("{path} `{id}` was used with another target or payload"),
            )),
        }
    }
}
