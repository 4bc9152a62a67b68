//! An element's `payload.cardOptions`: the priority, expiry, embargo, streams and platforms of
//! the cards it makes.

use chrono::Duration;
use serde_json::{Map, Value};

use super::problem::err;
use crate::time::parse_duration;
use crate::{FieldError, Timestamp};

/// The keys `cardOptions` may have.
pub const CARD_OPTIONS: [&str; 6] = [
    "priority",
    "expires",
    "expiresInterval",
    "embargo",
    "targetStreamIds",
    "targetPlatforms",
];

/// The platforms cards are for (`cardOptions.targetPlatforms`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Platforms {
    /// `Web`.
    pub web: bool,
    /// `iOS`.
    pub ios: bool,
    /// `Android`.
    pub android: bool,
}

impl Default for Platforms {
    /// With no platforms given, cards go to Web, iOS and Android (docs/api.md, Triggers).
    fn default() -> Self {
        Platforms {
            web: true,
            ios: true,
            android: true,
        }
    }
}

impl Platforms {
    /// The names of the platforms chosen, in the order `Web`, `iOS`, `Android`: what a card's
    /// `platforms` hold.
    pub fn names(&self) -> Vec<&'static str> {
        let mut names = Vec::new();
        if self.web {
            names.push("Web");
        }
        if self.ios {
            names.push("iOS");
        }
        if self.android {
            names.push("Android");
        }
        names
    }
}

/// An element's `payload.cardOptions`: how its cards are made. Every timestamp is within the
/// bounds of docs/api.md, Bounded values.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CardOptions {
    /// `priority`, 1 to 10; without it, the template's `metadata.delivery.priority`, else 5.
    pub priority: Option<u8>,
    /// `expires`: when the cards expire; after `embargo` when both are given. Wins over
    /// `expires_interval`.
    pub expires: Option<Timestamp>,
    /// `expiresInterval`: positive, at most 100 years; the cards expire this long after a
    /// future embargo ends, else this long after they are made.
    pub expires_interval: Option<Duration>,
    /// `embargo`: when in the future, the cards are embargoed until then.
    pub embargo: Option<Timestamp>,
    /// `targetStreamIds`: streams the cards are in besides `All cards` (the trigger service
    /// checks that they exist).
    pub target_stream_ids: Option<Vec<String>>,
    /// `targetPlatforms`: the platforms named `true`; every platform when not given.
    pub target_platforms: Option<Platforms>,
}

/// The card options at `path`, without the ones with problems (recorded in `errors`).
pub(super) fn card_options(
    errors: &mut Vec<FieldError>,
    options: &Map<String, Value>,
    path: &str,
) -> CardOptions {
    let mut out = CardOptions {
        priority: priority(errors, options.get("priority"), path),
        expires: timestamp(errors, options, "expires", path),
        embargo: timestamp(errors, options, "embargo", path),
        expires_interval: expires_interval(errors, options.get("expiresInterval"), path),
        ..CardOptions::default()
    };
    // In the order of the checks: the times together before the streams and platforms.
    check_times(errors, &out, path);
    out.target_stream_ids = stream_ids(errors, options.get("targetStreamIds"), path);
    out.target_platforms = platforms(errors, options.get("targetPlatforms"), path);
    for key in options.keys() {
        if !CARD_OPTIONS.contains(&key.as_str()) {
            err(errors, format!("{path}.{key}"), "is not a card option");
        }
    }
    out
}

/// `priority`: one of the priorities a template may have.
fn priority(errors: &mut Vec<FieldError>, priority: Option<&Value>, path: &str) -> Option<u8> {
    let p = match priority {
        None | Some(Value::Null) => return None,
        Some(p) => p,
    };
    let known = p
        .as_u64()
        .and_then(|n| u8::try_from(n).ok())
        .filter(|n| crate::flow::config::PRIORITIES.contains(n));
    if known.is_none() {
        err(
            errors,
            format!("{path}.priority"),
            "must be a whole number from 1 to 10",
        );
    }
    known
}

