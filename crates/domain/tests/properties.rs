//! Property tests (proptest) of the domain crate's public parsers and validators.
//!
//! The property common to all: no input makes them panic, and each answers either a value or
//! a non-empty list of problems (each with a message). Where the documentation promises more
//! (bounds of accepted values, the order of problems, what a renderer writes), that is checked
//! too. Inputs are arbitrary JSON (deeply nested, huge/negative/float numbers, long strings,
//! NUL, any unicode) and "almost valid" documents: the right shape with fuzzed fields.
//!
//! Failing cases found are kept below as plain `regression_*` tests with their minimal input.
//! Failures are not persisted to files (`failure_persistence: None`): proptest prints the
//! minimal input and its seed instead.

use std::collections::BTreeMap;

use chrono::{DateTime, Duration};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use serde_json::{json, Map, Value};
use workbench_domain::audience::filter::{Filter, MAX_CONDITIONS};
use workbench_domain::audience::EndUser;
use workbench_domain::bulk::{CsvHeader, UploadGrant};
use workbench_domain::cancel::CancelFilter;
use workbench_domain::card::content::CardContent;
use workbench_domain::flow::{config, values};
use workbench_domain::push::PlatformInput;
use workbench_domain::retry::RetryPolicy;
use workbench_domain::time::{
    checked_after, format_timestamp, in_range, latest, parse_timestamp, saturating_after, EARLIEST,
    MAX_DURATION,
};
use workbench_domain::trigger::request::{self, parse_duration, Payload, Target, VariableValue};
use workbench_domain::trigger::variables::{
    self, Platform, PlatformValues, ResolvedVariables, ViewTemplate,
};
use workbench_domain::webhook::SubscriptionRequest;
use workbench_domain::{DomainError, FieldError, Timestamp};

/// Cases per property: the whole file runs in a few seconds in a debug build. `PROPTEST_CASES`
/// overrides it for a longer run.
const CASES: u32 = 256;

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(CASES)
}

fn config_with(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        // Minimal failing inputs are kept as named tests in this file, not in a side file.
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// The latest instant, in milliseconds from the epoch (9999-12-31T23:59:59.999Z).
const LATEST_MS: i64 = 253_402_300_799_999;

// ---------------------------------------------------------------------------------------------
// Strategies: strings, numbers, arbitrary JSON.
// ---------------------------------------------------------------------------------------------

/// Words the parsers give meaning to, and some awkward text.
const KEYWORDS: &[&str] = &[
    "user",
    "segment",
    "tag",
    "allTestUsers",
    "filters",
    "all",
    "any",
    "eq",
    "neq",
    "in",
    "contains",
    "exists",
    "gt",
    "lt",
    "id",
    "testUser",
    "tags",
    "attributes.country",
    "attributes.",
    "card",
    "create-card",
    "string",
    "number",
    "date",
    "boolean",
    "event",
    "static",
    "script",
    "Web",
    "iOS",
    "Android",
    "true",
    "false",
    "%{name}",
    "%{assetv1:logo}",
    "%{",
    "}",
    "P1D",
    "PT30M",
    "2026-11-22T10:00:00.000Z",
    "\u{feff}",
    "\u{0}",
    "é",
    "😀",
    "\u{2028}",
    "a\"b\\c",
    " ",
    "\t\n\r",
];

/// Object keys the parsers look at.
const KEYS: &[&str] = &[
    "flows",
    "target",
    "payload",
    "type",
    "targetUserIds",
    "targetSegmentId",
    "tagName",
    "tag",
    "filter",
    "match",
    "conditions",
    "field",
    "op",
    "value",
    "variables",
    "cardOptions",
    "priority",
    "expires",
    "expiresInterval",
    "embargo",
    "targetStreamIds",
    "targetPlatforms",
    "Web",
    "iOS",
    "Android",
    "notificationDetail",
    "metadata",
    "flowInvocationId",
    "options",
    "strictVariables",
    "valueIos",
    "valueAndroid",
    "steps",
    "initialSteps",
    "id",
    "next",
    "properties",
    "cardTemplateId",
    "cardTemplates",
    "defaultView",
    "subviews",
    "notification",
    "content",
    "actions",
    "key",
    "attributes",
    "text",
    "src",
    "cardName",
    "delivery",
    "version",
    "source",
    "required",
    "default",
    "defaultFormatterOption",
    "defaultFormatter",
    "output",
];

fn chars_string(max: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(any::<char>(), 0..max).prop_map(|c| c.into_iter().collect())
}

/// Short strings: printable, any unicode (NUL included), keywords.
fn small_string() -> BoxedStrategy<String> {
    prop_oneof![
        3 => "[a-zA-Z0-9 _.:%{}|-]{0,12}",
        3 => chars_string(12),
        2 => prop::sample::select(KEYWORDS).prop_map(str::to_owned),
    ]
    .boxed()
}

/// Any string: short ones, long ones (to 6,000 characters), and timestamp- or duration-like.
fn arb_string() -> BoxedStrategy<String> {
    prop_oneof![
        6 => small_string(),
        1 => Just("\u{0}".to_owned()),
        1 => ("[ -~]{1,4}", 200usize..1_500).prop_map(|(s, n)| s.repeat(n)),
        1 => (any::<char>(), 1usize..3_000).prop_map(|(c, n)| std::iter::repeat_n(c,
            n).collect::<String>()),
        1 => rfc3339_like(),
        1 => iso_duration_like(),
    ]
    .boxed()
}

fn arb_key() -> BoxedStrategy<String> {
    prop_oneof![
        3 => prop::sample::select(KEYS).prop_map(str::to_owned),
        1 => small_string(),
    ]
    .boxed()
}

/// Numbers: any i64, u64 and finite f64, extremes, and small ones near the bounds parsers use.
fn arb_number() -> BoxedStrategy<Value> {
    prop_oneof![
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        // NaN and infinities are not JSON numbers: serde_json makes them null.
        any::<f64>().prop_map(Value::from),
        (-20i64..=20).prop_map(Value::from),
        (-20.0f64..20.0).prop_map(Value::from),
        prop::sample::select(vec![
            0.0,
            -0.0,
            1.0,
            1.5,
            10.0,
            10.5,
            1e300,
            -1e300,
            f64::MAX,
            f64::MIN,
            f64::MIN_POSITIVE,
            f64::EPSILON,
            5e-324,
        ])
        .prop_map(Value::from),
        Just(Value::from(u64::MAX)),
        Just(Value::from(i64::MIN)),
    ]
    .boxed()
}

fn arb_scalar() -> BoxedStrategy<Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        arb_number(),
        arb_string().prop_map(Value::String),
    ]
    .boxed()
}

/// Arbitrary JSON: up to 8 levels, arrays and objects of up to 8 entries.
fn arb_json() -> BoxedStrategy<Value> {
    arb_scalar()
        .prop_recursive(8, 96, 8, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
                prop::collection::vec((arb_key(), inner), 0..8)
                    .prop_map(|entries| Value::Object(entries.into_iter().collect())),
            ]
        })
        .boxed()
}

/// `value` wrapped in arrays and objects, outermost last.
fn wrap(mut value: Value, wraps: Vec<(bool, String)>) -> Value {
    for (array, key) in wraps {
        value = if array {
            Value::Array(vec![value])
        } else {
            Value::Object(Map::from_iter([(key, value)]))
        };
    }
    value
}

/// Arbitrary JSON nested up to 160 levels deep (past the 128 serde_json's parser allows).
fn deep_json() -> BoxedStrategy<Value> {
    (
        arb_json(),
        prop::collection::vec((any::<bool>(), arb_key()), 0..160),
    )
        .prop_map(|(value, wraps)| wrap(value, wraps))
        .boxed()
}

fn any_json() -> BoxedStrategy<Value> {
    prop_oneof![4 => arb_json(), 1 => deep_json()].boxed()
}

/// An object of the given optional entries.
fn object(entries: Vec<(&str, Option<Value>)>) -> Value {
    Value::Object(
        entries
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| (k.to_owned(), v)))
            .collect(),
    )
}

fn some<T: std::fmt::Debug>(s: impl Strategy<Value = T>) -> impl Strategy<Value = Option<T>> {
    prop::option::weighted(0.8, s)
}

fn rarely<T: std::fmt::Debug>(s: impl Strategy<Value = T>) -> impl Strategy<Value = Option<T>> {
    prop::option::weighted(0.1, s)
}

// ---------------------------------------------------------------------------------------------
// Strategies: timestamps and durations as text.
// ---------------------------------------------------------------------------------------------

fn two_digits(max: u32) -> BoxedStrategy<String> {
    prop_oneof![
        6 => (0..=max).prop_map(|n| format!("{n:02}")),
        1 => "[0-9]{0,3}",
    ]
    .boxed()
}

/// RFC 3339-like text: mostly well formed, with years from 0000 to +201894, every field one
/// past its range, fractions of any length and offsets to ±25:60.
fn rfc3339_like() -> BoxedStrategy<String> {
    let year = prop_oneof![
        4 => (1970u32..=9999).prop_map(|y| format!("{y:04}")),
        3 => prop::sample::select(vec![
            "0000", "0001", "1969", "1970", "9999", "10000", "+201894", "-0001", "+10000",
            "99999", "275760", "262143", "-262144", "2026", "999", "",
        ])
        .prop_map(str::to_owned),
        1 => "[0-9+-]{0,7}",
    ];
    let fraction = prop_oneof![
        Just(String::new()),
        "\\.[0-9]{1,3}",
        "\\.[0-9]{0,15}",
        Just(".".to_owned()),
    ];
    let offset = prop_oneof![
        3 => Just("Z".to_owned()),
        1 => Just("z".to_owned()),
        1 => Just(String::new()),
        3 => (prop::sample::select(vec!["+", "-"]), two_digits(25), two_digits(60))
            .prop_map(|(sign, h, m)| format!("{sign}{h}:{m}")),
        1 => prop::sample::select(vec!["-23:59", "+23:59", "+24:00", "-00:00", "+0100", "+01"])
            .prop_map(str::to_owned),
    ];
    let separator = prop::sample::select(vec!["T", "T", "T", "t", " ", "_", ""]);
    (
        year,
        two_digits(13),
        two_digits(32),
        separator,
        two_digits(25),
        two_digits(61),
        two_digits(61),
        fraction,
        offset,
    )
        .prop_map(|(y, mo, d, sep, h, mi, s, f, o)| format!("{y}-{mo}-{d}{sep}{h}:{mi}:{s}{f}{o}"))
        .boxed()
}

/// A number as an ISO 8601 duration writes it: small, huge (to 25 digits), with a fraction,
/// or missing.
fn duration_number() -> BoxedStrategy<String> {
    prop_oneof![
        4 => (0u64..100).prop_map(|n| n.to_string()),
        1 => any::<u64>().prop_map(|n| n.to_string()),
        1 => "[0-9]{1,25}",
        1 => "[0-9]{0,3}\\.[0-9]{0,10}",
        1 => Just(String::new()),
    ]
    .boxed()
}

