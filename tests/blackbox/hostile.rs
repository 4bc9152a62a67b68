//! Hostile bodies (contract §10, "bad input never stops the service"): a corpus of requests
//! replayed against the real binary, on both backends. Each is answered with a 4xx problem
//! document carrying an `X-Request-Id` (never a 5xx, never silence: the client gives up after
//! [`ANSWER_WITHIN`]), and afterwards a normal `/test` trigger for a test user still produces
//! its card. Out-of-range dates and durations are 400 `validation_failed` naming the field.
//! A few bodies are odd but valid (a NUL in a variable, the last instant of year 9999): those
//! may be accepted instead ([`Want::Handled`]), and an accepted trigger must then complete.
//!
//! The corpus is data: each case is a name, a method, a path template, a content type and the
//! body's bytes, with what the answer must be. Trigger bodies go to both `/start` and `/test`.
//! Every case runs (a failure does not stop the replay); the test fails at the end listing
//! every case that misbehaved, with its request, the answer and the server's log lines about
//! it. Cases marked `known_failing` are server bugs this corpus found: they run and are
//! listed on stderr, but do not fail the test until the mark is removed.

use std::time::{Duration, Instant};

use reqwest::header::CONTENT_TYPE;
use serde_json::{json, Value};

use crate::receiver::Receiver;
use crate::support::{blackbox, call, Reply, Server};
use crate::trigger::{feed, finished, fire, invocation_id, published_flow, users};

/// Path templates: `{env}`, `{flow}`, `{card}` (a card of the user `actor`) and `{webhook}`
/// are filled in once the server has them.
const START: &str = "/v1/{env}/action-flow/{flow}/start";
const TEST: &str = "/v1/{env}/action-flow/{flow}/test";
const CARD_ACTION: &str = "/v1/{env}/users/actor/cards/{card}/actions";
const RECOVER: &str = "/v1/{env}/webhook/{webhook}/recover";
const FOLDERS: &str = "/v1/{env}/workbench-folder";
const FLOWS: &str = "/v1/{env}/action-flow";
const USER: &str = "/v1/{env}/users/hostile-user";

const JSON: Option<&str> = Some("application/json");
const MIB: usize = 1024 * 1024;

/// How long an answer may take before the case counts as a hang.
const ANSWER_WITHIN: Duration = Duration::from_secs(30);
/// How long the probe's card may take to appear in its user's feed.
const CARD_WITHIN: Duration = Duration::from_secs(10);

/// What the answer to a case must be.
#[derive(Debug, Clone, Copy)]
enum Want {
    /// A problem document with a 4xx status (any).
    Refused,
    /// A problem document with this status (any code).
    Status(u16),
    /// A problem document with this status and code.
    Code(u16, &'static str),
    /// 400 `validation_failed` whose `errors` name exactly these fields (in any order).
    Fields(&'static [&'static str]),
    /// The body is odd but valid: accepted (2xx; an accepted trigger's invocation must then
    /// complete, not fail), or refused with a 4xx problem document. Never a 5xx. (The card it
    /// may produce goes to a user who is not a probe.)
    Handled,
}

/// The backends a known failure shows on.
#[derive(Debug, Clone, Copy, PartialEq)]
#[allow(dead_code)] // while no case is known to fail
enum On {
    Both,
    PostgreSql,
}