/// `expires` or `embargo`: an RFC 3339 timestamp within bounds.
fn timestamp(
    errors: &mut Vec<FieldError>,
    options: &Map<String, Value>,
    key: &str,
    path: &str,
) -> Option<Timestamp> {
    match options.get(key) {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => match crate::time::parse_timestamp(s) {
            Ok(t) => Some(t),
            Err(message) => {
                err(errors, format!("{path}.{key}"), message);
                None
            }
        },
        Some(_) => {
            err(
                errors,
                format!("{path}.{key}"),
                "must be an RFC 3339 timestamp",
            );
            None
        }
    }
}

/// `expiresInterval`: a positive ISO 8601 duration of at most 100 years.
fn expires_interval(
    errors: &mut Vec<FieldError>,
    interval: Option<&Value>,
    path: &str,
) -> Option<Duration> {
    match interval {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => match parse_duration(s) {
            Some(d) if d > crate::time::MAX_DURATION => err(
                errors,
                format!("{path}.expiresInterval"),
                "must be at most 100 years (P36525D)",
            ),
            Some(d) if d > Duration::zero() => return Some(d),
            _ => err(
                errors,
                format!("{path}.expiresInterval"),
                "must be a positive ISO 8601 duration, e.g. PT30M or P1DT12H",
            ),
        },
        Some(_) => err(
            errors,
            format!("{path}.expiresInterval"),
            "must be an ISO 8601 duration string",
        ),
    }
    None
}

/// The expiry, given either way, ends after the embargo, and within bounds.
fn check_times(errors: &mut Vec<FieldError>, out: &CardOptions, path: &str) {
    if let (Some(embargo), Some(expires)) = (out.embargo, out.expires) {
        if expires <= embargo {
            err(errors, format!("{path}.expires"), "must be after embargo");
        }
    }
    if let (Some(embargo), Some(interval)) = (out.embargo, out.expires_interval) {
        if crate::time::checked_after(embargo, interval).is_none() {
            err(
                errors,
                format!("{path}.expiresInterval"),
                "counted from the embargo, must end by 9999-12-31T23:59:59.999Z",
            );
        }
    }
}

/// `targetStreamIds`: the ids that are non-empty strings (whether they exist is the trigger
/// service's to check).
fn stream_ids(
    errors: &mut Vec<FieldError>,
    ids: Option<&Value>,
    path: &str,
) -> Option<Vec<String>> {
    match ids {
        None | Some(Value::Null) => None,
        Some(Value::Array(ids)) => {
            let mut streams = Vec::new();
            for (i, id) in ids.iter().enumerate() {
                match id {
                    Value::String(s) if !s.is_empty() => streams.push(s.clone()),
                    _ => err(
                        errors,
                        format!("{path}.targetStreamIds[{i}]"),
                        "must be a stream id",
                    ),
                }
            }
            Some(streams)
        }
        Some(_) => {
            err(
                errors,
                format!("{path}.targetStreamIds"),
                "must be an array of stream ids",
            );
            None
        }
    }
}

/// `targetPlatforms`: the platforms named `true`, the others off.
fn platforms(
    errors: &mut Vec<FieldError>,
    platforms: Option<&Value>,
    path: &str,
) -> Option<Platforms> {
    let map = match platforms {
        None | Some(Value::Null) => return None,
        Some(Value::Object(map)) => map,
        Some(_) => {
            err(
                errors,
                format!("{path}.targetPlatforms"),
                "must be an object of Web, iOS, Android booleans",
            );
            return None;
        }
    };
    let mut chosen = Platforms {
        web: false,
        ios: false,
        android: false,
    };
    for (key, value) in map {
        let Some(on) = value.as_bool() else {
            err(
                errors,
                format!("{path}.targetPlatforms.{key}"),
                "must be true or false",
            );
            continue;
        };
        match key.as_str() {
            "Web" => chosen.web = on,
            "iOS" => chosen.ios = on,
            "Android" => chosen.android = on,
            _ => err(
                errors,
                format!("{path}.targetPlatforms.{key}"),
                "platforms are Web, iOS and Android",
            ),
        }
    }
    Some(chosen)
}
