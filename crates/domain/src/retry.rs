//! Retry schedules shared by webhook delivery and push sending: a list of delays, with jitter,
//! honouring a provider's `Retry-After` within bounds.

use chrono::Duration;

/// The share of each step the delay may move by, either way.
const JITTER: f64 = 0.2;

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
            let split = part
                .find(|c: char| !c.is_ascii_digit())
                .ok_or_else(|| format!("{part:?} has no unit (ms, s, m, h or d)"))?;
            let (number, unit) = part.split_at(split);
            let n: i64 = number
                .parse()
                .map_err(|_| format!("{part:?} does not start with a whole number"))?;
            let step = match unit {
                "ms" => Duration::milliseconds(n),
                "s" => Duration::seconds(n),
                "m" => Duration::minutes(n),
                "h" => Duration::hours(n),
                "d" => Duration::days(n),
                _ => return Err(format!("{part:?} has an unknown unit (ms, s, m, h or d)")),
            };
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
        let jittered =
            Duration::milliseconds((step_ms * (1.0 + JITTER * jitter.clamp(-1.0, 1.0))) as i64);
        let asked = retry_after_seconds
            .and_then(|s| i64::try_from(s).ok())
            .map(Duration::seconds)
            .map(|asked| asked.min(step * 2));
        Some(match asked {
            Some(asked) if asked > jittered => asked,
            _ => jittered,
        })
    }
}
