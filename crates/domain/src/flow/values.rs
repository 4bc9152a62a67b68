//! Typed values of flow variables: whether a JSON value has a variable's declared type, and
//! the date patterns (`defaultFormatterOption`) a date may follow. The configuration's checks,
//! the steps' conditions and the trigger's variables share them.

use serde_json::Value;

use super::problems::show;

/// Checks that `value` has the variable type `var_type`. Shared with the trigger, which
/// type-checks the variables a request sends.
pub fn check_value(
    var_type: &str,
    value: &Value,
    date_pattern: Option<&str>,
) -> Result<(), String> {
    let ok = match (var_type, value) {
        (_, Value::Null) => true,
        ("string", Value::String(_)) => true,
        ("number", Value::Number(_)) => true,
        ("number", Value::String(s)) => s.trim().parse::<f64>().is_ok_and(f64::is_finite),
        ("boolean", Value::Bool(_)) => true,
        ("boolean", Value::String(s)) => s == "true" || s == "false",
        ("date", Value::String(s)) => {
            crate::time::parse_timestamp(s).is_ok()
                || date_pattern.is_some_and(|pat| matches_pattern(s, pat))
        }
        _ => false,
    };
    if ok {
        Ok(())
    } else if var_type == "date" {
        Err(match date_pattern {
            Some(pat) => format!(
                "must be a date: RFC 3339 or the pattern `{pat}`, not {}",
                show(value)
            ),
            None => format!("must be an RFC 3339 date, not {}", show(value)),
        })
    } else {
        Err(format!("must be a {var_type}, not {}", show(value)))
    }
}

/// Whether `text` fits a date pattern such as `dd/MM/yyyy HH:mm`: each run of a pattern
/// letter (y, M, d, H, h, m, s, S) stands for that many digits (`yyyy` four, `M` one or two
/// with `MM` exactly two), `a` for AM/PM; anything else must appear literally.
pub fn matches_pattern(text: &str, pattern: &str) -> bool {
    let pat: Vec<char> = pattern.chars().collect();
    let txt: Vec<char> = text.chars().collect();
    let (mut i, mut j) = (0, 0);
    while i < pat.len() {
        let c = pat[i];
        let mut run = 1;
        while i + run < pat.len() && pat[i + run] == c {
            run += 1;
        }
        match c {
            'y' | 'M' | 'd' | 'H' | 'h' | 'm' | 's' | 'S' => {
                let digits = txt[j..].iter().take_while(|c| c.is_ascii_digit()).count();
                // A single letter means "one or two digits"; more letters mean exactly that many.
                let take = if run == 1 { digits.min(2) } else { run };
                if digits < take || take == 0 {
                    return false;
                }
                j += take;
            }
            'a' => {
                let rest: String = txt[j..]
                    .iter()
                    .take(2)
                    .collect::<String>()
                    .to_ascii_uppercase();
                if rest != "AM" && rest != "PM" {
                    return false;
                }
                j += 2;
            }
            literal => {
                for _ in 0..run {
                    if txt.get(j) != Some(&literal) {
                        return false;
                    }
                    j += 1;
                }
            }
        }
        i += run;
    }
    j == txt.len()
}