struct Case {
    name: String,
    method: &'static str,
    path: &'static str,
    content_type: Option<&'static str>,
    body: Vec<u8>,
    want: Want,
    /// A server bug this case finds today, on which backends: the case still runs and is
    /// listed, but does not fail the test. Remove the mark once the bug is fixed.
    known_failing: Option<(On, &'static str)>,
}

impl Case {
    /// Marks a case the server still gets wrong (none today: every one found is fixed).
    #[allow(dead_code)]
    fn known_failing(mut self, on: On, why: &'static str) -> Case {
        self.known_failing = Some((on, why));
        self
    }
}

fn case(
    name: impl Into<String>,
    method: &'static str,
    path: &'static str,
    content_type: Option<&'static str>,
    body: impl Into<Vec<u8>>,
    want: Want,
) -> Case {
    Case {
        name: name.into(),
        method,
        path,
        content_type,
        body: body.into(),
        want,
        known_failing: None,
    }
}

/// The same body to `/start` and to `/test`.
fn trigger(
    name: impl Into<String>,
    content_type: Option<&'static str>,
    body: impl Into<Vec<u8>>,
    want: Want,
) -> [Case; 2] {
    let (name, body) = (name.into(), body.into());
    [
        case(
            name.clone(),
            "POST",
            START,
            content_type,
            body.clone(),
            want,
        ),
        case(name, "POST", TEST, content_type, body, want),
    ]
}

/// A trigger of one element for the user `t1` (not a test user: `/test` ignores it).
const TARGET: &str = r#"{"type":"user","targetUserIds":["t1"]}"#;

fn valid_trigger() -> Vec<u8> {
    format!(r#"{{"flows":[{{"target":{TARGET}}}]}}"#).into_bytes()
}

/// A trigger of one element (the JSON text of the element).
fn with_element(element: &str) -> Vec<u8> {
    format!(r#"{{"flows":[{element}]}}"#).into_bytes()
}

/// A trigger for `t1` with this payload (JSON text).
fn with_payload(payload: &str) -> Vec<u8> {
    with_element(&format!(r#"{{"target":{TARGET},"payload":{payload}}}"#))
}

/// A trigger for `t1` with these card options (JSON text).
fn with_options(options: &str) -> Vec<u8> {
    with_payload(&format!(r#"{{"cardOptions":{options}}}"#))
}

/// `open` `depth` times, `inner`, `close` `depth` times.
fn nested(open: &str, inner: &str, close: &str, depth: usize) -> String {
    format!("{}{inner}{}", open.repeat(depth), close.repeat(depth))
}

/// Bytes with `prefix` first and `suffix` last.
fn bytes(prefix: &[u8], middle: &[u8], suffix: &[u8]) -> Vec<u8> {
    [prefix, middle, suffix].concat()
}

const EXPIRES_INTERVAL: &[&str] = &["flows[0].payload.cardOptions.expiresInterval"];
const EXPIRES: &[&str] = &["flows[0].payload.cardOptions.expires"];
const EMBARGO: &[&str] = &["flows[0].payload.cardOptions.embargo"];
const PRIORITY: &[&str] = &["flows[0].payload.cardOptions.priority"];
const INVOCATION_ID: &[&str] = &["flows[0].flowInvocationId"];

/// Timestamps outside 1970-01-01T00:00:00.000Z..=9999-12-31T23:59:59.999Z.
const OUT_OF_RANGE_TIMES: [(&str, &str); 6] = [
    ("year 0001", "0001-01-01T00:00:00Z"),
    ("year 1969", "1969-12-31T23:59:59.999Z"),
    ("1969 in UTC", "1970-01-01T00:59:59+01:00"),
    ("year 10000 in UTC", "9999-12-31T23:59:59-01:00"),
    ("year 10000", "10000-01-01T00:00:00Z"),
    ("year +201894", "+201894-01-01T00:00:00Z"),
];

fn trigger_corpus() -> Vec<Case> {
    let mut cases = Vec::new();
    let mut add = |pair: [Case; 2]| cases.extend(pair);

    // The body of the robustness issue.
    add(trigger(
        "expiresInterval P290000Y (the issue's body)",
        JSON,
        br#"{"flows":[{"target":{"type":"user","targetUserIds":["t1"]},"payload":{"cardOptions":{"expiresInterval":"P290000Y"}}}]}"#.to_vec(),
        Want::Fields(EXPIRES_INTERVAL),
    ));

    // Not a JSON object.
    add(trigger(
        "empty body",
        JSON,
        b"".to_vec(),
        Want::Code(400, "malformed_json"),
    ));
    add(trigger(
        "whitespace only",
        JSON,
        b" \r\n\t ".to_vec(),
        Want::Code(400, "malformed_json"),
    ));
    add(trigger(
        "null",
        JSON,
        b"null".to_vec(),
        Want::Code(400, "validation_failed"),
    ));
    add(trigger(
        "top-level array",
        JSON,
        bytes(b"[", &valid_trigger(), b"]"),
        Want::Code(400, "validation_failed"),
    ));
    add(trigger(
        "top-level string",
        JSON,
        br#""{}""#.to_vec(),
        Want::Code(400, "validation_failed"),
    ));
    add(trigger(
        "top-level 18446744073709551616",
        JSON,
        b"18446744073709551616".to_vec(),
        Want::Code(400, "validation_failed"),
    ));
    add(trigger(
        "truncated",
        JSON,
        br#"{"flows":[{"target":"#.to_vec(),
        Want::Code(400, "malformed_json"),
    ));
    add(trigger(
        "trailing garbage",
        JSON,
        bytes(b"", &valid_trigger(), b" }"),
        Want::Code(400, "malformed_json"),
    ));
    add(trigger(
        "two objects",
        JSON,
        b"{}{}".to_vec(),
        Want::Code(400, "malformed_json"),
    ));
    add(trigger(
        "single quotes",
        JSON,
        b"{'flows':[]}".to_vec(),
        Want::Code(400, "malformed_json"),
    ));
    add(trigger(
        "a comment",
        JSON,
        bytes(b"/* hi */", &valid_trigger(), b""),
        Want::Code(400, "malformed_json"),
    ));
    add(trigger(
        "NaN",
        JSON,
        with_options(r#"{"priority":NaN}"#),
        Want::Code(400, "malformed_json"),
    ));
    add(trigger(
        "-Infinity",
        JSON,
        with_options(r#"{"priority":-Infinity}"#),
        Want::Code(400, "malformed_json"),
    ));

    // Deep nesting.
    add(trigger(
        "10,000 nested arrays",
        JSON,
        nested("[", "", "]", 10_000),
        Want::Code(400, "malformed_json"),
    ));
    add(trigger(
        "10,000 nested objects",
        JSON,
        nested(r#"{"a":"#, "1", "}", 10_000),
        Want::Code(400, "malformed_json"),
    ));
    add(trigger(
        "10,000 nested arrays in metadata",
        JSON,
        with_payload(&format!(
            r#"{{"metadata":{{"deep":{}}}}}"#,
            nested("[", "", "]", 10_000)
        )),
        Want::Code(400, "malformed_json"),
    ));
    add(trigger(
        "10,000 nested objects in a variable",
        JSON,
        with_payload(&format!(
            r#"{{"variables":{{"firstName":{}}}}}"#,
            nested(r#"{"value":"#, r#""x""#, "}", 10_000)
        )),
        Want::Code(400, "malformed_json"),
    ));
    add(trigger(
        "1,000,000 unclosed brackets",
        JSON,
        "[".repeat(1_000_000),
        Want::Code(400, "malformed_json"),
    ));
    add(trigger(
        "100 nested objects in metadata beside priority 11",
        JSON,
        with_payload(&format!(
            r#"{{"metadata":{},"cardOptions":{{"priority":11}}}}"#,
            nested(r#"{"a":"#, "1", "}", 100)
        )),
        Want::Fields(PRIORITY),
    ));
    add(trigger(
        "100 nested arrays in metadata (valid)",
        JSON,
        with_payload(&format!(
            r#"{{"metadata":{{"deep":{}}}}}"#,
            nested("[", "1", "]", 100)
        )),
        Want::Handled,
    ));

    // Numbers.
    add(trigger(
        "priority 1e400",
        JSON,
        with_options(r#"{"priority":1e400}"#),
        Want::Status(400),
    ));
    add(trigger(
        "priority -1e400",
        JSON,
        with_options(r#"{"priority":-1e400}"#),
        Want::Status(400),
    ));
    add(trigger(
        "priority 18446744073709551616",
        JSON,
        with_options(r#"{"priority":18446744073709551616}"#),
        Want::Fields(PRIORITY),
    ));
    add(trigger(
        "priority 1e-400",
        JSON,
        with_options(r#"{"priority":1e-400}"#),
        Want::Fields(PRIORITY),
    ));
    add(trigger(
        "priority 1e30",
        JSON,
        with_options(r#"{"priority":1e30}"#),
        Want::Fields(PRIORITY),
    ));
    add(trigger(
        "priority -1",
        JSON,
        with_options(r#"{"priority":-1}"#),
        Want::Fields(PRIORITY),
    ));
    add(trigger(
        "priority 11",
        JSON,
        with_options(r#"{"priority":11}"#),
        Want::Fields(PRIORITY),
    ));
    add(trigger(
        "priority 0",
        JSON,
        with_options(r#"{"priority":0}"#),
        Want::Fields(PRIORITY),
    ));
    add(trigger(
        "priority 5.5",
        JSON,
        with_options(r#"{"priority":5.5}"#),
        Want::Fields(PRIORITY),
    ));
    add(trigger(
        "priority as a huge integer string",
        JSON,
        with_options(&format!(r#"{{"priority":"{}"}}"#, "9".repeat(10_000))),
        Want::Fields(PRIORITY),
    ));
    add(trigger(
        "priority of 300 digits",
        JSON,
        with_options(&format!(r#"{{"priority":{}}}"#, "9".repeat(300))),
        Want::Fields(PRIORITY),
    ));
    add(trigger(
        "priority of 10,000 digits",
        JSON,
        with_options(&format!(r#"{{"priority":{}}}"#, "9".repeat(10_000))),
        Want::Status(400),
    ));
    add(trigger(
        "extreme numbers in metadata (valid)",
        JSON,
        with_payload(
            r#"{"metadata":{"big":18446744073709551616,"max":1.7976931348623157e308,"min":-1.7976931348623157e308,"tiny":5e-324,"under":1e-400,"negZero":-0,"long":123456789012345678901234567890}}"#,
        ),
        Want::Handled,
    ));
    add(trigger(
        "extreme numbers as variables",
        JSON,
        with_payload(
            r#"{"variables":{"firstName":1.7976931348623157e308,"due":-1.7976931348623157e308}}"#,
        ),
        Want::Fields(&[
            "flows[0].payload.variables.due",
            "flows[0].payload.variables.firstName",
        ]),
    ));

    // NUL.
    add(trigger(
        "NUL in a variable value (valid)",
        JSON,
        with_payload(r#"{"variables":{"firstName":"a\u0000b"}}"#),
        Want::Handled,
    ));
    add(trigger(
        "NUL as a metadata key and value (valid)",
        JSON,
        with_payload(r#"{"metadata":{"\u0000":"\u0000","k\u0000":{"\u0000":["\u0000"]}}}"#),
        Want::Handled,
    ));
    add(trigger(
        "NUL as a card option's name",
        JSON,
        with_options(r#"{"\u0000":1}"#),
        Want::Fields(&["flows[0].payload.cardOptions.\u{0}"]),
    ));
    add(trigger(
        "NUL as a variable's name, strictVariables",
        JSON,
        format!(
            r#"{{"flows":[{{"target":{TARGET},"payload":{{"variables":{{"\u0000":"x"}}}}}}],"options":{{"strictVariables":true}}}}"#
        ),
        Want::Fields(&["flows[0].payload.variables.\u{0}"]),
    ));
    add(trigger(
        "NUL in a target user id",
        JSON,
        with_element(r#"{"target":{"type":"user","targetUserIds":["t\u00001"]}}"#),
        Want::Fields(&["flows[0].target.targetUserIds[0]"]),
    ));
    add(trigger(
        "NUL in flowInvocationId",
        JSON,
        with_element(&format!(
            r#"{{"target":{TARGET},"flowInvocationId":"inv\u0000"}}"#
        )),
        Want::Fields(INVOCATION_ID),
    ));
    // Found by this corpus: the id reached the segment lookup as it was, and PostgreSQL refuses
    // a NUL byte in text ("invalid byte sequence for encoding UTF8: 0x00"): it answered 500.
    add(trigger(
        "NUL in targetSegmentId",
        JSON,
        with_element(r#"{"target":{"type":"segment","targetSegmentId":"seg_\u0000"}}"#),
        Want::Fields(&["flows[0].target.targetSegmentId"]),
    ));
    add(trigger(
        "NUL in targetStreamIds",
        JSON,
        with_options(r#"{"targetStreamIds":["str_\u0000"]}"#),
        Want::Fields(&["flows[0].payload.cardOptions.targetStreamIds[0]"]),
    ));
    // Found by this corpus: accepted (200), then on PostgreSQL the invocation failed after 3
    // attempts, the NUL reaching the tag query. Tags never hold control characters: 400.
    add(trigger(
        "NUL in tagName",
        JSON,
        with_element(r#"{"target":{"type":"tag","tagName":"vip\u0000"}}"#),
        Want::Fields(&["flows[0].target.tagName"]),
    ));
    add(trigger(
        "NUL in a filter value",
        JSON,
        with_element(
            r#"{"target":{"type":"filters","filter":{"conditions":[{"field":"attributes.a\u0000","op":"eq","value":"\u0000"}]}}}"#,
        ),
        Want::Handled,
    ));
    add(trigger(
        "raw NUL byte in a string",
        JSON,
        with_payload("{\"variables\":{\"firstName\":\"a\0b\"}}"),
        Want::Code(400, "malformed_json"),
    ));
    add(trigger(
        "raw NUL byte between tokens",
        JSON,
        bytes(b"\0", &valid_trigger(), b""),
        Want::Code(400, "malformed_json"),
    ));

    // Lone surrogates and bytes that are not UTF-8.
    add(trigger(
        "lone high surrogate \\ud800",
        JSON,
        with_payload(r#"{"variables":{"firstName":"\ud800"}}"#),
        Want::Status(400),
    ));
    add(trigger(
        "lone low surrogate \\udfff",
        JSON,
        with_payload(r#"{"variables":{"firstName":"a\udfffb"}}"#),
        Want::Status(400),
    ));
    add(trigger(
        "high surrogate before a letter",
        JSON,
        with_payload(r#"{"variables":{"firstName":"\ud800\u0041"}}"#),
        Want::Status(400),
    ));
    add(trigger(
        "surrogates in the wrong order",
        JSON,
        with_payload(r#"{"variables":{"firstName":"\udc00\ud800"}}"#),
        Want::Status(400),
    ));
    add(trigger(
        "lone surrogate in a key",
        JSON,
        with_payload(r#"{"metadata":{"\ud800":1}}"#),
        Want::Status(400),
    ));
    add(trigger(
        "a surrogate pair (valid)",
        JSON,
        with_payload(r#"{"variables":{"firstName":"\ud83d\ude00"}}"#),
        Want::Handled,
    ));
    add(trigger(
        "raw byte 0xFF in a string",
        JSON,
        bytes(
            br#"{"flows":[{"target":{"type":"user","targetUserIds":["t"#,
            b"\xff",
            br#""]}}]}"#,
        ),
        Want::Code(400, "malformed_json"),
    ));
    add(trigger(
        "raw UTF-8-encoded surrogate (CESU-8)",
        JSON,
        bytes(
            br#"{"flows":[{"target":{"type":"user","targetUserIds":["t"#,
            b"\xed\xa0\x80",
            br#""]}}]}"#,
        ),
        Want::Code(400, "malformed_json"),
    ));
    add(trigger(
        "overlong NUL (0xC0 0x80)",
        JSON,
        bytes(
            br#"{"flows":[{"target":{"type":"user","targetUserIds":["t"#,
            b"\xc0\x80",
            br#""]}}]}"#,
        ),
        Want::Code(400, "malformed_json"),
    ));
    add(trigger(
        "truncated multi-byte character",
        JSON,
        bytes(
            br#"{"flows":[{"target":{"type":"user","targetUserIds":["t"#,
            b"\xe2\x82",
            br#""]}}]}"#,
        ),
        Want::Code(400, "malformed_json"),
    ));
    add(trigger(
        "UTF-16 body",
        Some("application/json; charset=utf-16"),
        String::from_utf8(valid_trigger())
            .expect("ASCII")
            .encode_utf16()
            .flat_map(u16::to_le_bytes)
            .collect::<Vec<u8>>(),
        Want::Status(400),
    ));

    // Size. Trigger bodies may be up to 32 MiB.
    add(trigger(
        "2 MB flowInvocationId",
        JSON,
        with_element(&format!(
            r#"{{"target":{TARGET},"flowInvocationId":"{}"}}"#,
            "i".repeat(2 * MIB)
        )),
        Want::Fields(INVOCATION_ID),
    ));
    add(trigger(
        "2 MB variable value (valid)",
        JSON,
        with_payload(&format!(
            r#"{{"variables":{{"firstName":"{}"}}}}"#,
            "v".repeat(2 * MIB)
        )),
        Want::Handled,
    ));
    add(trigger(
        "flowInvocationId just under the 32 MiB limit",
        JSON,
        with_element(&format!(
            r#"{{"target":{TARGET},"flowInvocationId":"{}"}}"#,
            "i".repeat(32 * MIB - 200)
        )),
        Want::Fields(INVOCATION_ID),
    ));
    add(trigger(
        "33 MiB string (over the 32 MiB limit)",
        JSON,
        with_payload(&format!(
            r#"{{"variables":{{"firstName":"{}"}}}}"#,
            "v".repeat(33 * MIB)
        )),
        Want::Code(413, "payload_too_large"),
    ));
    add(trigger(
        "10,001 target user ids",
        JSON,
        with_element(&format!(
            r#"{{"target":{{"type":"user","targetUserIds":{}}}}}"#,
            json!((0..10_001).map(|i| format!("u{i}")).collect::<Vec<_>>())
        )),
        Want::Fields(&["flows[0].target.targetUserIds"]),
    ));
    add(trigger(
        "1,001 elements",
        JSON,
        format!(
            r#"{{"flows":[{}]}}"#,
            vec![format!(r#"{{"target":{TARGET}}}"#); 1_001].join(",")
        ),
        Want::Fields(&["flows"]),
    ));

    // Duplicated keys and a byte-order mark.
    add(trigger(
        "duplicated priority, 5 then 11",
        JSON,
        with_options(r#"{"priority":5,"priority":11}"#),
        Want::Status(400),
    ));
    add(trigger(
        "duplicated priority, 11 then 5",
        JSON,
        with_options(r#"{"priority":11,"priority":5}"#),
        Want::Handled,
    ));
    add(trigger(
        "duplicated flows, valid then 5",
        JSON,
        format!(r#"{{"flows":[{{"target":{TARGET}}}],"flows":5}}"#),
        Want::Status(400),
    ));
    add(trigger(
        "BOM before an invalid body",
        JSON,
        bytes(b"\xef\xbb\xbf", &with_options(r#"{"priority":11}"#), b""),
        Want::Status(400),
    ));
    add(trigger(
        "BOM before a valid body",
        JSON,
        bytes(b"\xef\xbb\xbf", &valid_trigger(), b""),
        Want::Handled,
    ));

    // Wrong content types, with a valid body.
    add(trigger(
        "no content type",
        None,
        valid_trigger(),
        Want::Code(415, "unsupported_media_type"),
    ));
    add(trigger(
        "empty content type",
        Some(""),
        valid_trigger(),
        Want::Code(415, "unsupported_media_type"),
    ));
    add(trigger(
        "text/plain",
        Some("text/plain"),
        valid_trigger(),
        Want::Code(415, "unsupported_media_type"),
    ));
    add(trigger(
        "text/json",
        Some("text/json"),
        valid_trigger(),
        Want::Code(415, "unsupported_media_type"),
    ));
    add(trigger(
        "form-urlencoded",
        Some("application/x-www-form-urlencoded"),
        valid_trigger(),
        Want::Code(415, "unsupported_media_type"),
    ));
    add(trigger(
        "multipart",
        Some("multipart/form-data; boundary=x"),
        valid_trigger(),
        Want::Code(415, "unsupported_media_type"),
    ));
    add(trigger(
        "application/jsonp",
        Some("application/jsonp"),
        valid_trigger(),
        Want::Code(415, "unsupported_media_type"),
    ));

    // Durations out of range (at most 100 years), or that overflow.
    for interval in [
        "P200000Y".to_owned(),
        "P101Y".to_owned(),
        "P36526D".to_owned(),
        "P99999999999999999999Y".to_owned(),
        "PT9223372036854775807S".to_owned(),
        "P106751991167301D".to_owned(),
        format!("P{}Y", "9".repeat(10_000)),
    ] {
        add(trigger(
            if interval.len() > 40 {
                format!("expiresInterval of {} characters", interval.len())
            } else {
                format!("expiresInterval {interval}")
            },
            JSON,
            with_options(&format!(r#"{{"expiresInterval":"{interval}"}}"#)),
            Want::Fields(EXPIRES_INTERVAL),
        ));
    }
    // Timestamps out of range.
    for (label, time) in OUT_OF_RANGE_TIMES {
        add(trigger(
            format!("expires {label}: {time}"),
            JSON,
            with_options(&format!(r#"{{"expires":"{time}"}}"#)),
            Want::Fields(EXPIRES),
        ));
        add(trigger(
            format!("embargo {label}: {time}"),
            JSON,
            with_options(&format!(r#"{{"embargo":"{time}"}}"#)),
            Want::Fields(EMBARGO),
        ));
    }
    add(trigger(
        "embargo at the last instant plus expiresInterval PT1S",
        JSON,
        with_options(r#"{"embargo":"9999-12-31T23:59:59.999Z","expiresInterval":"PT1S"}"#),
        Want::Fields(EXPIRES_INTERVAL),
    ));
    add(trigger(
        "embargo year 0001 and expires year 10000",
        JSON,
        with_options(r#"{"embargo":"0001-01-01T00:00:00Z","expires":"9999-12-31T23:59:59-01:00"}"#),
        Want::Fields(&[
            "flows[0].payload.cardOptions.embargo",
            "flows[0].payload.cardOptions.expires",
        ]),
    ));
    // The edges themselves are valid.
    add(trigger(
        "expires at the last instant (valid)",
        JSON,
        with_options(r#"{"expires":"9999-12-31T23:59:59.999Z"}"#),
        Want::Handled,
    ));
    add(trigger(
        "embargo until the year 9999 (valid)",
        JSON,
        with_options(
            r#"{"embargo":"9999-12-31T23:59:59.998Z","expires":"9999-12-31T23:59:59.999Z"}"#,
        ),
        Want::Handled,
    ));
    add(trigger(
        "expiresInterval P100Y (valid)",
        JSON,
        with_options(r#"{"expiresInterval":"P100Y"}"#),
        Want::Handled,
    ));
    // Found by an outside probe: payload parts beside `payload` were ignored without a word.
    for part in ["cardOptions", "variables", "metadata"] {
        add(trigger(
            format!("{part} beside the payload"),
            JSON,
            with_element(&format!(
                r#"{{"target":{TARGET},"{part}":{{"priority":5}}}}"#
            )),
            Want::Fields(match part {
                "cardOptions" => &["flows[0].cardOptions"],
                "variables" => &["flows[0].variables"],
                _ => &["flows[0].metadata"],
            }),
        ));
    }
    cases
}

fn other_corpus() -> Vec<Case> {
    let mut cases = Vec::new();

    // A card's actions (the card stays active: every case is refused).
    for (label, time) in OUT_OF_RANGE_TIMES {
        cases.push(case(
            format!("snoozeUntil {label}: {time}"),
            "POST",
            CARD_ACTION,
            JSON,
            format!(r#"{{"action":"snooze","snoozeUntil":"{time}"}}"#),
            Want::Fields(&["snoozeUntil"]),
        ));
    }
    cases.extend([
        case(
            "snoozeUntil 1e400",
            "POST",
            CARD_ACTION,
            JSON,
            br#"{"action":"snooze","snoozeUntil":1e400}"#.to_vec(),
            Want::Status(400),
        ),
        case(
            "snoozeUntil 18446744073709551616",
            "POST",
            CARD_ACTION,
            JSON,
            br#"{"action":"snooze","snoozeUntil":18446744073709551616}"#.to_vec(),
            Want::Fields(&["snoozeUntil"]),
        ),
        case(
            "snoozeUntil a lone surrogate",
            "POST",
            CARD_ACTION,
            JSON,
            br#"{"action":"snooze","snoozeUntil":"\udc00"}"#.to_vec(),
            Want::Status(400),
        ),
        case(
            "snoozeUntil with NUL",
            "POST",
            CARD_ACTION,
            JSON,
            br#"{"action":"snooze","snoozeUntil":"2030-01-01T00:00:00Z\u0000"}"#.to_vec(),
            Want::Fields(&["snoozeUntil"]),
        ),
        case(
            "action NUL",
            "POST",
            CARD_ACTION,
            JSON,
            br#"{"action":"\u0000"}"#.to_vec(),
            Want::Fields(&["action"]),
        ),
        case(
            "10,000 nested objects in values",
            "POST",
            CARD_ACTION,
            JSON,
            format!(
                r#"{{"action":"submit","values":{}}}"#,
                nested(r#"{"a":"#, "1", "}", 10_000)
            ),
            Want::Code(400, "malformed_json"),
        ),
        case(
            "1e400 in values",
            "POST",
            CARD_ACTION,
            JSON,
            br#"{"action":"submit","values":{"rating":1e400}}"#.to_vec(),
            Want::Status(400),
        ),
        case(
            "2 MB string in values",
            "POST",
            CARD_ACTION,
            JSON,
            format!(
                r#"{{"action":"submit","values":{{"text":"{}"}}}}"#,
                "x".repeat(2 * MIB)
            ),
            Want::Code(413, "payload_too_large"),
        ),
        case(
            "empty body",
            "POST",
            CARD_ACTION,
            JSON,
            b"".to_vec(),
            Want::Code(400, "malformed_json"),
        ),
        case(
            "text/plain",
            "POST",
            CARD_ACTION,
            Some("text/plain"),
            br#"{"action":"dismiss"}"#.to_vec(),
            Want::Code(415, "unsupported_media_type"),
        ),
    ]);

    // Recovering a webhook's deliveries.
    for (label, time) in OUT_OF_RANGE_TIMES {
        cases.push(case(
            format!("since {label}: {time}"),
            "POST",
            RECOVER,
            JSON,
            format!(r#"{{"since":"{time}"}}"#),
            Want::Fields(&["since"]),
        ));
    }
    cases.extend([
        case(
            "since 1e400",
            "POST",
            RECOVER,
            JSON,
            br#"{"since":1e400}"#.to_vec(),
            Want::Status(400),
        ),
        case(
            "since -18446744073709551616",
            "POST",
            RECOVER,
            JSON,
            br#"{"since":-18446744073709551616}"#.to_vec(),
            Want::Fields(&["since"]),
        ),
        case(
            "since NUL",
            "POST",
            RECOVER,
            JSON,
            br#"{"since":"\u0000"}"#.to_vec(),
            Want::Fields(&["since"]),
        ),
        case(
            "since a lone surrogate",
            "POST",
            RECOVER,
            JSON,
            br#"{"since":"\ud800"}"#.to_vec(),
            Want::Status(400),
        ),
        case(
            "since a 2 MB string",
            "POST",
            RECOVER,
            JSON,
            format!(r#"{{"since":"{}"}}"#, "2".repeat(2 * MIB)),
            Want::Code(413, "payload_too_large"),
        ),
        case(
            "since 10,000 nested arrays",
            "POST",
            RECOVER,
            JSON,
            format!(r#"{{"since":{}}}"#, nested("[", "", "]", 10_000)),
            Want::Code(400, "malformed_json"),
        ),
        case(
            "empty body",
            "POST",
            RECOVER,
            JSON,
            b"".to_vec(),
            Want::Code(400, "malformed_json"),
        ),
    ]);

    // Creating folders.
    cases.extend([
        case(
            "folder name NUL",
            "POST",
            FOLDERS,
            JSON,
            br#"{"name":"a\u0000b"}"#.to_vec(),
            Want::Fields(&["name"]),
        ),
        case(
            "folder name a bidi override",
            "POST",
            FOLDERS,
            JSON,
            br#"{"name":"abc\u202e"}"#.to_vec(),
            Want::Fields(&["name"]),
        ),
        case(
            "folder name a lone surrogate",
            "POST",
            FOLDERS,
            JSON,
            br#"{"name":"\ud800"}"#.to_vec(),
            Want::Status(400),
        ),
        case(
            "folder name raw 0xFF",
            "POST",
            FOLDERS,
            JSON,
            b"{\"name\":\"\xff\"}".to_vec(),
            Want::Code(400, "malformed_json"),
        ),
        case(
            "folder name 2 MB (over the 1 MiB limit)",
            "POST",
            FOLDERS,
            JSON,
            format!(r#"{{"name":"{}"}}"#, "n".repeat(2 * MIB)),
            Want::Code(413, "payload_too_large"),
        ),
        case(
            "folder name just under the 1 MiB limit",
            "POST",
            FOLDERS,
            JSON,
            format!(r#"{{"name":"{}"}}"#, "n".repeat(MIB - 100)),
            Want::Fields(&["name"]),
        ),
        // Found by this corpus: on PostgreSQL the NUL reached the parent's lookup (500).
        case(
            "folder parentId NUL",
            "POST",
            FOLDERS,
            JSON,
            br#"{"name":"ok","parentId":"fld_\u0000"}"#.to_vec(),
            Want::Fields(&["parentId"]),
        ),
        case(
            "folder 10,000 nested objects",
            "POST",
            FOLDERS,
            JSON,
            nested(r#"{"name":"#, r#""x""#, "}", 10_000),
            Want::Code(400, "malformed_json"),
        ),
        case(
            "folder name 1e400",
            "POST",
            FOLDERS,
            JSON,
            br#"{"name":1e400}"#.to_vec(),
            Want::Status(400),
        ),
        case(
            "folder duplicated name, valid then NUL",
            "POST",
            FOLDERS,
            JSON,
            br#"{"name":"ok","name":"\u0000"}"#.to_vec(),
            Want::Status(400),
        ),
        case(
            "folder BOM before an invalid name",
            "POST",
            FOLDERS,
            JSON,
            b"\xef\xbb\xbf{\"name\":\"\\u0000\"}".to_vec(),
            Want::Status(400),
        ),
        case(
            "folder null",
            "POST",
            FOLDERS,
            JSON,
            b"null".to_vec(),
            Want::Code(400, "validation_failed"),
        ),
        case(
            "folder form-urlencoded",
            "POST",
            FOLDERS,
            Some("application/x-www-form-urlencoded"),
            b"name=x".to_vec(),
            Want::Code(415, "unsupported_media_type"),
        ),
    ]);

    // Creating flows.
    cases.extend([
        case(
            "flow name NUL",
            "POST",
            FLOWS,
            JSON,
            br#"{"name":"\u0000"}"#.to_vec(),
            Want::Fields(&["name"]),
        ),
        // Found by this corpus: on PostgreSQL the NUL reached the folder's lookup (500).
        case(
            "flow folderId NUL",
            "POST",
            FLOWS,
            JSON,
            br#"{"name":"ok","folderId":"fld_\u0000"}"#.to_vec(),
            Want::Fields(&["folderId"]),
        ),
        case(
            "flow name 2 MB (over the 1 MiB limit)",
            "POST",
            FLOWS,
            JSON,
            format!(r#"{{"name":"{}"}}"#, "n".repeat(2 * MIB)),
            Want::Code(413, "payload_too_large"),
        ),
        case(
            "flow config 10,000 nested arrays",
            "POST",
            FLOWS,
            JSON,
            format!(r#"{{"name":"ok","config":{}}}"#, nested("[", "", "]", 10_000)),
            Want::Code(400, "malformed_json"),
        ),
        case(
            "flow config 100 nested objects",
            "POST",
            FLOWS,
            JSON,
            format!(
                r#"{{"name":"ok","config":{}}}"#,
                nested(r#"{"steps":"#, "1", "}", 100)
            ),
            Want::Code(400, "invalid_config"),
        ),
        case(
            "flow config priority 1e30",
            "POST",
            FLOWS,
            JSON,
            br#"{"name":"ok","config":{"type":"card","initialSteps":["s1"],"steps":{"s1":{"id":"s1","type":"create-card","properties":{"cardTemplateId":"t1"}}},"cardTemplates":{"t1":{"metadata":{"cardName":"c","delivery":{"priority":1e30}},"defaultView":{"content":[]}}}}}"#.to_vec(),
            Want::Code(400, "invalid_config"),
        ),
        case(
            "flow config priority 1e400",
            "POST",
            FLOWS,
            JSON,
            br#"{"name":"ok","config":{"type":"card","initialSteps":["s1"],"steps":{"s1":{"id":"s1","type":"create-card","properties":{"cardTemplateId":"t1"}}},"cardTemplates":{"t1":{"metadata":{"cardName":"c","delivery":{"priority":1e400}},"defaultView":{"content":[]}}}}}"#.to_vec(),
            Want::Status(400),
        ),
        case(
            "flow config with a lone surrogate",
            "POST",
            FLOWS,
            JSON,
            br#"{"name":"ok","config":{"type":"card","\udbff":1}}"#.to_vec(),
            Want::Status(400),
        ),
    ]);

    // Upserting a user.
    cases.extend([
        case(
            "user tag NUL",
            "PUT",
            USER,
            JSON,
            br#"{"tags":["\u0000"]}"#.to_vec(),
            Want::Fields(&["tags[0]"]),
        ),
        case(
            "user testUser 1e30",
            "PUT",
            USER,
            JSON,
            br#"{"testUser":1e30}"#.to_vec(),
            Want::Fields(&["testUser"]),
        ),
        case(
            "user attribute 1e400",
            "PUT",
            USER,
            JSON,
            br#"{"attributes":{"n":1e400}}"#.to_vec(),
            Want::Status(400),
        ),
        case(
            "user attribute -1e400",
            "PUT",
            USER,
            JSON,
            br#"{"attributes":{"n":-1e400}}"#.to_vec(),
            Want::Status(400),
        ),
        case(
            "user extreme numbers as attributes (valid)",
            "PUT",
            USER,
            JSON,
            br#"{"attributes":{"big":18446744073709551616,"max":1.7976931348623157e308,"tiny":1e-400,"negZero":-0}}"#.to_vec(),
            Want::Handled,
        ),
        case(
            "user NUL as an attribute's name and value",
            "PUT",
            USER,
            JSON,
            br#"{"attributes":{"\u0000":"\u0000"}}"#.to_vec(),
            Want::Handled,
        ),
        case(
            "user attribute a lone surrogate",
            "PUT",
            USER,
            JSON,
            br#"{"attributes":{"a":"\ud800"}}"#.to_vec(),
            Want::Status(400),
        ),
        case(
            "user 10,000 nested arrays as an attribute",
            "PUT",
            USER,
            JSON,
            format!(r#"{{"attributes":{{"a":{}}}}}"#, nested("[", "", "]", 10_000)),
            Want::Code(400, "malformed_json"),
        ),
        case(
            "user attribute 2 MB (over the 1 MiB limit)",
            "PUT",
            USER,
            JSON,
            format!(r#"{{"attributes":{{"a":"{}"}}}}"#, "a".repeat(2 * MIB)),
            Want::Code(413, "payload_too_large"),
        ),
        case(
            "user attribute just under the 1 MiB limit",
            "PUT",
            USER,
            JSON,
            format!(r#"{{"attributes":{{"a":"{}"}}}}"#, "a".repeat(MIB - 100)),
            Want::Fields(&["attributes.a"]),
        ),
        case(
            "user id %00 in the path",
            "PUT",
            "/v1/{env}/users/bad%00id",
            JSON,
            b"{}".to_vec(),
            Want::Status(400),
        ),
        // Found by this corpus (the next three): contract §16 says "Path ids with invalid
        // percent-encoding are 400, never decoded lossily"; the user was stored, 200, with
        // U+FFFD in place of the bytes (%FF, %ED%A0%80) or with the escape kept as text (%zz).
        case(
            "user id %FF in the path",
            "PUT",
            "/v1/{env}/users/bad%FFid",
            JSON,
            b"{}".to_vec(),
            Want::Status(400),
        ),
        case(
            "user id an encoded surrogate in the path",
            "PUT",
            "/v1/{env}/users/bad%ED%A0%80id",
            JSON,
            b"{}".to_vec(),
            Want::Status(400),
        ),
        case(
            "user id an invalid escape in the path",
            "PUT",
            "/v1/{env}/users/bad%zzid",
            JSON,
            b"{}".to_vec(),
            Want::Status(400),
        ),
        case(
            "user text/plain",
            "PUT",
            USER,
            Some("text/plain"),
            b"{}".to_vec(),
            Want::Code(415, "unsupported_media_type"),
        ),
    ]);
    cases
}

/// Found by an outside probe: a cursor no page handed out, and OAuth parameters sent twice
/// (RFC 6749 §3.2), were taken.
fn query_and_form_corpus() -> Vec<Case> {
    let long_cursor: &'static str =
        Box::leak(format!("/v1/{{env}}/action-flow?cursor={}", "A".repeat(5_000)).into_boxed_str());
    let form = Some("application/x-www-form-urlencoded");
    let mut cases = vec![
        case(
            "a 5,000-character cursor",
            "GET",
            long_cursor,
            None,
            Vec::new(),
            Want::Fields(&["cursor"]),
        ),
        case(
            "a cursor that is base64 of an id",
            "GET",
            "/v1/{env}/action-flow?cursor=ZmxkXzE",
            None,
            Vec::new(),
            Want::Fields(&["cursor"]),
        ),
    ];
    for (name, body) in [
        (
            "grant_type twice",
            "grant_type=password&grant_type=client_credentials&client_id=a&client_secret=b",
        ),
        (
            "client_id twice",
            "grant_type=client_credentials&client_id=x&client_id=y&client_secret=b",
        ),
        (
            "client_secret twice",
            "grant_type=client_credentials&client_id=x&client_secret=a&client_secret=b",
        ),
        (
            // Found by the API fuzzer: an unknown parameter, repeated, was refused as a repeat.
            // RFC 6749 §3.1 says unknown parameters are ignored; this one then fails as a client.
            "an unknown parameter three times",
            "then=a&then=&then=b&grant_type=client_credentials&client_id=x&client_secret=b",
        ),
    ] {
        let want = if name.starts_with("an unknown") {
            Want::Code(401, "unauthorized")
        } else {
            Want::Code(400, "invalid_request")
        };
        cases.push(case(
            name,
            "POST",
            "/oauth/token",
            form,
            body.as_bytes().to_vec(),
            want,
        ));
    }
    cases
}

/// Valid bodies to paths whose ids are hostile: at least 4xx, never a 5xx.
fn path_corpus() -> Vec<Case> {
    let trigger = valid_trigger();
    let dismiss = br#"{"action":"dismiss"}"#.to_vec();
    // Found by this corpus: a path id with %00 was decoded to a NUL and given to a PostgreSQL
    // query as it was; PostgreSQL refuses a NUL byte in text and the answer was 500. A path
    // with a control character is now refused with 400 before routing.
    vec![
        case(
            "NUL in the flow id",
            "POST",
            "/v1/{env}/action-flow/flw_%00/start",
            JSON,
            trigger.clone(),
            Want::Refused,
        ),
        case(
            "NUL after the flow id",
            "POST",
            "/v1/{env}/action-flow/{flow}%00/test",
            JSON,
            trigger.clone(),
            Want::Refused,
        ),
        case(
            "%FF in the flow id",
            "POST",
            "/v1/{env}/action-flow/flw_%FF/test",
            JSON,
            trigger.clone(),
            Want::Refused,
        ),
        case(
            "NUL in the environment id",
            "POST",
            "/v1/env_%00/action-flow/{flow}/start",
            JSON,
            trigger,
            Want::Refused,
        ),
        case(
            "NUL in the card id",
            "POST",
            "/v1/{env}/users/actor/cards/crd_%00/actions",
            JSON,
            dismiss.clone(),
            Want::Refused,
        ),
        case(
            "NUL in the card's user id",
            "POST",
            "/v1/{env}/users/act%00or/cards/{card}/actions",
            JSON,
            dismiss.clone(),
            Want::Refused,
        ),
        case(
            "%FF after the card id",
            "POST",
            "/v1/{env}/users/actor/cards/{card}%FF/actions",
            JSON,
            dismiss,
            Want::Refused,
        ),
        case(
            "NUL after the webhook id",
            "POST",
            "/v1/{env}/webhook/{webhook}%00/recover",
            JSON,
            br#"{"since":"2020-01-01T00:00:00Z"}"#.to_vec(),
            Want::Refused,
        ),
    ]
}

fn corpus() -> Vec<Case> {
    let mut cases = trigger_corpus();
    cases.extend(other_corpus());
    cases.extend(query_and_form_corpus());
    cases.extend(path_corpus());
    cases
}

/// The ids the path templates name.
struct Ids {
    env: String,
    flow: String,
    card: String,
    webhook: String,
}

impl Ids {
    fn fill(&self, template: &str) -> String {
        template
            .replace("{env}", &self.env)
            .replace("{flow}", &self.flow)
            .replace("{card}", &self.card)
            .replace("{webhook}", &self.webhook)
    }
}

/// Sends a case as it is (bytes and content type), with a client that gives up on a hang.
async fn send(
    client: &reqwest::Client,
    s: &Server,
    case: &Case,
    path: &str,
) -> Result<Reply, String> {
    let method = reqwest::Method::from_bytes(case.method.as_bytes()).expect("method");
    let mut request = client
        .request(method, s.url(path))
        .bearer_auth(&s.admin_secret)
        .body(case.body.clone());
    if let Some(content_type) = case.content_type {
        request = request.header(CONTENT_TYPE, content_type);
    }
    let response = request
        .send()
        .await
        .map_err(|e| format!("no answer: {e:?}"))?;
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let raw = response
        .bytes()
        .await
        .map_err(|e| format!("{status}, then the body broke off: {e:?}"))?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    Ok(Reply {
        status,
        headers,
        body: serde_json::from_str(&text).unwrap_or(Value::Null),
        text,
    })
}

/// Whether the answer is what the case wants; else what is wrong.
fn check(want: Want, reply: &Reply) -> Result<(), String> {
    if reply.header("x-request-id").is_none() {
        return Err("no X-Request-Id".into());
    }
    if matches!(want, Want::Handled) && (200..300).contains(&reply.status) {
        return Ok(());
    }
    if !(400..500).contains(&reply.status) {
        return Err(format!("status {}, not a 4xx", reply.status));
    }
    if reply.header("content-type") != Some("application/problem+json") {
        return Err(format!(
            "content type {:?}, not application/problem+json",
            reply.header("content-type")
        ));
    }
    let body = &reply.body;
    let Some(code) = body["code"].as_str() else {
        return Err("no `code`: not a problem document".into());
    };
    if body["status"] != reply.status
        || body["type"] != format!("urn:workbench:error:{code}")
        || !body["title"].is_string()
        || !body["errors"].is_array()
    {
        return Err("a malformed problem document".into());
    }
    match want {
        Want::Handled | Want::Refused => Ok(()),
        Want::Status(status) if reply.status != status => Err(format!("status, not {status}")),
        Want::Status(_) => Ok(()),
        Want::Code(status, want_code) if (reply.status, code) != (status, want_code) => {
            Err(format!("not {status} {want_code}"))
        }
        Want::Code(..) => Ok(()),
        Want::Fields(fields) => {
            if (reply.status, code) != (400, "validation_failed") {
                return Err("not 400 validation_failed".into());
            }
            let mut named: Vec<&str> = body["errors"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|e| e["field"].as_str())
                .collect();
            named.sort_unstable();
            let mut wanted = fields.to_vec();
            wanted.sort_unstable();
            if named == wanted {
                Ok(())
            } else {
                Err(format!("errors name {named:?}, not {wanted:?}"))
            }
        }
    }
}

/// A normal `/test` trigger for the test user `probe-{n}`, and its card in that user's feed.
async fn probe(client: &reqwest::Client, s: &Server, flow: &str, n: usize) -> Result<(), String> {
    let user = format!("probe-{n}");
    let greeting = format!("Hello probe {n}");
    let body = json!({"flows": [{"target": {"type": "user", "targetUserIds": [user]},
                                 "payload": {"variables": {"firstName": format!("probe {n}")}}}]});
    let fired = client
        .post(s.url(&format!("/v1/{}/action-flow/{flow}/test", s.env)))
        .bearer_auth(&s.admin_secret)
        .json(&body)
        .send()
        .await
        .map_err(|e| format!("the probe's trigger got no answer: {e:?}"))?;
    let status = fired.status().as_u16();
    if status != 200 {
        let text = fired.text().await.unwrap_or_default();
        return Err(format!("the probe's trigger answered {status}: {text}"));
    }
    let started = Instant::now();
    let mut last = String::new();
    while started.elapsed() < CARD_WITHIN {
        let reply = client
            .get(s.url(&format!("/v1/{}/users/{user}/cards", s.env)))
            .bearer_auth(&s.admin_secret)
            .send()
            .await;
        if let Ok(reply) = reply {
            let status = reply.status().as_u16();
            last = reply.text().await.unwrap_or_default();
            let cards: Value = serde_json::from_str(&last).unwrap_or(Value::Null);
            let found = cards["data"].as_array().into_iter().flatten().any(|card| {
                card["content"]["Web"]["defaultView"]["content"][0]["attributes"]["text"]
                    == greeting.as_str()
            });
            if status == 200 && found {
                return Ok(());
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(format!(
        "no card for {user} within {CARD_WITHIN:?}; last feed: {}",
        preview(last.as_bytes())
    ))
}

/// The server's log lines about a request that failed on the server's side.
async fn logged(s: &Server, reply: &Reply) -> String {
    let Some(id) = reply.header("x-request-id").filter(|_| reply.status >= 500) else {
        return String::new();
    };
    let mut lines = Vec::new();
    // The log is read from the process's stderr on another thread: give it a moment.
    for _ in 0..20 {
        lines = s
            .logs()
            .lines()
            .filter(|line| line.contains(id))
            .map(|line| preview(line.as_bytes()))
            .collect();
        if !lines.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    format!("\n      logged: {}", lines.join("\n      logged: "))
}

/// The server's error lines about background work (an invocation that failed).
fn logged_errors(s: &Server) -> String {
    let lines: Vec<String> = s
        .logs()
        .lines()
        .filter(|line| line.contains(r#""level":"ERROR""#) && line.contains("errorId"))
        .map(|line| preview(line.as_bytes()))
        .collect();
    match lines.last() {
        Some(last) => format!("\n      last logged: {last}"),
        None => String::new(),
    }
}

/// What became of a valid odd body: its answer and, for an accepted trigger, how the
/// invocation ended. An error when that invocation did not complete.
async fn outcome(s: &Server, flow: &str, reply: &Reply) -> Result<String, String> {
    let Some(id) = reply.body["data"]["triggeredFlows"][0]["flowInvocationId"].as_str() else {
        return Ok(format!(
            "answered {} {}",
            reply.status,
            preview(reply.text.as_bytes())
        ));
    };
    let path = format!("/v1/{}/action-flow/{flow}/invocations/{id}", s.env);
    let started = Instant::now();
    let mut last = Value::Null;
    while started.elapsed() < CARD_WITHIN {
        last = call(s, "GET", &path, Some(&s.admin_secret), None)
            .await
            .body["data"]
            .clone();
        if matches!(
            last["status"].as_str(),
            Some("completed" | "failed" | "cancelled")
        ) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let line = format!(
        "answered {}; the invocation: {} (usersTargeted {}, cardsCreated {}, errors {})",
        reply.status, last["status"], last["usersTargeted"], last["cardsCreated"], last["errors"]
    );
    if last["status"] == "completed" {
        Ok(line)
    } else {
        Err(format!(
            "accepted, but the invocation did not complete: {line}"
        ))
    }
}

/// The start of some bytes, printable.
fn preview(bytes: &[u8]) -> String {
    const SHOWN: usize = 300;
    let shown = bytes.get(..SHOWN).unwrap_or(bytes);
    let more = if bytes.len() > SHOWN {
        format!("… ({} bytes)", bytes.len())
    } else {
        String::new()
    };
    format!("{}{more}", shown.escape_ascii())
}

async fn hostile_bodies_are_refused_and_the_service_keeps_working(s: Server) {
    let backend = if s.database_url().starts_with("postgres") {
        "PostgreSQL"
    } else {
        "SQLite"
    };
    let corpus = corpus();
    let flow = published_flow(&s, false).await;
    let mut everyone: Vec<Value> = (0..=corpus.len())
        .map(|n| json!({"id": format!("probe-{n}"), "testUser": true}))
        .collect();
    everyone.push(json!({"id": "actor"}));
    users(&s, Value::Array(everyone)).await;
    // A card to act on, and a webhook subscription to recover.
    let fired = fire(
        &s,
        &flow,
        "start",
        json!({"flows": [{"target": {"type": "user", "targetUserIds": ["actor"]}}]}),
    )
    .await;
    finished(&s, &flow, &invocation_id(&fired)).await;
    let card = feed(&s, "actor").await.remove(0)["id"]
        .as_str()
        .expect("card id")
        .to_owned();
    let receiver = Receiver::start().await;
    let subscribed = call(
        &s,
        "POST",
        &format!("/v1/{}/webhook", s.env),
        Some(&s.admin_secret),
        Some(json!({"types": ["card-completed"], "url": receiver.url})),
    )
    .await;
    assert_eq!(subscribed.status, 201, "{}", subscribed.text);
    let ids = Ids {
        env: s.env.clone(),
        flow: flow.clone(),
        card,
        webhook: subscribed.body["data"]["id"]
            .as_str()
            .expect("webhook id")
            .to_owned(),
    };
    let client = reqwest::Client::builder()
        .timeout(ANSWER_WITHIN)
        .build()
        .expect("client");
    probe(&client, &s, &flow, 0)
        .await
        .expect("before the corpus, a /test trigger produces its card");

    let mut failures = Vec::new();
    let mut known = Vec::new();
    let mut notes = Vec::new();
    for (i, case) in corpus.iter().enumerate() {
        let path = ids.fill(case.path);
        let mut problems = Vec::new();
        match send(&client, &s, case, &path).await {
            Ok(reply) => {
                if let Err(wrong) = check(case.want, &reply) {
                    let logged = logged(&s, &reply).await;
                    problems.push(format!(
                        "{wrong}; wanted {:?}; answer: {} {}{logged}",
                        case.want,
                        reply.status,
                        preview(reply.text.as_bytes()),
                    ));
                } else if matches!(case.want, Want::Handled) {
                    match outcome(&s, &flow, &reply).await {
                        Ok(line) => notes.push(format!(
                            "{:?} {} {}: {line}",
                            case.name, case.method, case.path
                        )),
                        Err(wrong) => problems.push(format!("{wrong}{}", logged_errors(&s))),
                    }
                }
            }
            Err(e) => problems.push(e),
        }
        if let Err(e) = probe(&client, &s, &flow, i + 1).await {
            problems.push(format!("afterwards, {e}"));
        }
        let request = format!(
            "{:?}: {} {} (content type {:?}) body {}",
            case.name,
            case.method,
            case.path,
            case.content_type,
            preview(&case.body)
        );
        let known_failing = case
            .known_failing
            .filter(|(on, _)| *on == On::Both || backend == "PostgreSQL")
            .map(|(_, why)| why);
        match (problems.is_empty(), known_failing) {
            (false, None) => failures.push(format!("{request}\n    {}", problems.join("\n    "))),
            (false, Some(why)) => known.push(format!(
                "{request}\n    known: {why}\n    {}",
                problems.join("\n    ")
            )),
            (true, Some(why)) => {
                eprintln!("[{backend}] known-failing case passes now ({why}): {request}")
            }
            (true, None) => {}
        }
    }
    if s.logs().contains("panicked") {
        failures.push(format!("the server's log has a panic:\n{}", s.logs()));
    }
    for line in &notes {
        eprintln!("[{backend}] valid odd body: {line}");
    }
    for line in &known {
        eprintln!("[{backend}] known failing: {line}");
    }
    assert!(
        failures.is_empty(),
        "[{backend}] {} of {} hostile requests misbehaved:\n{}",
        failures.len(),
        corpus.len(),
        failures.join("\n")
    );
}

blackbox!(hostile_bodies_are_refused_and_the_service_keeps_working);