/// ISO 8601 duration-like text: `P`, date parts, `T`, time parts, units in or out of order.
fn iso_duration_like() -> BoxedStrategy<String> {
    let date_unit = prop::sample::select(vec!['Y', 'M', 'W', 'D', 'H', 'S', 'X']);
    let time_unit = prop::sample::select(vec!['H', 'M', 'S', 'D', 'Y']);
    (
        prop::sample::select(vec!["P", "P", "P", "P", "p", "", "-P", "PP"]),
        prop::collection::vec((duration_number(), date_unit), 0..5),
        prop::option::of(prop::collection::vec((duration_number(), time_unit), 0..4)),
    )
        .prop_map(|(prefix, date, time)| {
            let mut s = prefix.to_owned();
            for (n, u) in date {
                s.push_str(&n);
                s.push(u);
            }
            if let Some(time) = time {
                s.push('T');
                for (n, u) in time {
                    s.push_str(&n);
                    s.push(u);
                }
            }
            s
        })
        .boxed()
}

/// Durations the brief and the contract name, in and out of bounds.
const SPECIAL_DURATIONS: &[&str] = &[
    "P290000Y",
    "P99999999999999999999Y",
    "PT0.0000001S",
    "P1.5Y",
    "P36525D",
    "P36526D",
    "P100Y",
    "P101Y",
    "PT0S",
    "P0D",
    "PT0.0004S",
    "PT0.0005S",
    "P1DT12H",
    "PT30M",
    "P",
    "PT",
    "P1YT",
    "-P1D",
    "P-1D",
    "P1W1D",
    "P1M1Y",
    "P292471208Y",
    "P106751991167300D",
    "PT9223372036854775807S",
    "PT9223372036854775.807S",
    "PT9223372036854775.8075S",
    "P0.5D",
    "PT1.S",
    "PT.5S",
    "PT1..5S",
    "P1DT",
    "P1Y2M3W4DT5H6M7.0089S",
];

// ---------------------------------------------------------------------------------------------
// Strategies: "almost valid" trigger requests.
// ---------------------------------------------------------------------------------------------

fn string_or_json() -> BoxedStrategy<Value> {
    prop_oneof![
        4 => arb_string().prop_map(Value::String),
        1 => arb_json(),
    ]
    .boxed()
}

fn user_id() -> BoxedStrategy<Value> {
    prop_oneof![
        6 => "[a-z0-9_-]{1,10}".prop_map(Value::from),
        1 => Just(Value::from("")),
        1 => (254usize..258).prop_map(|n| Value::from("u".repeat(n))),
        1 => "[a-z]{0,3}[\\x00-\\x1F\\x7F-\\x{9F}][a-z]{0,3}".prop_map(Value::from),
        1 => arb_json(),
    ]
    .boxed()
}

fn near_condition() -> BoxedStrategy<Value> {
    let field = prop_oneof![
        6 => prop::sample::select(vec![
            "id",
            "testUser",
            "tags",
            "attributes.country",
            "attributes.age",
            "attributes.",
            "attributes.a.b",
            "name",
            "",
        ])
        .prop_map(Value::from),
        1 => arb_json(),
    ];
    let op = prop_oneof![
        6 => prop::sample::select(vec![
            "eq", "neq", "in", "contains", "exists", "gt", "lt", "like", "EQ", "",
        ])
        .prop_map(Value::from),
        1 => arb_json(),
    ];
    let value = prop_oneof![
        4 => arb_scalar(),
        2 => prop::collection::vec(arb_scalar(), 0..4).prop_map(Value::Array),
        1 => arb_json(),
    ];
    (some(field), some(op), some(value))
        .prop_map(|(field, op, value)| object(vec![("field", field), ("op", op), ("value", value)]))
        .boxed()
}

fn near_filter() -> BoxedStrategy<Value> {
    let matching = prop_oneof![
        3 => prop::sample::select(vec!["all", "any", "some", ""]).prop_map(Value::from),
        1 => arb_json(),
    ];
    let conditions = prop_oneof![
        8 => prop::collection::vec(near_condition(), 0..6).prop_map(Value::Array),
        1 => (48usize..=53).prop_map(|n| {
            Value::Array(vec![json!({"field": "tags", "op": "exists"}); n])
        }),
        1 => arb_json(),
    ];
    prop_oneof![
        9 => (prop::option::of(matching), some(conditions))
            .prop_map(|(m, c)| object(vec![("match", m), ("conditions", c)])),
        1 => arb_json(),
    ]
    .boxed()
}

fn near_target() -> BoxedStrategy<Value> {
    prop_oneof![
        3 => prop::collection::vec(user_id(), 0..6)
            .prop_map(|ids| json!({"type": "user", "targetUserIds": ids})),
        1 => string_or_json().prop_map(|s| json!({"type": "segment", "targetSegmentId": s})),
        1 => Just(json!({"type": "segment"})),
        1 => (any::<bool>(), string_or_json()).prop_map(|(long, s)| match long {
            true => json!({"type": "tag", "tagName": s}),
            false => json!({"type": "tag", "tag": s}),
        }),
        1 => Just(json!({"type": "allTestUsers"})),
        2 => near_filter().prop_map(|f| json!({"type": "filters", "filter": f})),
        1 => Just(json!({"type": "filters"})),
        1 => (string_or_json(), arb_json())
            .prop_map(|(t, v)| json!({"type": t, "targetUserIds": v, "filter": v})),
        1 => arb_json(),
    ]
    .boxed()
}

fn timestamp_value() -> BoxedStrategy<Value> {
    prop_oneof![
        6 => rfc3339_like().prop_map(Value::String),
        1 => arb_string().prop_map(Value::String),
        1 => arb_json(),
    ]
    .boxed()
}

fn interval_value() -> BoxedStrategy<Value> {
    prop_oneof![
        5 => iso_duration_like().prop_map(Value::String),
        3 => prop::sample::select(SPECIAL_DURATIONS).prop_map(Value::from),
        1 => arb_string().prop_map(Value::String),
        1 => arb_json(),
    ]
    .boxed()
}

fn near_card_options() -> BoxedStrategy<Value> {
    let priority = prop_oneof![
        4 => (-1i64..=12).prop_map(Value::from),
        2 => arb_number(),
        1 => prop::sample::select(vec![json!("5"), json!(5.0), json!(1e0), json!(true)]),
        1 => arb_json(),
    ];
    let streams = prop_oneof![
        4 => prop::collection::vec(
            prop_oneof![3 => "[a-z0-9]{0,6}".prop_map(Value::from), 1 => arb_json()],
            0..4,
        )
        .prop_map(Value::Array),
        1 => arb_json(),
    ];
    let platforms = prop_oneof![
        4 => prop::collection::vec(
            (
                prop::sample::select(vec!["Web", "iOS", "Android", "web", "Windows"]),
                prop_oneof![4 => any::<bool>().prop_map(Value::Bool), 1 => arb_json()],
            ),
            0..4,
        )
        .prop_map(|entries| {
            Value::Object(entries.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
        }),
        1 => arb_json(),
    ];
    let options = (
        prop::option::weighted(0.6, priority),
        prop::option::weighted(0.6, timestamp_value()),
        prop::option::weighted(0.6, timestamp_value()),
        prop::option::weighted(0.7, interval_value()),
        prop::option::weighted(0.3, streams),
        prop::option::weighted(0.3, platforms),
        rarely((arb_key(), arb_json())),
    )
        .prop_map(
            |(priority, expires, embargo, interval, streams, platforms, extra)| {
                let mut options = object(vec![
                    ("priority", priority),
                    ("expires", expires),
                    ("embargo", embargo),
                    ("expiresInterval", interval),
                    ("targetStreamIds", streams),
                    ("targetPlatforms", platforms),
                ]);
                if let (Some((k, v)), Value::Object(map)) = (extra, &mut options) {
                    map.insert(k, v);
                }
                options
            },
        );
    prop_oneof![9 => options, 1 => arb_json()].boxed()
}

fn near_variable() -> BoxedStrategy<Value> {
    prop_oneof![
        4 => arb_scalar(),
        3 => (some(arb_scalar()), rarely(arb_json()), rarely(arb_json()),
            prop::option::weighted(0.3, arb_scalar()))
            .prop_map(|(value, ios, android, ios_scalar)| {
                object(vec![
                    ("value", value),
                    ("valueIos", ios.or(ios_scalar)),
                    ("valueAndroid", android),
                ])
            }),
        1 => arb_json(),
    ]
    .boxed()
}

fn near_payload() -> BoxedStrategy<Value> {
    let variables = prop_oneof![
        6 => prop::collection::vec(
            (
                prop_oneof![
                    3 => prop::sample::select(VAR_NAMES).prop_map(str::to_owned),
                    1 => small_string(),
                ],
                near_variable(),
            ),
            0..5,
        )
        .prop_map(|entries| Value::Object(entries.into_iter().collect())),
        1 => arb_json(),
    ];
    let detail = prop_oneof![
        3 => prop::collection::vec((small_string(), arb_scalar()), 0..4)
            .prop_map(|entries| Value::Object(entries.into_iter().collect())),
        // Around the 2,048-byte limit.
        1 => (2_030usize..2_060).prop_map(|n| json!({"b": "x".repeat(n)})),
        1 => arb_json(),
    ];
    let payload = (
        prop::option::weighted(0.7, variables),
        prop::option::weighted(0.8, near_card_options()),
        prop::option::weighted(0.3, detail),
        prop::option::weighted(0.3, arb_json()),
    )
        .prop_map(|(variables, options, detail, metadata)| {
            object(vec![
                ("variables", variables),
                ("cardOptions", options),
                ("notificationDetail", detail),
                ("metadata", metadata),
            ])
        });
    prop_oneof![9 => payload, 1 => arb_json()].boxed()
}

fn invocation_id() -> BoxedStrategy<Value> {
    prop_oneof![
        4 => "[a-z0-9-]{1,10}".prop_map(Value::from),
        2 => Just(Value::from("dup")),
        1 => (254usize..258).prop_map(|n| Value::from("i".repeat(n))),
        1 => prop::sample::select(vec!["", " ", "a\u{0}b", "\t"]).prop_map(Value::from),
        1 => arb_json(),
    ]
    .boxed()
}

fn near_element() -> BoxedStrategy<Value> {
    let element = (
        some(near_target()),
        prop::option::weighted(0.9, near_payload()),
        prop::option::weighted(0.5, invocation_id()),
        rarely((arb_key(), arb_json())),
    )
        .prop_map(|(target, payload, id, extra)| {
            let mut element = object(vec![
                ("target", target),
                ("payload", payload),
                ("flowInvocationId", id),
            ]);
            if let (Some((k, v)), Value::Object(map)) = (extra, &mut element) {
                map.entry(k).or_insert(v);
            }
            element
        });
    prop_oneof![9 => element, 1 => arb_json()].boxed()
}

fn near_request() -> BoxedStrategy<Value> {
    let options = prop_oneof![
        3 => prop_oneof![any::<bool>().prop_map(Value::Bool), Just(Value::Null), arb_json()]
            .prop_map(|s| json!({"strictVariables": s})),
        1 => arb_json(),
    ];
    let flows = prop_oneof![
        12 => prop::collection::vec(near_element(), 1..4).prop_map(Value::Array),
        1 => Just(json!([])),
        1 => arb_json(),
    ];
    (some(flows), prop::option::weighted(0.3, options))
        .prop_map(|(flows, options)| object(vec![("flows", flows), ("options", options)]))
        .boxed()
}

// ---------------------------------------------------------------------------------------------
// Strategies: flow configurations and templates.
// ---------------------------------------------------------------------------------------------

const STEP_IDS: &[&str] = &["s1", "s2", "s3", "a b", "", "é"];
const TEMPLATE_IDS: &[&str] = &["welcome", "reminder", "t 3", ""];
const VAR_NAMES: &[&str] = &["firstName", "amount", "due", "name", " name ", "a}b", ""];

/// Template text: plain text and `%{...}` fragments, whole, broken, empty or nested.
fn template_text() -> BoxedStrategy<String> {
    prop::collection::vec(
        prop_oneof![
            3 => "[a-zA-Z ]{0,6}",
            3 => prop::sample::select(VAR_NAMES).prop_map(|n| format!("%{{{n}}}")),
            1 => small_string().prop_map(|n| format!("%{{{n}}}")),
            1 => prop::sample::select(vec![
                "%{", "}", "%{}", "%{ }", "%{assetv1:logo}", "%{ assetv1: }", "%{assetv1:}",
                "%", "{", "%{%{", "}}", "\"", "\\", "\u{0}", "\n", "é", "😀",
            ])
            .prop_map(str::to_owned),
            1 => small_string(),
        ],
        0..8,
    )
    .prop_map(|parts| parts.concat())
    .boxed()
}

/// JSON whose strings are template text.
fn template_json() -> BoxedStrategy<Value> {
    let leaf = prop_oneof![
        6 => template_text().prop_map(Value::String),
        1 => arb_scalar(),
    ];
    leaf.prop_recursive(4, 32, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec(
                (prop_oneof![3 => arb_key(), 1 => template_text()], inner),
                0..5
            )
            .prop_map(|entries| Value::Object(entries.into_iter().collect())),
        ]
    })
    .boxed()
}

