//! How long history is kept (contract §14): closed cards, final invocations, analytics events,
//! and webhook deliveries and push jobs in a final state, each for its own retention, or for
//! ever. What is removed is decided here, as cut-off times; the pruning itself is storage's.

use chrono::Duration;

use crate::Timestamp;

/// The shortest retention: a minute.
pub const MIN_SECONDS: u64 = 60;
/// The longest retention: 100 years of 365 days.
pub const MAX_SECONDS: u64 = 100 * 365 * 86_400;
/// The default for all history: 365 days.
pub const DEFAULT: Retention = Retention::Kept {
    seconds: 365 * 86_400,
};

/// How long one kind of history is kept once it is final.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retention {
    /// Kept for ever (`off`).
    Forever,
    /// Kept this many seconds, from [`MIN_SECONDS`] to [`MAX_SECONDS`].
    Kept {
        /// How long, in seconds.
        seconds: u64,
    },
}

impl Retention {
    /// `90m`, `12h`, `30d`, `2w`, `1y` (a year is 365 days), or `off`: a whole number and one
    /// unit, from a minute to 100 years. The error says what is accepted.
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if text.eq_ignore_ascii_case("off") {
            return Ok(Retention::Forever);
        }
        let wrong = || {
            format!(
                "must be a duration from 1m to 100y such as `90m`, `12h` or `30d` (units m, h, d, w, y), or `off`; got `{text}`"
            )
        };
        let split = text.find(|c: char| !c.is_ascii_digit()).ok_or_else(wrong)?;
        let (number, unit) = text.split_at(split);
        // At most 10 digits: any more is out of range whatever the unit, and the product
        // below cannot overflow.
        if number.is_empty() || number.len() > 10 {
            return Err(wrong());
        }
        let number: u64 = number.parse().map_err(|_| wrong())?;
        let unit: u64 = match unit {
            "m" => 60,
            "h" => 3_600,
            "d" => 86_400,
            "w" => 7 * 86_400,
            "y" => 365 * 86_400,
            _ => return Err(wrong()),
        };
        let seconds = number.checked_mul(unit).ok_or_else(wrong)?;
        if !(MIN_SECONDS..=MAX_SECONDS).contains(&seconds) {
            return Err(wrong());
        }
        Ok(Retention::Kept { seconds })
    }

    /// The time before which what became final is removed at `now`; None when kept for ever
    /// (or when the cut-off would be before the earliest time there is).
    pub fn cutoff(self, now: Timestamp) -> Option<Timestamp> {
        match self {
            Retention::Forever => None,
            Retention::Kept { seconds } => {
                let seconds = i64::try_from(seconds).ok()?;
                now.checked_sub_signed(Duration::try_seconds(seconds)?)
            }
        }
    }
}

impl std::fmt::Display for Retention {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Retention::Forever => f.write_str("off"),
            Retention::Kept { seconds } if seconds % 86_400 == 0 => {
                write!(f, "{}d", seconds / 86_400)
            }
            Retention::Kept { seconds } if seconds % 3_600 == 0 => {
                write!(f, "{}h", seconds / 3_600)
            }
            Retention::Kept { seconds } => write!(f, "{}m", seconds / 60),
        }
    }
}

/// The retention of each kind of history (`WORKBENCH_RETENTION` and its per-kind overrides).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionPolicy {
    /// Closed card instances, after they closed (`WORKBENCH_RETENTION_CARDS`).
    pub cards: Retention,
    /// Final invocations, after they ended, with their CSV tasks and rows
    /// (`WORKBENCH_RETENTION_INVOCATIONS`).
    pub invocations: Retention,
    /// Analytics events, after they happened (`WORKBENCH_RETENTION_EVENTS`).
    pub events: Retention,
    /// Webhook deliveries and attempts, and push jobs, after they became final
    /// (`WORKBENCH_RETENTION_DELIVERIES`).
    pub deliveries: Retention,
}

impl Default for RetentionPolicy {
    fn default() -> Self {
        RetentionPolicy::all(DEFAULT)
    }
}

