//! Retry schedules shared by webhook delivery and push sending: a list of delays, with jitter,
//! honouring a provider's `Retry-After` within bounds.

use chrono::Duration;

/// The share of each step the delay may move by, either way.
const JITTER: f64 = 0.2;

/// Parses one delay: a whole number with `ms`, `s`, `m`, `h` or `d` (`5s`, `500ms`). One out
/// of chrono's range is `Duration::MAX`, for the caller's bound to refuse.
///
/// ```
/// use workbench_domain::retry::parse_delay;
///
/// assert_eq!(parse_delay("500ms"), Ok(chrono::Duration::milliseconds(500)));
/// assert_eq!(parse_delay("2m"), Ok(chrono::Duration::minutes(2)));
/// assert!(parse_delay("5").is_err() && parse_delay("5 weeks").is_err());
/// ```
pub fn parse_delay(part: &str) -> Result<Duration, String> {
    let split = part
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("{part:?} has no unit (ms, s, m, h or d)"))?;
    let (number, unit) = part.split_at(split);
    let n: i64 = number
        .parse()
        .map_err(|_| format!("{part:?} does not start with a whole number"))?;
    let step = match unit {
        "ms" => Duration::try_milliseconds(n),
        "s" => Duration::try_seconds(n),
        "m" => Duration::try_minutes(n),
        "h" => Duration::try_hours(n),
        "d" => Duration::try_days(n),
        _ => return Err(format!("{part:?} has an unknown unit (ms, s, m, h or d)")),
    };
    Ok(step.unwrap_or(Duration::MAX))
}

/// The delays between attempts.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    steps: Vec<Duration>,
}

impl RetryPolicy {
    /// Parses `5s,5m,30m,2h`: whole numbers with `ms`, `s`, `m`, `h` or `d`. An empty text means
    /// no retries.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut steps = Vec::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let step = parse_delay(part)?;
            if step > Duration::days(7) {
                return Err(format!("{part:?} is longer than 7 days"));
            }
            steps.push(step);
        }
        if steps.len() > 20 {
            return Err("at most 20 retries".into());
        }
        Ok(RetryPolicy { steps })
    }

    /// How many retries the schedule allows after a first attempt: one per delay, 0 to 20.
    pub fn retries(&self) -> usize {
        self.steps.len()
    }

    /// The delay before the attempt after attempt number `attempt` (1-based) failed, or None
    /// when that was the last. `jitter` in [-1, 1] moves the step by up to ±20%; a
    /// `Retry-After` is honoured up to twice the step.
    pub fn delay_after(
        &self,
        attempt: u32,
        retry_after_seconds: Option<u64>,
        jitter: f64,
    ) -> Option<Duration> {
        let index = usize::try_from(attempt).ok()?.checked_sub(1)?;
        let step = *self.steps.get(index)?;
        let step_ms = step.num_milliseconds() as f64;
        // A jitter that is not a number moves nothing.
        let jitter = if jitter.is_finite() {
            jitter.clamp(-1.0, 1.0)
        } else {
            0.0
        };
        let jittered = Duration::milliseconds((step_ms * (1.0 + JITTER * jitter)) as i64);
        // A provider's `Retry-After` may be any number: bounded before any arithmetic.
        let asked = retry_after_seconds
            .map(|s| i64::try_from(s).unwrap_or(i64::MAX))
            .map(|s| Duration::try_seconds(s).unwrap_or(Duration::MAX))
            .map(|asked| asked.min(step * 2));
        Some(match asked {
            Some(asked) if asked > jittered => asked,
            _ => jittered,
        })
    }
}