fn date_text() -> BoxedStrategy<String> {
    prop_oneof![
        "[0-9]{1,4}/[0-9]{1,2}/[0-9]{2,4}( [0-9]{1,2}:[0-9]{2}( ?[AaPp][Mm])?)?",
        rfc3339_like(),
    ]
    .boxed()
}

fn variable_definition() -> BoxedStrategy<Value> {
    let types = prop_oneof![
        6 => prop::sample::select(vec!["number", "string", "date",
            "boolean"]).prop_map(Value::from),
        1 => arb_json(),
    ];
    let sources = prop_oneof![
        4 => prop::sample::select(vec!["event", "static", "script", "api"]).prop_map(Value::from),
        1 => arb_json(),
    ];
    let default = prop_oneof![
        3 => arb_scalar(),
        1 => prop::sample::select(vec!["true", "false", "1.5", " 7 ", "NaN", "inf", "1e999"])
            .prop_map(Value::from),
        2 => date_text().prop_map(Value::String),
        1 => arb_json(),
    ];
    let pattern = prop_oneof![
        4 => prop::sample::select(vec![
            "dd/MM/yyyy",
            "yyyy-MM-dd HH:mm a",
            "d/M/y h:m:s a",
            "SSS",
            "a",
            "",
            "yyyyyyyyyyyyyyyyyyyyyyyy",
        ])
        .prop_map(Value::from),
        1 => small_string().prop_map(Value::String),
        1 => arb_json(),
    ];
    let definition = (
        prop::option::weighted(0.9, types),
        prop::option::weighted(0.5, sources),
        prop::option::weighted(0.6, default),
        prop::option::weighted(
            0.3,
            prop_oneof![3 => any::<bool>().prop_map(Value::Bool), 1 => arb_json()],
        ),
        prop::option::weighted(0.3, pattern),
        rarely(arb_json()),
    )
        .prop_map(|(t, source, default, required, pattern, formatter)| {
            object(vec![
                ("type", t),
                ("source", source),
                ("default", default),
                ("required", required),
                ("defaultFormatterOption", pattern),
                ("defaultFormatter", formatter),
            ])
        });
    prop_oneof![9 => definition, 1 => arb_json()].boxed()
}

fn variable_definitions() -> BoxedStrategy<Value> {
    prop_oneof![
        6 => prop::collection::vec(
            (
                prop_oneof![4 => prop::sample::select(VAR_NAMES).prop_map(str::to_owned),
                    1 => small_string()],
                variable_definition(),
            ),
            0..4,
        )
        .prop_map(|entries| Value::Object(entries.into_iter().collect())),
        1 => arb_json(),
    ]
    .boxed()
}

fn view_element() -> BoxedStrategy<Value> {
    let key = prop_oneof![
        6 => prop::sample::select(vec!["k1", "k2", "k3", ""]).prop_map(Value::from),
        1 => arb_json(),
    ];
    let element_type = prop_oneof![
        6 => prop::sample::select(vec!["headline", "text", "image", "submitButton",
            "futureElement"])
            .prop_map(Value::from),
        1 => arb_json(),
    ];
    let attributes = prop_oneof![
        4 => (
            prop::option::weighted(0.7, template_text().prop_map(Value::String)),
            prop::option::weighted(0.3, template_text().prop_map(Value::String)),
            prop::option::weighted(0.3, template_json()),
        )
            .prop_map(|(text, src, values)| {
                object(vec![("text", text), ("src", src), ("values", values)])
            }),
        1 => template_json(),
        1 => arb_json(),
    ];
    prop_oneof![
        9 => (some(key), some(element_type), some(attributes)).prop_map(|(k, t, a)| {
            object(vec![("key", k), ("type", t), ("attributes", a)])
        }),
        1 => arb_json(),
    ]
    .boxed()
}

fn view() -> BoxedStrategy<Value> {
    let list = || {
        prop_oneof![
            6 => prop::collection::vec(view_element(), 0..4).prop_map(Value::Array),
            1 => arb_json(),
        ]
    };
    prop_oneof![
        9 => (some(list()), prop::option::weighted(0.5, list()))
            .prop_map(|(content, actions)| object(vec![("content", content), ("actions",
                actions)])),
        1 => arb_json(),
    ]
    .boxed()
}

fn card_template() -> BoxedStrategy<Value> {
    let name = prop_oneof![
        6 => template_text().prop_map(Value::String),
        1 => prop::sample::select(vec!["", "  ", "Welcome"]).prop_map(Value::from),
        1 => arb_json(),
    ];
    let priority = prop_oneof![
        4 => (-1i64..=12).prop_map(Value::from),
        1 => arb_number(),
        1 => arb_json(),
    ];
    let metadata = prop_oneof![
        9 => (
            some(name),
            rarely(arb_json()),
            prop::option::weighted(0.4, priority.prop_map(|p| json!({"priority": p}))),
        )
            .prop_map(|(name, description, delivery)| {
                object(vec![
                    ("cardName", name),
                    ("cardDescription", description),
                    ("delivery", delivery),
                ])
            }),
        1 => arb_json(),
    ];
    let subviews = prop_oneof![
        4 => prop::collection::vec((small_string(), view()), 0..3)
            .prop_map(|entries| Value::Object(entries.into_iter().collect())),
        1 => arb_json(),
    ];
    let notification = prop_oneof![
        4 => template_json().prop_map(|v| json!({"attributes": {"body": v}})),
        1 => template_json(),
    ];
    prop_oneof![
        9 => (
            some(metadata),
            prop::option::weighted(0.5, variable_definitions()),
            some(view()),
            prop::option::weighted(0.3, subviews),
            prop::option::weighted(0.4, notification),
        )
            .prop_map(|(metadata, variables, default_view, subviews, notification)| {
                object(vec![
                    ("metadata", metadata),
                    ("variables", variables),
                    ("defaultView", default_view),
                    ("subviews", subviews),
                    ("notification", notification),
                ])
            }),
        1 => arb_json(),
    ]
    .boxed()
}

fn step_id() -> BoxedStrategy<String> {
    prop_oneof![
        6 => prop::sample::select(STEP_IDS).prop_map(str::to_owned),
        1 => small_string(),
    ]
    .boxed()
}

fn near_step() -> BoxedStrategy<(String, Value)> {
    let own_id = prop_oneof![
        6 => Just(None),
        1 => step_id().prop_map(|s| Some(Value::String(s))),
        1 => arb_json().prop_map(Some),
    ];
    let step_type = prop_oneof![
        6 => Just(Value::from("create-card")),
        1 => prop::sample::select(vec!["send-email", "", "Create-Card"]).prop_map(Value::from),
        1 => arb_json(),
    ];
    let next = prop_oneof![
        6 => prop::collection::vec(
            prop_oneof![6 => step_id().prop_map(Value::String), 1 => arb_json()],
            0..3,
        )
        .prop_map(Value::Array),
        1 => arb_json(),
    ];
    let template_id = prop_oneof![
        6 => prop::sample::select(TEMPLATE_IDS).prop_map(Value::from),
        1 => arb_json(),
    ];
    let properties = prop_oneof![
        6 => (some(template_id), rarely(prop_oneof![
            Just(json!({"type": "default"})),
            arb_json().prop_map(|t| json!({"type": t})),
            arb_json(),
        ]))
            .prop_map(|(id, output)| object(vec![("cardTemplateId", id), ("output", output)])),
        1 => arb_json(),
    ];
    (
        step_id(),
        prop::option::weighted(0.9, own_id),
        prop::option::weighted(0.95, step_type),
        prop::option::weighted(0.7, next),
        prop::option::weighted(0.9, properties),
        prop::bool::weighted(0.05),
        arb_json(),
    )
        .prop_map(|(id, own, step_type, next, properties, junk, json)| {
            let step = if junk {
                json
            } else {
                let own = match own {
                    Some(None) => Some(Value::String(id.clone())),
                    Some(Some(other)) => Some(other),
                    None => None,
                };
                object(vec![
                    ("id", own),
                    ("type", step_type),
                    ("next", next),
                    ("properties", properties),
                ])
            };
            (id, step)
        })
        .boxed()
}

fn near_flow_config() -> BoxedStrategy<Value> {
    let kind = prop_oneof![
        8 => Just(Value::from("card")),
        1 => prop::sample::select(vec!["Card", "", "email"]).prop_map(Value::from),
        1 => arb_json(),
    ];
    let version = prop_oneof![
        4 => "[0-9.]{1,4}".prop_map(Value::from),
        1 => arb_json(),
    ];
    let steps = prop_oneof![
        8 => prop::collection::vec(near_step(), 0..5)
            .prop_map(|steps| Value::Object(steps.into_iter().collect())),
        1 => arb_json(),
    ];
    let initial = prop_oneof![
        8 => prop::collection::vec(
            prop_oneof![8 => step_id().prop_map(Value::String), 1 => arb_json()],
            0..3,
        )
        .prop_map(Value::Array),
        1 => arb_json(),
    ];
    let templates = prop_oneof![
        8 => prop::collection::vec(
            (
                prop_oneof![
                    6 => prop::sample::select(TEMPLATE_IDS).prop_map(str::to_owned),
                    1 => small_string(),
                ],
                card_template(),
            ),
            0..3,
        )
        .prop_map(|entries| Value::Object(entries.into_iter().collect())),
        1 => arb_json(),
    ];
    prop_oneof![
        12 => (
            prop::option::weighted(0.95, kind),
            prop::option::weighted(0.5, version),
            prop::option::weighted(0.6, variable_definitions()),
            prop::option::weighted(0.95, steps),
            prop::option::weighted(0.9, initial),
            prop::option::weighted(0.9, templates),
            rarely((arb_key(), arb_json())),
        )
            .prop_map(|(kind, version, variables, steps, initial, templates, extra)| {
                let mut config = object(vec![
                    ("type", kind),
                    ("version", version),
                    ("variables", variables),
                    ("steps", steps),
                    ("initialSteps", initial),
                    ("cardTemplates", templates),
                ]);
                if let (Some((k, v)), Value::Object(map)) = (extra, &mut config) {
                    map.entry(k).or_insert(v);
                }
                config
            }),
        1 => any_json(),
    ]
    .boxed()
}