impl RetentionPolicy {
    /// Every kind kept for `retention`.
    pub fn all(retention: Retention) -> Self {
        RetentionPolicy {
            cards: retention,
            invocations: retention,
            events: retention,
            deliveries: retention,
        }
    }

    /// The cut-off times at `now` (the database's clock).
    pub fn cutoffs(&self, now: Timestamp) -> Cutoffs {
        Cutoffs {
            now,
            cards: self.cards.cutoff(now),
            invocations: self.invocations.cutoff(now),
            events: self.events.cutoff(now),
            deliveries: self.deliveries.cutoff(now),
        }
    }
}

/// What one pass of pruning removes: each kind's rows that became final before its time; a
/// kind kept for ever has none. `now` removes what is useless at once (expired access tokens,
/// the rows of finished CSV tasks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cutoffs {
    /// The time of the pass, by the database's clock.
    pub now: Timestamp,
    /// Cards closed before this go.
    pub cards: Option<Timestamp>,
    /// Invocations that ended before this go.
    pub invocations: Option<Timestamp>,
    /// Events that happened before this go.
    pub events: Option<Timestamp>,
    /// Deliveries and push jobs final before this go.
    pub deliveries: Option<Timestamp>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn durations_and_off_are_read() {
        assert_eq!(Retention::parse("off"), Ok(Retention::Forever));
        assert_eq!(Retention::parse(" OFF "), Ok(Retention::Forever));
        assert_eq!(
            Retention::parse("90m"),
            Ok(Retention::Kept { seconds: 5_400 })
        );
        assert_eq!(
            Retention::parse("12h"),
            Ok(Retention::Kept { seconds: 43_200 })
        );
        assert_eq!(
            Retention::parse("30d"),
            Ok(Retention::Kept {
                seconds: 30 * 86_400
            })
        );
        assert_eq!(Retention::parse("1m"), Ok(Retention::Kept { seconds: 60 }));
        assert_eq!(
            Retention::parse("100y"),
            Ok(Retention::Kept {
                seconds: MAX_SECONDS
            })
        );
    }

    #[test]
    fn bad_and_out_of_range_durations_are_refused() {
        for bad in [
            "",
            "0m",
            "59s",
            "1s",
            "101y",
            "36501d",
            "d",
            "12",
            "1.5h",
            "-1d",
            "1 d",
            "1D",
            "99999999999999999999d",
            "1000000000y",
            "forever",
        ] {
            assert!(Retention::parse(bad).is_err(), "{bad:?} was accepted");
        }
        assert!(Retention::parse("0m")
            .expect_err("refused")
            .contains("1m to 100y"));
    }

    #[test]
    fn a_cutoff_is_the_retention_before_now() {
        let now = chrono::Utc
            .with_ymd_and_hms(2026, 11, 26, 12, 0, 0)
            .single()
            .expect("a time");
        assert_eq!(Retention::Forever.cutoff(now), None);
        assert_eq!(
            Retention::parse("12h").expect("accepted").cutoff(now),
            Some(
                chrono::Utc
                    .with_ymd_and_hms(2026, 11, 26, 0, 0, 0)
                    .single()
                    .expect("a time")
            )
        );
        // 100 years before the earliest time is no cut-off rather than an overflow.
        let early = chrono::DateTime::<chrono::Utc>::MIN_UTC;
        assert_eq!(
            Retention::parse("100y").expect("accepted").cutoff(early),
            None
        );
        let policy = RetentionPolicy {
            events: Retention::Forever,
            ..RetentionPolicy::all(Retention::parse("1m").expect("accepted"))
        };
        let cutoffs = policy.cutoffs(now);
        assert_eq!(cutoffs.events, None);
        assert_eq!(cutoffs.cards, Some(now - Duration::minutes(1)));
        assert_eq!(RetentionPolicy::default().cards, DEFAULT);
    }

    #[test]
    fn retentions_print_as_they_are_written() {
        for text in ["off", "365d", "12h", "90m"] {
            assert_eq!(Retention::parse(text).expect("accepted").to_string(), text);
        }
    }
}
