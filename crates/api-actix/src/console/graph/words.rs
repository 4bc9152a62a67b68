//! Steps said in words, for the drawing and its table: a wait's duration or date, a
//! branch's conditions, an outcome's name.

use chrono::Duration;
use domain::flow::steps::{Comparison, Condition, Op, Subject, WaitUntil};
use serde_json::Value;

/// A duration in the largest units that say it exactly, at most two: "1 day",
/// "2 hours 30 minutes", "45 seconds".
pub(crate) fn duration(d: Duration) -> String {
    let total = d.num_seconds();
    let sign = if total < 0 { "minus " } else { "" };
    let mut left = total.unsigned_abs();
    if left == 0 {
        return "0 seconds".into();
    }
    let units = [
        (7 * 86_400, "week"),
        (86_400, "day"),
        (3_600, "hour"),
        (60, "minute"),
        (1, "second"),
    ];
    let mut parts = Vec::new();
    for (size, name) in units {
        if parts.len() == 2 {
            break;
        }
        let n = left / size;
        // Weeks only when they say it exactly: "10 days", not "1 week 3 days".
        if n == 0 || (size == 7 * 86_400 && left % size != 0) {
            continue;
        }
        left -= n * size;
        parts.push(format!("{n} {name}{}", if n == 1 { "" } else { "s" }));
    }
    format!("{sign}{}", parts.join(" "))
}

/// When a `wait` step ends: "for 1 day", "until" an instant in UTC, "1 day before trialEnds".
pub(crate) fn wait(until: &WaitUntil) -> String {
    match until {
        WaitUntil::After(d) => format!("for {}", duration(*d)),
        WaitUntil::At(at) => format!("until {}", at.format("%Y-%m-%d %H:%M UTC")),
        WaitUntil::Variable { name, offset } => {
            let seconds = offset.num_seconds();
            if seconds == 0 {
                format!("until {name}")
            } else if seconds < 0 {
                format!("{} before {name}", duration(-*offset))
            } else {
                format!("{} after {name}", duration(*offset))
            }
        }
    }
}

/// A condition in words: "rating ≥ 4", "ask's outcome is submitted", "not (plan is free)".
pub(crate) fn condition(c: &Condition) -> String {
    match c {
        Condition::Compare(cmp) => comparison(cmp),
        Condition::All(items) => joined(items, " and "),
        Condition::Any(items) => joined(items, " or "),
        Condition::Not(inner) => format!("not ({})", condition(inner)),
    }
}

fn joined(items: &[Condition], with: &str) -> String {
    let parts: Vec<String> = items
        .iter()
        .map(|c| match c {
            Condition::All(_) | Condition::Any(_) => format!("({})", condition(c)),
            _ => condition(c),
        })
        .collect();
    parts.join(with)
}

fn comparison(c: &Comparison) -> String {
    let subject = match &c.subject {
        Subject::Variable { name, .. } => name.clone(),
        Subject::Outcome { step } => format!("{step}'s outcome"),
        Subject::CardValue { step, field } => format!("{field} of {step}'s card"),
    };
    let op = match c.op {
        Op::Equals => "is",
        Op::NotEquals => "is not",
        Op::GreaterThan => ">",
        Op::GreaterOrEqual => "≥",
        Op::LessThan => "<",
        Op::LessOrEqual => "≤",
        Op::In => "is one of",
        Op::Exists => return format!("{subject} is set"),
    };
    let value = c.value.as_ref().map_or_else(String::new, value);
    format!("{subject} {op} {value}")
}

/// A configuration's value as a reader writes it: strings bare, lists with commas.
fn value(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(items) => items.iter().map(value).collect::<Vec<_>>().join(", "),
        other => other.to_string(),
    }
}

/// `text` cut to at most `max` characters, with an ellipsis when cut.
pub(crate) fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let kept: String = text.chars().take(max.saturating_sub(1)).collect();
    format!("{kept}…")
}

/// Text for SVG written as a string (maud escapes what it writes itself).
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn durations_read_in_at_most_two_units() {
        assert_eq!(duration(Duration::days(1)), "1 day");
        assert_eq!(duration(Duration::days(14)), "2 weeks");
        assert_eq!(duration(Duration::days(10)), "10 days");
        assert_eq!(duration(Duration::minutes(150)), "2 hours 30 minutes");
        assert_eq!(duration(Duration::seconds(45)), "45 seconds");
        assert_eq!(duration(Duration::seconds(90_061)), "1 day 1 hour");
        assert_eq!(duration(Duration::zero()), "0 seconds");
        assert_eq!(duration(Duration::hours(-3)), "minus 3 hours");
    }

    #[test]
    fn waits_say_when_they_end() {
        let day = Duration::days(1);
        assert_eq!(wait(&WaitUntil::After(day)), "for 1 day");
        let before = WaitUntil::Variable {
            name: "trialEnds".into(),
            offset: -day,
        };
        assert_eq!(wait(&before), "1 day before trialEnds");
        let at = WaitUntil::Variable {
            name: "trialEnds".into(),
            offset: Duration::zero(),
        };
        assert_eq!(wait(&at), "until trialEnds");
    }

    #[test]
    fn conditions_read_as_sentences() {
        let rating = Condition::Compare(Comparison {
            subject: Subject::CardValue {
                step: "ask".into(),
                field: "rating".into(),
            },
            op: Op::GreaterOrEqual,
            value: Some(json!(4)),
        });
        let outcome = Condition::Compare(Comparison {
            subject: Subject::Outcome { step: "ask".into() },
            op: Op::In,
            value: Some(json!(["dismissed", "timeout"])),
        });
        assert_eq!(condition(&rating), "rating of ask's card ≥ 4");
        let any = Condition::Any(vec![rating.clone(), Condition::Not(Box::new(outcome))]);
        assert_eq!(
            condition(&Condition::All(vec![any, rating])),
            "(rating of ask's card ≥ 4 or not (ask's outcome is one of dismissed, timeout)) \
             and rating of ask's card ≥ 4"
        );
    }

    #[test]
    fn clipping_counts_characters_not_bytes() {
        assert_eq!(clip("abcdef", 4), "abc…");
        assert_eq!(clip("ééé", 3), "ééé");
        assert_eq!(clip("éééé", 3), "éé…");
    }
}