/// A valid configuration (the one of the crate's own tests).
fn valid_flow_config() -> Value {
    json!({
        "type": "card",
        "version": "1",
        "initialSteps": ["s1"],
        "variables": {
            "firstName": {"type": "string", "source": "event", "default": "there",
                "required": true},
            "due": {"type": "date", "source": "event", "default": "2026-12-01T00:00:00Z"}
        },
        "steps": {
            "s1": {"id": "s1", "type": "create-card", "next": ["s2"],
                   "properties": {"cardTemplateId": "welcome", "output": {"type": "default"}}},
            "s2": {"id": "s2", "type": "create-card", "next": [],
                   "properties": {"cardTemplateId": "reminder"}}
        },
        "cardTemplates": {
            "welcome": {
                "metadata": {"cardName": "Welcome", "delivery": {"priority": 5}},
                "variables": {"amount": {"type": "number", "source": "static", "default": 10}},
                "defaultView": {
                    "content": [
                        {"key": "h1", "type": "headline",
                            "attributes": {"text": "Hello %{firstName}"}},
                        {"key": "img", "type": "image", "attributes": {"src": "%{assetv1:logo}"}},
                        {"key": "t1", "type": "text",
                            "attributes": {"text": "You owe %{amount} by %{due}"}}
                    ],
                    "actions": [{"key": "go", "type": "submitButton", "attributes": {"text": "OK"}}]
                },
                "notification": {"attributes": {"body": "Hi %{firstName}"}}
            },
            "reminder": {"metadata": {"cardName": "Reminder"}}
        }
    })
}

/// A valid configuration with one leaf replaced (by JSON pointer) or, for null, removed.
fn mutated_flow_config() -> BoxedStrategy<Value> {
    let pointers = prop::sample::select(vec![
        "/type",
        "/version",
        "/initialSteps",
        "/initialSteps/0",
        "/variables/firstName",
        "/variables/firstName/type",
        "/variables/firstName/default",
        "/variables/firstName/required",
        "/variables/due/default",
        "/steps",
        "/steps/s1",
        "/steps/s1/id",
        "/steps/s1/next",
        "/steps/s1/next/0",
        "/steps/s2/next",
        "/steps/s1/properties",
        "/steps/s1/properties/cardTemplateId",
        "/steps/s1/properties/output",
        "/cardTemplates",
        "/cardTemplates/welcome",
        "/cardTemplates/welcome/metadata",
        "/cardTemplates/welcome/metadata/cardName",
        "/cardTemplates/welcome/metadata/delivery/priority",
        "/cardTemplates/welcome/defaultView",
        "/cardTemplates/welcome/defaultView/content",
        "/cardTemplates/welcome/defaultView/content/0",
        "/cardTemplates/welcome/defaultView/content/0/key",
        "/cardTemplates/welcome/defaultView/content/1/type",
        "/cardTemplates/welcome/defaultView/content/2/attributes",
        "/cardTemplates/welcome/defaultView/content/2/attributes/text",
        "/cardTemplates/welcome/defaultView/actions/0",
        "/cardTemplates/welcome/notification",
        "/cardTemplates/welcome/variables/amount/default",
    ]);
    let replacement = prop_oneof![
        2 => template_text().prop_map(Value::String),
        2 => step_id().prop_map(|s| json!([s])),
        1 => Just(Value::Null),
        1 => Just(json!(["s1"])),
        1 => Just(json!(["s2", "s1"])),
        1 => any_json(),
    ];
    prop::collection::vec((pointers, replacement), 1..4)
        .prop_map(|changes| {
            let mut config = valid_flow_config();
            for (pointer, value) in changes {
                let Some((parent, key)) = pointer.rsplit_once('/') else {
                    continue;
                };
                match config.pointer_mut(parent) {
                    Some(Value::Object(map)) if value.is_null() => {
                        map.remove(key);
                    }
                    Some(Value::Object(map)) => {
                        map.insert(key.to_owned(), value);
                    }
                    Some(Value::Array(items)) => {
                        if let Some(slot) = key.parse::<usize>().ok().and_then(|i| items.get_mut(i))
                        {
                            *slot = value;
                        }
                    }
                    _ => {}
                }
            }
            config
        })
        .boxed()
}

fn resolved_variables() -> BoxedStrategy<ResolvedVariables> {
    let value = || prop_oneof![3 => small_string(), 1 => arb_string()];
    prop::collection::btree_map(
        prop_oneof![
            4 => prop::sample::select(VAR_NAMES).prop_map(str::to_owned),
            1 => small_string(),
        ],
        prop_oneof![
            3 => value().prop_map(|v| PlatformValues { web: v.clone(), ios: v.clone(),
                android: v }),
            1 => (value(), value(), value()).prop_map(|(web, ios, android)| PlatformValues { web,
                ios, android }),
        ],
        0..5,
    )
    .prop_map(|values| ResolvedVariables { values })
    .boxed()
}

fn platform() -> impl Strategy<Value = Platform> {
    prop::sample::select(vec![Platform::Web, Platform::Ios, Platform::Android])
}

// ---------------------------------------------------------------------------------------------
// Checks.
// ---------------------------------------------------------------------------------------------

/// A list of problems: not empty, every one with a message.
fn check_problems(problems: &[FieldError]) -> Result<(), TestCaseError> {
    prop_assert!(!problems.is_empty(), "an error without problems");
    for p in problems {
        prop_assert!(!p.message.is_empty(), "a problem without a message: {p:?}");
    }
    Ok(())
}

/// What every accepted request promises (contract §4, §10).
fn check_request(body: &Value, parsed: &request::TriggerRequest) -> Result<(), TestCaseError> {
    let items = body["flows"].as_array().map_or(0, Vec::len);
    prop_assert_eq!(parsed.flows.len(), items);
    prop_assert!((1..=request::MAX_FLOW_ELEMENTS).contains(&parsed.flows.len()));
    let mut ids = std::collections::HashSet::new();
    for element in &parsed.flows {
        match &element.target {
            Target::Users(users) => {
                prop_assert!(!users.is_empty() && users.len() <= request::MAX_TARGET_USERS);
                prop_assert!(
                    users.windows(2).all(|w| w[0] < w[1]),
                    "sorted, no duplicates"
                );
                for u in users {
                    prop_assert!(!u.is_empty() && !u.chars().any(char::is_control));
                }
            }
            Target::Segment(s) | Target::Tag(s) => prop_assert!(!s.is_empty()),
            Target::AllTestUsers => {}
            Target::Filters(f) => {
                prop_assert!((1..=MAX_CONDITIONS).contains(&f.conditions.len()))
            }
        }
        if let Some(id) = &element.invocation_id {
            prop_assert!(ids.insert(id.clone()), "invocation ids are unique: {id:?}");
            prop_assert!(!id.trim().is_empty() && id.chars().count() <= 255);
        }
        let options = &element.payload.card_options;
        if let Some(p) = options.priority {
            prop_assert!((1..=10).contains(&p));
        }
        for t in [options.expires, options.embargo].into_iter().flatten() {
            prop_assert!(in_range(&t), "accepted instant out of range: {t:?}");
        }
        if let Some(d) = options.expires_interval {
            prop_assert!(d > Duration::zero(), "accepted interval {d:?}");
            prop_assert!(d <= MAX_DURATION, "accepted interval {d:?} > MAX_DURATION");
            if let Some(embargo) = options.embargo {
                prop_assert!(checked_after(embargo, d).is_some());
            }
        }
        if let (Some(embargo), Some(expires)) = (options.embargo, options.expires) {
            prop_assert!(expires > embargo);
        }
        let fingerprint = workbench_domain::trigger::fingerprint(element);
        prop_assert!(
            fingerprint.len() == 32
                && fingerprint
                    .bytes()
                    .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()),
            "{fingerprint}"
        );
        if let Some(detail) = &element.payload.notification_detail {
            let size = Value::Object(detail.clone()).to_string().len();
            prop_assert!(size <= request::MAX_NOTIFICATION_DETAIL_BYTES);
        }
    }
    Ok(())
}

/// `parse`, `parse_drafts` and (for each element) `parse_element` agree, and keep their
/// promises.
fn check_trigger(body: &Value) -> Result<(), TestCaseError> {
    let parsed = request::parse(body);
    let drafts = request::parse_drafts(body);
    match (&parsed, &drafts) {
        (Ok(a), Ok(b)) => {
            prop_assert_eq!(a, b);
            check_request(body, a)?;
        }
        (Err(problems), Err(rejected)) => {
            check_problems(problems)?;
            prop_assert_eq!(problems, &rejected.problems);
            for p in problems {
                prop_assert!(
                    p.field.is_empty()
                        || p.field.starts_with("flows")
                        || p.field.starts_with("options"),
                    "a problem outside the request: {p:?}"
                );
            }
            // A draft per element when `flows` is an array of 1 to 1,000 elements.
            match body.get("flows") {
                Some(Value::Array(items))
                    if body.is_object()
                        && (1..=request::MAX_FLOW_ELEMENTS).contains(&items.len()) =>
                {
                    prop_assert_eq!(rejected.drafts.len(), items.len())
                }
                _ => prop_assert!(rejected.drafts.is_empty()),
            }
        }
        _ => prop_assert!(
            false,
            "parse and parse_drafts disagree: {parsed:?} / {drafts:?}"
        ),
    }
    if let Some(Value::Array(items)) = body.get("flows") {
        for item in items.iter().take(4) {
            match request::parse_element(item.clone()) {
                Ok(element) => {
                    // The element alone is a valid request.
                    let alone = request::parse(&json!({ "flows": [item] }));
                    prop_assert_eq!(alone.map(|r| r.flows), Ok(vec![element]));
                }
                Err(problems) => {
                    check_problems(&problems)?;
                    for p in &problems {
                        prop_assert!(p.field.starts_with("flows[0]"), "{p:?}");
                    }
                    let alone = request::parse(&json!({ "flows": [item] }));
                    prop_assert!(alone.is_err(), "the element alone is accepted");
                }
            }
        }
    }
    Ok(())
}

/// A valid request of one `allTestUsers` element with these card options.
fn with_card_options(options: Value) -> Value {
    json!({"flows": [{"target": {"type": "allTestUsers"}, "payload": {"cardOptions": options}}]})
}

fn check_timestamp(text: &str) -> Result<(), TestCaseError> {
    match parse_timestamp(text) {
        Ok(t) => {
            prop_assert!(in_range(&t), "{text:?} gave {t:?}, out of range");
            prop_assert_eq!(t.timestamp_subsec_nanos() % 1_000_000, 0, "milliseconds");
            let written = format_timestamp(&t);
            let bytes = written.as_bytes();
            prop_assert!(
                bytes.len() > 5 && bytes[..4].iter().all(u8::is_ascii_digit) && bytes[4] == b'-',
                "{text:?} is written {written:?}"
            );
            prop_assert_eq!(
                parse_timestamp(&written),
                Ok(t),
                "round trip of {}",
                written
            );
        }
        Err(message) => prop_assert!(!message.is_empty()),
    }
    Ok(())
}

fn arb_in_range_timestamp() -> BoxedStrategy<Timestamp> {
    prop_oneof![
        6 => (0i64..=LATEST_MS).prop_filter_map("ms", DateTime::from_timestamp_millis),
        1 => Just(EARLIEST),
        1 => Just(latest()),
        1 => (0i64..=10_000).prop_filter_map("ms", DateTime::from_timestamp_millis),
        1 => (LATEST_MS - 10_000..=LATEST_MS).prop_filter_map("ms",
            DateTime::from_timestamp_millis),
        // Below a millisecond, and leap seconds.
        1 => (0i64..=LATEST_MS / 1_000, 0u32..1_000_000_000)
            .prop_filter_map("in range", |(s, n)| DateTime::from_timestamp(s, n).filter(in_range)),
        1 => (0i64..=2_932_896, 1_000_000_000u32..2_000_000_000)
            .prop_filter_map("leap", |(day, n)| {
                DateTime::from_timestamp(day * 86_400 + 86_399, n).filter(in_range)
            }),
    ]
    .boxed()
}

fn arb_delta() -> BoxedStrategy<Duration> {
    prop_oneof![
        any::<i64>().prop_map(|ms| Duration::try_milliseconds(ms).unwrap_or(Duration::MIN)),
        (-(i64::MAX / 1_000)..=i64::MAX / 1_000, 0u32..1_000_000_000)
            .prop_filter_map("a chrono duration", |(s, n)| Duration::new(s, n)),
        (-12_700_000_000_000i64..=12_700_000_000_000).prop_map(Duration::seconds),
        (-400_000_000_000i64..=400_000_000_000).prop_map(Duration::milliseconds),
        any::<i64>().prop_map(Duration::nanoseconds),
        prop::sample::select(vec![
            Duration::MAX,
            Duration::MIN,
            Duration::zero(),
            MAX_DURATION,
            -MAX_DURATION,
            Duration::nanoseconds(1),
            Duration::nanoseconds(-1),
            Duration::milliseconds(1),
            Duration::milliseconds(-1),
            Duration::milliseconds(LATEST_MS),
            Duration::milliseconds(-LATEST_MS),
            Duration::milliseconds(LATEST_MS + 1),
        ]),
    ]
    .boxed()
}

fn end_user() -> BoxedStrategy<EndUser> {
    (
        small_string(),
        any::<bool>(),
        prop::collection::vec(small_string(), 0..4),
        prop::collection::vec(
            (
                prop_oneof![
                    3 => prop::sample::select(vec!["country", "age", "a.b",
                        ""]).prop_map(str::to_owned),
                    1 => small_string(),
                ],
                prop_oneof![4 => arb_scalar(), 1 => arb_json()],
            ),
            0..4,
        ),
    )
        .prop_map(|(id, test_user, mut tags, attributes)| {
            tags.sort();
            tags.dedup();
            EndUser {
                environment_id: "env".into(),
                id: id.into(),
                test_user,
                tags,
                attributes: attributes.into_iter().collect(),
                created: EARLIEST,
                updated: EARLIEST,
            }
        })
        .boxed()
}

fn check_filter(value: &Value, users: &[EndUser]) -> Result<(), TestCaseError> {
    match Filter::parse(value, "target.filter") {
        Ok(filter) => {
            prop_assert!((1..=MAX_CONDITIONS).contains(&filter.conditions.len()));
            prop_assert_eq!(&filter.source, value);
            for user in users {
                let _ = filter.matches(user);
            }
        }
        Err(problems) => {
            check_problems(&problems)?;
            for p in &problems {
                prop_assert!(p.field.starts_with("target.filter"), "{p:?}");
            }
        }
    }
    Ok(())
}

fn check_flow_config(value: &Value) -> Result<(), TestCaseError> {
    let problems = config::validate(value, "config");
    for p in &problems {
        prop_assert!(p.field.starts_with("config"), "{p:?}");
        prop_assert!(!p.message.is_empty(), "{p:?}");
    }
    prop_assert!(
        problems.windows(2).all(|w| w[0].field <= w[1].field),
        "problems ordered by path"
    );
    prop_assert_eq!(
        &config::validate(value, "config"),
        &problems,
        "deterministic"
    );
    Ok(())
}

/// The compiled view renders the very text serde_json writes of `render`'s value.
fn check_templates(
    template: &Value,
    variables: &ResolvedVariables,
    platform: Platform,
) -> Result<(), TestCaseError> {
    let rendered = variables::render(template, variables, platform);
    let compiled = ViewTemplate::compile(template);
    let text = compiled.render(variables, platform);
    prop_assert_eq!(&text, &rendered.to_string());
    prop_assert_eq!(compiled.notifies(), template.get("notification").is_some());
    if compiled.same_on_every_platform(variables) {
        for other in [Platform::Web, Platform::Ios, Platform::Android] {
            prop_assert_eq!(&compiled.render(variables, other), &text);
        }
    }
    // What is rendered is stored and read back as the JSON it is (a float may come back a
    // unit in the last place away: serde_json's default float parsing is not exact), as long
    // as it is within the nesting serde_json's parser reads (128 levels; the stored content
    // adds one).
    let content = CardContent::shared(&text, compiled.notifies());
    let platforms = vec!["Web".to_owned(), "iOS".to_owned()];
    let views = content.views(&platforms);
    if depth(&rendered) < 128 {
        let read: Value = serde_json::from_str(&text).expect("JSON text");
        prop_assert_eq!(views.get("Web"), Some(&read));
        prop_assert_eq!(views.get("iOS"), Some(&read));
    }
    prop_assert_eq!(content.notifies(), compiled.notifies());
    Ok(())
}

/// Levels of arrays and objects: 0 for a scalar.
fn depth(value: &Value) -> usize {
    match value {
        Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        Value::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

// ---------------------------------------------------------------------------------------------
// Models of the documented grammars, for generated well-formed input.
// ---------------------------------------------------------------------------------------------

/// A well-formed ISO 8601 duration, its parts in order, and the milliseconds it means
/// (years 365 days, months 30), or None past i64 milliseconds.
#[derive(Debug, Clone)]
struct IsoDuration {
    text: String,
    expected: Option<i64>,
}

fn well_formed_duration() -> BoxedStrategy<IsoDuration> {
    let n = || {
        prop::option::weighted(
            0.35,
            prop_oneof![
                6 => 0u64..1_000,
                2 => 0u64..400_000,
                1 => any::<u64>(),
            ],
        )
    };
    let fraction = prop::option::weighted(0.3, "[0-9]{0,10}");
    (n(), n(), n(), n(), n(), n(), n(), fraction, any::<bool>())
        .prop_map(|(y, mo, w, d, h, mi, s, fraction, bare_t)| {
            fn part(text: &mut String, total: &mut i128, n: Option<u64>, unit: char, ms: i128) {
                if let Some(n) = n {
                    text.push_str(&n.to_string());
                    text.push(unit);
                    *total += i128::from(n) * ms;
                }
            }
            let mut text = "P".to_owned();
            let mut total: i128 = 0;
            part(&mut text, &mut total, y, 'Y', 365 * 86_400_000);
            part(&mut text, &mut total, mo, 'M', 30 * 86_400_000);
            part(&mut text, &mut total, w, 'W', 7 * 86_400_000);
            part(&mut text, &mut total, d, 'D', 86_400_000);
            if h.is_some() || mi.is_some() || s.is_some() || bare_t {
                text.push('T');
            }
            part(&mut text, &mut total, h, 'H', 3_600_000);
            part(&mut text, &mut total, mi, 'M', 60_000);
            match (s, fraction) {
                (Some(s), Some(f)) => {
                    text.push_str(&format!("{s}.{f}S"));
                    total += i128::from(s) * 1_000;
                    // The first three digits, rounded half up on the fourth.
                    let digits: Vec<i128> = f.bytes().map(|b| i128::from(b - b'0')).collect();
                    let mut millis = 0;
                    for i in 0..3 {
                        millis = millis * 10 + digits.get(i).copied().unwrap_or(0);
                    }
                    if digits.get(3).is_some_and(|d| *d >= 5) {
                        millis += 1;
                    }
                    total += millis;
                }
                (s, _) => part(&mut text, &mut total, s, 'S', 1_000),
            }
            let empty = text == "P" || text.ends_with('T');
            let expected = if empty {
                None
            } else {
                i64::try_from(total).ok()
            };
            IsoDuration { text, expected }
        })
        .boxed()
}

/// A retry schedule as text, and its steps when every part is valid.
#[derive(Debug, Clone)]
struct Schedule {
    text: String,
    steps: Option<Vec<Duration>>,
}

fn retry_schedule() -> BoxedStrategy<Schedule> {
    let part = (
        prop_oneof![
            6 => (0u64..100).prop_map(|n| n.to_string()),
            2 => (0u64..700_000_000).prop_map(|n| n.to_string()),
            1 => any::<u64>().prop_map(|n| n.to_string()),
            1 => "[0-9]{20,30}",
            1 => Just(String::new()),
            1 => Just("-1".to_owned()),
        ],
        prop::sample::select(vec![
            "ms", "s", "m", "h", "d", "", "x", "S", "mss", " s", "µs",
        ]),
        prop::sample::select(vec!["", " ", "  ", "\t"]),
    );
    prop::collection::vec(part, 0..24)
        .prop_map(|parts| {
            let mut steps = Some(Vec::new());
            let mut texts = Vec::new();
            for (number, unit, pad) in parts {
                texts.push(format!("{pad}{number}{unit}{pad}"));
                if number.is_empty() && unit.is_empty() {
                    continue; // an empty part is skipped
                }
                let digits = !number.is_empty() && number.bytes().all(|b| b.is_ascii_digit());
                let step = number
                    .parse::<i64>()
                    .ok()
                    .filter(|_| digits)
                    .and_then(|n| match unit {
                        "ms" => Duration::try_milliseconds(n),
                        "s" => Duration::try_seconds(n),
                        "m" => Duration::try_minutes(n),
                        "h" => Duration::try_hours(n),
                        "d" => Duration::try_days(n),
                        _ => None,
                    });
                match (step, &mut steps) {
                    (Some(step), Some(list)) if step <= Duration::days(7) => list.push(step),
                    _ => steps = None,
                }
            }
            let steps = steps.filter(|s| s.len() <= 20);
            Schedule {
                text: texts.join(","),
                steps,
            }
        })
        .boxed()
}

fn arb_jitter() -> BoxedStrategy<f64> {
    prop_oneof![
        4 => -1.0f64..=1.0,
        2 => any::<f64>(),
        1 => prop::sample::select(vec![
            f64::NAN,
            -f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::MAX,
            f64::MIN,
            -0.0,
            1.0 + f64::EPSILON,
            -1.0 - f64::EPSILON,
            f64::MIN_POSITIVE,
        ]),
    ]
    .boxed()
}

fn arb_retry_after() -> BoxedStrategy<Option<u64>> {
    prop_oneof![
        2 => Just(None),
        2 => (0u64..100_000).prop_map(Some),
        1 => any::<u64>().prop_map(Some),
        1 => prop::sample::select(vec![
            u64::MAX,
            i64::MAX as u64,
            i64::MAX as u64 + 1,
            (i64::MAX / 1_000) as u64,
            (i64::MAX / 1_000) as u64 + 1,
            0,
        ])
        .prop_map(Some),
    ]
    .boxed()
}

fn arb_attempt() -> BoxedStrategy<u32> {
    prop_oneof![4 => 0u32..25, 1 => any::<u32>(), 1 => Just(u32::MAX)].boxed()
}

/// An object of the fields the other body parsers read, with fuzzed values.
fn near_body() -> BoxedStrategy<Value> {
    let key = prop::sample::select(vec![
        "types",
        "url",
        "method",
        "headers",
        "cardTemplateId",
        "actionFlowConfigId",
        "appId",
        "platform",
        "platformCredential",
        "platformPrincipal",
        "platformProperties",
        "channelId",
        "restrictedPackageName",
        "teamId",
        "bundleId",
        "endUserId",
        "flowInvocationId",
        "flowConfigVersion",
        "cancelCards",
    ]);
    let value = prop_oneof![
        3 => arb_scalar(),
        1 => prop::sample::select(vec![
            json!("https://example.com/hook"),
            json!("http://127.0.0.1/"),
            json!("POST"),
            json!("GET"),
            json!("FCM"),
            json!("APNS"),
            json!(["card.created"]),
            json!({"X-Key": "v", "Host": "h", "connection": "x"}),
        ]),
        1 => arb_json(),
    ];
    prop::collection::vec((key, value), 0..8)
        .prop_map(|entries| {
            Value::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| (k.to_owned(), v))
                    .collect(),
            )
        })
        .boxed()
}

/// A parser's error: field problems (at least one), or another error with a message.
fn check_domain_error(error: &DomainError) -> Result<(), TestCaseError> {
    match error {
        DomainError::Validation(problems) | DomainError::InvalidConfig(problems) => {
            check_problems(problems)
        }
        other => {
            prop_assert!(!other.to_string().is_empty(), "{other:?}");
            Ok(())
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Properties.
// ---------------------------------------------------------------------------------------------

proptest! {
    #![proptest_config(config_with(cases()))]

    // ---- trigger requests ----

    #[test]
    fn trigger_request_of_arbitrary_json(body in any_json()) {
        check_trigger(&body)?;
    }

    #[test]
    fn trigger_request_of_arbitrary_json_under_flows(flows in any_json(), options in any_json()) {
        check_trigger(&json!({ "flows": flows }))?;
        check_trigger(&json!({ "flows": [flows], "options": options }))?;
    }

    #[test]
    fn trigger_request_almost_valid(body in near_request()) {
        check_trigger(&body)?;
    }

    #[test]
    fn trigger_element_of_arbitrary_json(item in prop_oneof![near_element(), any_json()]) {
        match request::parse_element(item) {
            Ok(element) =>
                prop_assert!(element.invocation_id.as_ref().is_none_or(|i| !i.is_empty())),
            Err(problems) => check_problems(&problems)?,
        }
    }

    #[test]
    fn trigger_card_options_almost_valid(options in near_card_options()) {
        check_trigger(&with_card_options(options))?;
    }

    // ---- durations ----

    #[test]
    fn duration_of_any_string(text in prop_oneof![arb_string(), iso_duration_like(),
        chars_string(40)]) {
        if let Some(d) = parse_duration(&text) {
            prop_assert!(d >= Duration::zero(), "{text:?} gave {d:?}");
            prop_assert_eq!(d.subsec_nanos() % 1_000_000, 0, "milliseconds");
        }
    }

    #[test]
    fn duration_of_well_formed_text_is_its_milliseconds(d in well_formed_duration()) {
        let expected = d.expected.and_then(Duration::try_milliseconds);
        prop_assert_eq!(parse_duration(&d.text), expected, "{}", d.text);
    }

    /// The trigger accepts an `expiresInterval` exactly when it is a positive duration of at
    /// most MAX_DURATION, and keeps the parsed value.
    #[test]
    fn trigger_accepts_expires_interval_up_to_max_duration(
        text in prop_oneof![
            3 => iso_duration_like(),
            2 => well_formed_duration().prop_map(|d| d.text),
            2 => prop::sample::select(SPECIAL_DURATIONS).prop_map(str::to_owned),
            1 => arb_string(),
        ]
    ) {
        let parsed = request::parse(&with_card_options(json!({"expiresInterval": text})));
        let duration = parse_duration(&text);
        let acceptable = duration.filter(|d| *d > Duration::zero() && *d <= MAX_DURATION);
        match parsed {
            Ok(req) => {
                let interval = req.flows[0].payload.card_options.expires_interval;
                prop_assert!(interval.is_some_and(|d| d <= MAX_DURATION), "{text:?}: {interval:?}");
                prop_assert_eq!(interval, acceptable, "{}", text);
            }
            Err(problems) => {
                check_problems(&problems)?;
                prop_assert_eq!(acceptable, None, "{} refused: {:?}", text, problems);
            }
        }
    }

    // ---- timestamps ----

    #[test]
    fn timestamp_of_any_string(text in prop_oneof![arb_string(), chars_string(40)]) {
        check_timestamp(&text)?;
    }

    #[test]
    fn timestamp_of_rfc3339_like_text(text in rfc3339_like()) {
        check_timestamp(&text)?;
    }

    #[test]
    fn timestamps_in_range_are_written_and_read_back(t in arb_in_range_timestamp()) {
        check_timestamp(&format_timestamp(&t))?;
        prop_assert!(parse_timestamp(&format_timestamp(&t)).is_ok(), "{:?}", t);
    }

    #[test]
    fn arithmetic_on_timestamps_stays_in_range(t in arb_in_range_timestamp(), d in arb_delta()) {
        prop_assume!(in_range(&t));
        let checked = checked_after(t, d);
        let saturated = saturating_after(t, d);
        prop_assert!(in_range(&saturated), "{t:?} + {d:?} = {saturated:?}");
        match checked {
            Some(c) => {
                prop_assert!(in_range(&c));
                prop_assert_eq!(Some(c), t.checked_add_signed(d));
                prop_assert_eq!(saturated, c);
            }
            None => prop_assert!(saturated == EARLIEST || saturated == latest(), "{:?}", saturated),
        }
        if d >= Duration::zero() {
            prop_assert!(saturated >= t);
        } else {
            prop_assert!(saturated <= t);
        }
        let written = format_timestamp(&saturated);
        prop_assert!(written.as_bytes()[..4].iter().all(u8::is_ascii_digit)
            && written.as_bytes()[4] == b'-', "{}", written);
    }

    // ---- filters ----

    #[test]
    fn filter_of_arbitrary_json(value in any_json(), users in prop::collection::vec(end_user(),
        0..3)) {
        check_filter(&value, &users)?;
    }

    #[test]
    fn filter_almost_valid(value in near_filter(), users in prop::collection::vec(end_user(),
        1..4)) {
        check_filter(&value, &users)?;
    }

    // ---- flow configurations ----

    #[test]
    fn flow_config_of_arbitrary_json(value in any_json()) {
        check_flow_config(&value)?;
    }

    #[test]
    fn flow_config_almost_valid(value in near_flow_config()) {
        check_flow_config(&value)?;
    }

    #[test]
    fn flow_config_valid_one_mutated(value in mutated_flow_config()) {
        check_flow_config(&value)?;
    }

    #[test]
    fn variable_values_and_date_patterns(
        var_type in prop_oneof![
            4 => prop::sample::select(vec!["number", "string", "date",
                "boolean"]).prop_map(str::to_owned),
            1 => small_string(),
        ],
        value in prop_oneof![arb_scalar(), date_text().prop_map(Value::String), arb_json()],
        pattern in prop::option::of(prop_oneof![
            prop::sample::select(vec!["dd/MM/yyyy", "yyyy-MM-dd HH:mm a", "d/M/y h:m:s a", "a",
                "aa", "MMMMMMMMMMMMMMMMMMMM"]).prop_map(str::to_owned),
            small_string(),
        ]),
        text in prop_oneof![date_text(), small_string()],
    ) {
        if let Err(message) = values::check_value(&var_type, &value, pattern.as_deref()) {
            prop_assert!(!message.is_empty());
        }
        if let Some(pattern) = &pattern {
            let _ = values::matches_pattern(&text, pattern);
        }
    }

    // ---- CSV rows ----

    #[test]
    fn csv_header_and_rows(
        (names, cells) in prop::collection::vec(
            prop_oneof![
                4 => (
                    prop::sample::select(vec![
                        "target.attributes.",
                        "payload.variables.",
                        "payload.metadata.",
                        "payload.notificationDetail.",
                    ]),
                    prop_oneof![3 => "[a-z]{0,4}", 1 => small_string()],
                ).prop_map(|(prefix, name)| format!("{prefix}{name}")),
                2 => prop::sample::select(vec![
                    "payload.cardOptions.priority",
                    "payload.cardOptions.expires",
                    "payload.cardOptions.expiresInterval",
                    "payload.cardOptions.embargo",
                    "payload.cardOptions.targetStreamIds",
                    "payload.cardOptions.targetPlatforms",
                    "payload.cardOptions.colour",
                    "flowInvocationId",
                    "target.attributes.id",
                ]).prop_map(str::to_owned),
                1 => (
                    prop::sample::select(vec!["\u{feff}", " ", "\t", "\u{feff} ", " \u{feff}"]),
                    prop::sample::select(vec!["target.attributes.id", "flowInvocationId",
                        "payload.variables.name"]),
                ).prop_map(|(pad, name)| format!("{pad}{name}{pad}")),
                1 => small_string(),
            ],
            0..7,
        )
        .prop_flat_map(|names| {
            let n = names.len();
            let cell = prop_oneof![
                3 => Just(String::new()),
                3 => "[a-zA-Z0-9|]{0,10}",
                2 => (-3i64..15).prop_map(|n| n.to_string()),
                1 => prop::sample::select(vec!["Web|iOS", "Android", "|", "||", "web", " 5", "5.0",
                    "99999999999999999999"]).prop_map(str::to_owned),
                1 => rfc3339_like(),
                1 => iso_duration_like(),
                1 => arb_string(),
            ];
            let cells = prop_oneof![
                8 => prop::collection::vec(cell.clone(), n..=n),
                1 => prop::collection::vec(cell, 0..8),
            ];
            (Just(names), cells)
        }),
        users in prop::collection::vec(prop_oneof!["[a-z0-9]{1,8}", small_string()], 0..11),
    ) {
        match CsvHeader::parse(&names) {
            Err(message) => prop_assert!(!message.is_empty()),
            Ok(header) => {
                prop_assert!(names.iter().any(|n| n.contains("target.attributes.")));
                match header.row(&cells) {
                    Err(message) => prop_assert!(!message.is_empty()),
                    Ok(row) => {
                        prop_assert!(!row.attributes.is_empty());
                        prop_assert_eq!(cells.len(), names.len());
                        let element = row.element(users, || "csv-1-1".to_owned());
                        match request::parse_element(element) {
                            Ok(element) => prop_assert!(element.invocation_id.is_some()),
                            Err(problems) => check_problems(&problems)?,
                        }
                    }
                }
            }
        }
    }

    /// A header of distinct valid columns with an attribute column is accepted.
    #[test]
    fn csv_header_of_valid_columns(
        names in prop::collection::btree_set(
            prop_oneof![
                (prop::sample::select(vec![
                    "target.attributes.",
                    "payload.variables.",
                    "payload.metadata.",
                    "payload.notificationDetail.",
                ]), "[a-zA-Z0-9_]{1,6}").prop_map(|(p, n)| format!("{p}{n}")),
                prop::sample::select(vec![
                    "payload.cardOptions.priority",
                    "payload.cardOptions.expires",
                    "payload.cardOptions.expiresInterval",
                    "payload.cardOptions.embargo",
                    "payload.cardOptions.targetStreamIds",
                    "payload.cardOptions.targetPlatforms",
                    "flowInvocationId",
                ]).prop_map(str::to_owned),
            ],
            0..8,
        ),
        attribute in "[a-z]{1,6}",
    ) {
        let mut names: Vec<String> = names.into_iter().collect();
        names.push(format!("target.attributes.{attribute}"));
        names.dedup();
        let mut seen = std::collections::HashSet::new();
        names.retain(|n| seen.insert(n.clone()));
        let header = CsvHeader::parse(&names);
        prop_assert!(header.is_ok(), "{:?}: {:?}", names, header);
    }

    // ---- templates ----

    #[test]
    fn templates_render_alike(
        template in prop_oneof![
            4 => card_template(),
            1 => (template_json(), template_json(), template_json()).prop_map(|(d, s, n)| {
                json!({"defaultView": d, "subviews": s, "notification": n,
                       "variables": {"name": {"default": "you"}, "amount": {"default": 10}}})
            }),
            1 => any_json(),
        ],
        variables in resolved_variables(),
        platform in platform(),
    ) {
        check_templates(&template, &variables, platform)?;
    }

    #[test]
    fn variables_resolve_or_report(
        config in prop_oneof![near_flow_config(), Just(valid_flow_config())],
        body in near_request(),
        strict in any::<bool>(),
    ) {
        let payloads: Vec<Payload> = match request::parse_drafts(&body) {
            Ok(req) => req.flows.into_iter().map(|f| f.payload).collect(),
            Err(rejected) => rejected.drafts.into_iter().map(|d| d.payload).collect(),
        };
        for payload in payloads {
            match variables::resolve(&config, &payload, strict, "flows[0].payload") {
                Ok(resolved) => {
                    for name in resolved.values.keys() {
                        prop_assert!(
                            payload.variables.iter().any(|(n, _)| n == name)
                                || config["variables"].get(name).is_some(),
                            "{name:?} resolved from nowhere"
                        );
                    }
                }
                Err(problems) => {
                    check_problems(&problems)?;
                    for p in &problems {
                        prop_assert!(p.field.starts_with("flows[0].payload.variables."), "{p:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn variables_of_any_type_resolve_or_report(
        config in prop_oneof![near_flow_config(), Just(valid_flow_config())],
        sent in prop::collection::vec(
            (
                prop_oneof![3 => prop::sample::select(VAR_NAMES).prop_map(str::to_owned),
                    1 => small_string()],
                arb_json(), prop::option::of(arb_json()), prop::option::of(arb_json()),
            ),
            0..5,
        ),
        strict in any::<bool>(),
    ) {
        // Values of any type, as a caller of `resolve` might build them.
        let payload = Payload {
            variables: sent
                .into_iter()
                .map(|(name, value, ios, android)| (name, VariableValue { value, ios, android }))
                .collect(),
            ..Payload::default()
        };
        if let Err(problems) = variables::resolve(&config, &payload, strict, "p") {
            check_problems(&problems)?;
        }
    }

    #[test]
    fn stored_card_content_of_any_text(text in prop_oneof![arb_string(),
        any_json().prop_map(|v| v.to_string())]) {
        let content = CardContent::stored(text);
        let _ = content.notifies();
        let _ = content.views(&["Web".to_owned(), "*".to_owned()]);
        let _ = content.view("iOS", &["iOS".to_owned()]);
    }

    // ---- other public parsers: webhook subscriptions, push platforms, cancel filters,
    // folder names, upload tokens ----

    #[test]
    fn other_body_parsers(body in prop_oneof![3 => near_body(), 1 => any_json()]) {
        if let Err(e) = SubscriptionRequest::parse(&body) {
            check_domain_error(&e)?;
        }
        if let Err(e) = PlatformInput::parse(&body) {
            check_domain_error(&e)?;
        }
        if let Err(e) = CancelFilter::parse(Some(&body)) {
            check_domain_error(&e)?;
        }
    }

    #[test]
    fn folder_names_and_upload_tokens(text in prop_oneof![arb_string(), chars_string(40),
        "[A-Za-z0-9_.|-]{0,40}"]) {
        for problem in workbench_domain::folder::validate_name("name", &text) {
            prop_assert!(!problem.message.is_empty());
        }
        prop_assert!(UploadGrant::verify(&text, b"key", EARLIEST).is_err());
    }

    // ---- retry schedules ----

    #[test]
    fn retry_policy_of_any_string(text in prop_oneof![arb_string(), chars_string(40),
        "[0-9a-z, ]{0,40}"]) {
        match RetryPolicy::parse(&text) {
            Ok(policy) => prop_assert!(policy.retries() <= 20),
            Err(message) => prop_assert!(!message.is_empty()),
        }
    }

    #[test]
    fn retry_policy_of_generated_schedules(schedule in retry_schedule()) {
        let parsed = RetryPolicy::parse(&schedule.text);
        match (&parsed, &schedule.steps) {
            (Ok(policy), Some(steps)) => {
                prop_assert_eq!(policy.retries(), steps.len());
                for (i, step) in steps.iter().enumerate() {
                    let attempt = u32::try_from(i + 1).expect("at most 20");
                    prop_assert_eq!(policy.delay_after(attempt, None, 0.0), Some(*step));
                }
            }
            (Err(message), None) => prop_assert!(!message.is_empty()),
            _ => prop_assert!(false, "{:?} parsed as {:?}, expected steps {:?}", schedule.text,
                parsed, schedule.steps),
        }
    }

    #[test]
    fn retry_delays_are_bounded(
        schedule in retry_schedule(),
        attempt in arb_attempt(),
        retry_after in arb_retry_after(),
        jitter in arb_jitter(),
    ) {
        let Ok(policy) = RetryPolicy::parse(&schedule.text) else {
            return Ok(());
        };
        let delay = policy.delay_after(attempt, retry_after, jitter);
        let index = usize::try_from(attempt).ok().and_then(|a| a.checked_sub(1));
        match index.filter(|i| *i < policy.retries()) {
            None => prop_assert_eq!(delay, None),
            Some(_) => {
                let step = policy.delay_after(attempt, None, 0.0).expect("a step");
                let delay = delay.expect("a delay");
                let ms = delay.num_milliseconds();
                let step_ms = step.num_milliseconds();
                prop_assert!(delay >= Duration::zero(), "{delay:?}");
                prop_assert!(ms <= step_ms * 2, "{delay:?} past twice the step {step:?}");
                if !jitter.is_nan() {
                    // ±20% of the step (to the millisecond), or Retry-After if longer.
                    prop_assert!(ms * 10 >= step_ms * 8 - 10, "{delay:?} below 80% of {step:?}");
                }
                if let Some(asked) = retry_after {
                    let asked_ms = i128::from(asked) * 1_000;
                    let floor = asked_ms.min(i128::from(step_ms) * 2);
                    prop_assert!(i128::from(ms) >= floor,
                        "Retry-After {asked} s not honoured: {delay:?}");
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Plain tests: inputs the brief names, the limits, and the baselines the generators mutate.
// ---------------------------------------------------------------------------------------------

#[test]
fn the_valid_flow_configuration_is_valid() {
    assert_eq!(config::validate(&valid_flow_config(), "config"), vec![]);
}

#[test]
fn named_expires_intervals() {
    let cases: &[(&str, Option<i64>)] = &[
        ("P290000Y", None),
        ("P99999999999999999999Y", None),
        ("PT0.0000001S", None), // rounds to 0 ms: not positive
        ("P1.5Y", None),
        ("P36525D", Some(36_525 * 86_400_000)),
        ("P100Y", Some(36_500 * 86_400_000)), // years are 365 days
        ("P101Y", None),
        ("P36526D", None),
        ("PT0.0005S", Some(1)),
        ("P1DT12H", Some(36 * 3_600_000)),
    ];
    for (text, expected_ms) in cases {
        let parsed = request::parse(&with_card_options(json!({"expiresInterval": text})));
        let expected = expected_ms.map(Duration::milliseconds);
        let got = parsed
            .as_ref()
            .ok()
            .and_then(|r| r.flows[0].payload.card_options.expires_interval);
        assert_eq!(got, expected, "{text}: {parsed:?}");
        if expected.is_none() {
            let problems = parsed.expect_err("refused");
            assert!(problems
                .iter()
                .any(|p| p.field.ends_with("cardOptions.expiresInterval")));
        }
    }
}

#[test]
fn named_timestamps() {
    for (text, ok) in [
        ("0000-01-01T00:00:00Z", false),
        ("10000-01-01T00:00:00Z", false),
        ("+201894-01-01T00:00:00Z", false),
        ("1970-01-01T00:00:00-23:59", true),
        ("1970-01-01T00:00:00+23:59", false),
        ("9999-12-31T23:59:59.999+00:00", true),
        ("9999-12-31T23:59:59-00:01", false),
        ("9999-12-31T23:59:60Z", false),
        ("2016-12-31T23:59:60.5Z", true),
        ("2026-11-22T10:00:00.123456789Z", true),
    ] {
        let parsed = parse_timestamp(text);
        assert_eq!(parsed.is_ok(), ok, "{text}: {parsed:?}");
        if let Ok(t) = parsed {
            assert!(in_range(&t));
            let written = format_timestamp(&t);
            assert_eq!(parse_timestamp(&written), Ok(t), "{written}");
        }
    }
}

#[test]
fn named_card_options_bounds() {
    for options in [
        json!({"priority": 0}),
        json!({"priority": 11}),
        json!({"priority": u64::MAX}),
        json!({"priority": -1}),
        json!({"priority": 5.5}),
        json!({"expires": "0000-01-01T00:00:00Z"}),
        json!({"embargo": "10000-01-01T00:00:00Z"}),
        json!({"expires": "+201894-01-01T00:00:00Z"}),
        json!({"embargo": "9999-12-31T23:59:59.999Z", "expiresInterval": "PT1S"}),
        json!({"embargo": "2026-01-01T00:00:00Z", "expires": "2026-01-01T00:00:00Z"}),
        json!({"targetPlatforms": {"Windows": true}}),
        json!({"colour": "red"}),
        // A float is not a whole number to serde_json's `as_u64`, even 10.0.
        json!({"priority": 10.0}),
    ] {
        let problems = request::parse(&with_card_options(options.clone())).expect_err("refused");
        assert!(!problems.is_empty(), "{options}");
    }
    for options in [
        json!({"priority": 1}),
        json!({"priority": 10}),
        json!({"expires": "9999-12-31T23:59:59.999Z"}),
        json!({"embargo": "1970-01-01T00:00:00Z", "expiresInterval": "P36525D"}),
    ] {
        let parsed = request::parse(&with_card_options(options.clone()));
        assert!(parsed.is_ok(), "{options}: {parsed:?}");
    }
}

#[test]
fn request_size_limits() {
    let users = |n: usize| (0..n).map(|i| format!("u{i}")).collect::<Vec<_>>();
    let element = |n: usize| json!({"target": {"type": "user", "targetUserIds": users(n)}});
    assert!(request::parse(&json!({"flows": [element(request::MAX_TARGET_USERS)]})).is_ok());
    assert!(request::parse(&json!({"flows": [element(request::MAX_TARGET_USERS + 1)]})).is_err());
    let all = json!({"target": {"type": "allTestUsers"}});
    let flows = |n: usize| Value::Array(vec![all.clone(); n]);
    assert!(request::parse(&json!({"flows": flows(request::MAX_FLOW_ELEMENTS)})).is_ok());
    let rejected = request::parse_drafts(&json!({"flows": flows(request::MAX_FLOW_ELEMENTS + 1)}))
        .expect_err("too many");
    assert!(rejected.drafts.is_empty());
    assert!(!rejected.problems.is_empty());
}

#[test]
fn deeply_nested_documents_are_refused_without_overflow() {
    // As deep as serde_json's parser lets a body be (128), in every place the parsers recurse.
    let deep = wrap(json!("%{name}"), vec![(true, String::new()); 120]);
    let body = json!({"flows": [{"target": {"type": "filters",
        "filter": {"conditions": [{"field": "id", "op": "in", "value": deep}]}},
                                 "payload": {"notificationDetail": {"d": deep},
                                     "metadata": {"m": deep}, "variables": {"v": deep}}}]});
    let problems = request::parse(&body).expect_err("refused");
    assert!(!problems.is_empty());
    let config = json!({"type": "card", "cardTemplates": {"t": {"metadata": {"cardName": "n"},
        "defaultView": {"content": [{"key": "k", "type": "x", "attributes": {"a": deep}}]},
            "notification": deep}}});
    assert!(!config::validate(&config, "config").is_empty());
    let template = json!({"defaultView": deep, "notification": deep});
    let vars = ResolvedVariables {
        values: BTreeMap::new(),
    };
    check_templates(&template, &vars, Platform::Web).expect("renders alike");
}

// ---------------------------------------------------------------------------------------------
// Regressions: minimal inputs of failures the properties found.
//
// The first six failed on the code before the change "Robustness: bounded times, ..." (see
// git), found by running these properties there; they pass since that change.
// ---------------------------------------------------------------------------------------------

/// `duration_of_any_string` before that change: ``TimeDelta + TimeDelta` overflowed`` at
/// crates/domain/src/trigger/request.rs:584 (the parts were summed as unchecked Durations).
#[test]
fn regression_parse_duration_p1y106751990803m() {
    assert_eq!(parse_duration("P1Y106751990803M"), None);
}

/// `duration_of_well_formed_text_is_its_milliseconds` before that change: a wrong value, not
/// a panic (the parts were computed in f64: 9098272606266000.384 s).
#[test]
fn regression_parse_duration_pt2527297946185h_is_exact() {
    assert_eq!(
        parse_duration("PT2527297946185H"),
        Some(Duration::hours(2_527_297_946_185))
    );
}

/// `trigger_request_almost_valid` before that change: the same panic through the trigger
/// parser.
#[test]
fn regression_expires_interval_p1yt153722866755313h() {
    let body = json!({"flows": [{"payload": {"cardOptions": {"expiresInterval":
        "P1YT153722866755313H"}}}]});
    let problems = request::parse(&body).expect_err("refused");
    assert!(problems
        .iter()
        .any(|p| p.field == "flows[0].payload.cardOptions.expiresInterval"));
    assert!(problems.iter().any(|p| p.field == "flows[0].target"));
}

/// `retry_policy_of_generated_schedules` before that change: `TimeDelta::hours out of
/// bounds` at crates/domain/src/retry.rs:32 (`Duration::hours(n)`; likewise `seconds`, line
/// 30).
#[test]
fn regression_retry_policy_2562047788016h() {
    assert!(RetryPolicy::parse("2562047788016h").is_err());
}

#[test]
fn regression_retry_policy_9223372036854776s() {
    assert!(RetryPolicy::parse("9223372036854776s").is_err());
}

/// `retry_delays_are_bounded` before that change: `TimeDelta::seconds out of bounds` at
/// crates/domain/src/retry.rs:67 (`Duration::seconds` of any `Retry-After` below 2^63).
#[test]
fn regression_delay_after_retry_after_9223372036854776() {
    let policy = RetryPolicy::parse("5s,5m,30m,2h").expect("policy");
    for asked in [9_223_372_036_854_776, i64::MAX as u64, u64::MAX] {
        assert_eq!(
            policy.delay_after(1, Some(asked), 0.0),
            Some(Duration::seconds(10)),
            "Retry-After is honoured up to twice the step"
        );
    }
}

/// Found by `templates_render_alike`: the compiled view writes a float exactly as serde_json
/// writes it (this holds), but the stored content read back (`CardContent::views`) gives
/// -1.316675906175155e-255 for -1.3166759061751547e-255: serde_json parses floats without
/// its `float_roundtrip` feature, which is not exact to the last place. Not a bug of this crate;
/// the test pins what the crate does promise.
#[test]
fn regression_template_float_is_written_as_serde_json_writes_it() {
    let template = json!({"subviews": {"": {"content": [[-1.316_675_906_175_154_7e-255]]}}});
    let vars = ResolvedVariables::default();
    let rendered = variables::render(&template, &vars, Platform::Web);
    let text = ViewTemplate::compile(&template).render(&vars, Platform::Web);
    assert_eq!(text, rendered.to_string());
    let content = CardContent::shared(&text, false);
    let read: Value = serde_json::from_str(&text).expect("JSON text");
    assert_eq!(content.view("Web", &["Web".to_owned()]), Some(read));
}

/// Found by `deeply_nested_documents_are_refused_without_overflow` (at 126 levels): a rendered
/// view nested deeper than serde_json's parser reads (128 levels, with the content's own
/// object) is stored, but reads back as no view at all (`views` is empty, silently). Not
/// reachable through the API, whose bodies are parsed with the same limit (a template inside
/// a request sits at least four levels down), so not marked as a bug; pinned here.
#[test]
fn regression_content_deeper_than_the_parser_limit_reads_back_empty() {
    let deep = wrap(json!("x"), vec![(true, String::new()); 126]);
    let template = json!({"defaultView": deep});
    let vars = ResolvedVariables::default();
    let text = ViewTemplate::compile(&template).render(&vars, Platform::Web);
    assert_eq!(
        text,
        variables::render(&template, &vars, Platform::Web).to_string()
    );
    let content = CardContent::shared(&text, false);
    assert!(content.views(&["Web".to_owned()]).is_empty());
    // One level less reads back.
    let shallower = wrap(json!("x"), vec![(true, String::new()); 125]);
    let text =
        ViewTemplate::compile(&json!({"defaultView": shallower})).render(&vars, Platform::Web);
    assert_eq!(
        CardContent::shared(&text, false)
            .views(&["Web".to_owned()])
            .len(),
        1
    );
}

/// Found by `retry_delays_are_bounded` (without its NaN exemption): a NaN jitter passes
/// `jitter.clamp(-1.0, 1.0)` as NaN, and `(step_ms * NaN) as i64` is 0, so the delay is 0 ms
/// instead of the step ±20% (crates/domain/src/retry.rs, `delay_after`, the `jittered` line).
/// No panic, and today's callers (webhook/delivery.rs, push/send.rs) draw the jitter from
/// `gen_range(-1.0..=1.0)`, so it could not happen there; a jitter that is not a number now
/// moves nothing.
#[test]
fn regression_delay_after_nan_jitter() {
    let policy = RetryPolicy::parse("5s").expect("policy");
    let delay = policy.delay_after(1, None, f64::NAN).expect("a delay");
    assert!(
        delay >= Duration::seconds(4) && delay <= Duration::seconds(6),
        "{delay:?}"
    );
}

proptest! {
    /// User-token claims: any values at all are checked without panicking, and a token that
    /// passes is inside its window at `now` (with the leeway), no longer-lived than its key
    /// allows, not issued in the future, and for the path's user.
    #[test]
    fn user_token_claims_pass_only_inside_their_window(
        sub in proptest::option::of(prop_oneof![Just("u1".to_owned()), ".{0,8}"]),
        exp in proptest::option::of(any::<i64>()),
        iat in proptest::option::of(any::<i64>()),
        nbf in proptest::option::of(any::<i64>()),
        now in any::<i64>(),
        days in any::<u32>(),
        near in -1_000_000i64..1_000_000,
    ) {
        use workbench_domain::sdk::{check_claims, SdkKeyKind, TokenClaims, TokenPolicy,
            LEEWAY_SECONDS, MAX_TOKEN_EXPIRY_DAYS};
        let policy = TokenPolicy {
            kind: SdkKeyKind::EcP256,
            max_token_expiry_days: days,
            allowed_issuers: vec![],
        };
        // Half the cases put the times near `now`, where the boundaries are.
        let close = |t: Option<i64>|
            t.map(|t| if t % 2 == 0 { now.saturating_add(near) } else { t });
        let claims = TokenClaims { sub, exp: close(exp), iat: close(iat), nbf: close(nbf),
            iss: None, other: Default::default() };
        if check_claims(&claims, &policy, "u1", now).is_ok() {
            let (exp, iat) = (claims.exp.unwrap_or_default(), claims.iat.unwrap_or_default());
            prop_assert_eq!(claims.sub.as_deref(), Some("u1"));
            prop_assert!(i128::from(now) <= i128::from(exp) + i128::from(LEEWAY_SECONDS));
            prop_assert!(i128::from(iat) <= i128::from(now) + i128::from(LEEWAY_SECONDS));
            let max = i128::from(days.min(MAX_TOKEN_EXPIRY_DAYS)) * 86_400;
            prop_assert!(i128::from(exp) - i128::from(iat) <= max);
            if let Some(nbf) = claims.nbf {
                prop_assert!(i128::from(nbf) <= i128::from(now) + i128::from(LEEWAY_SECONDS));
            }
        }
    }
}
