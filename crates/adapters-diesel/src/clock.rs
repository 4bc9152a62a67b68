//! One clock for every shared decision (contract §19): the database's. Leases, due and retry
//! times, card deadlines and the timestamps the API returns all come from the domain's `Clock`
//! port; [`DatabaseClock`] answers it with the host's clock corrected by its measured offset to
//! the database's (`clock_timestamp()` on PostgreSQL, read between two host readings and taken
//! at the midpoint of the shortest of a few round trips). Replicas whose wall clocks disagree
//! still agree on the time: within half a round trip, milliseconds on a LAN. On SQLite the
//! database's clock is the host's and the offset is 0.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use chrono::SubsecRound;
use domain::{Clock, StorageError, Timestamp};

use crate::Database;

/// Round trips per measurement: the shortest one is kept.
const SAMPLES: usize = 5;

/// The database's time, kept by the process: at each measurement of the host's offset to the
/// database's, the database's time is anchored to a monotonic instant, and read from it until
/// the next measurement. A host clock that jumps (an NTP step, an operator) changes nothing
/// until then: the offset measured next takes the jump in.
pub struct DatabaseClock {
    /// The host's clock: the system's, or a skewed one in tests.
    host: Arc<dyn Clock>,
    /// What readings are counted from.
    anchor: Instant,
    /// The database's time at `anchor`, in unix milliseconds.
    base_ms: AtomicI64,
    /// The last offset measured: the database's time minus the host's, in milliseconds.
    offset_ms: AtomicI64,
}

impl Default for DatabaseClock {
    fn default() -> Self {
        Self::over(Arc::new(domain::SystemClock))
    }
}

impl DatabaseClock {
    /// Over `host`, with no offset measured yet: the host's time until one is.
    pub fn over(host: Arc<dyn Clock>) -> Self {
        let clock = Self {
            host,
            anchor: Instant::now(),
            base_ms: AtomicI64::new(0),
            offset_ms: AtomicI64::new(0),
        };
        clock.set_offset_ms(0);
        clock
    }

    /// The database's time minus the host's, in milliseconds, as last measured.
    pub fn offset_ms(&self) -> i64 {
        self.offset_ms.load(Ordering::Relaxed)
    }

    /// Sets the offset (what [`measure`] found), anchoring the database's time to now.
    pub fn set_offset_ms(&self, ms: i64) {
        let database = self.host.now().timestamp_millis().saturating_add(ms);
        let elapsed = i64::try_from(self.anchor.elapsed().as_millis()).unwrap_or(i64::MAX);
        self.base_ms
            .store(database.saturating_sub(elapsed), Ordering::Relaxed);
        self.offset_ms.store(ms, Ordering::Relaxed);
    }
}

impl Clock for DatabaseClock {
    fn now(&self) -> Timestamp {
        let elapsed = i64::try_from(self.anchor.elapsed().as_millis()).unwrap_or(i64::MAX);
        let ms = self.base_ms.load(Ordering::Relaxed).saturating_add(elapsed);
        chrono::DateTime::from_timestamp_millis(ms)
            .unwrap_or_else(|| self.host.now())
            .trunc_subsecs(3)
    }
}

/// The offset from `readings` of (host before, database, host after): the database's time
/// minus the midpoint of the reading with the shortest round trip.
fn offset_of(readings: &[(Timestamp, Timestamp, Timestamp)]) -> Option<i64> {
    readings
        .iter()
        .filter(|(before, _, after)| after >= before)
        .min_by_key(|(before, _, after)| *after - *before)
        .map(|(before, database, after)| {
            let midpoint = *before + (*after - *before) / 2;
            (*database - midpoint).num_milliseconds()
        })
}

/// Measures the offset of `clock`'s host once.
pub async fn measure(db: &Database, clock: &DatabaseClock) -> Result<i64, StorageError> {
    let mut readings = Vec::with_capacity(SAMPLES);
    for _ in 0..SAMPLES {
        // The database's reading is bracketed by the system clock's; the host clock's own
        // offset to the system clock (0 but in tests) is added back.
        let skew = (clock.host.now() - chrono::Utc::now()).num_milliseconds();
        let (before, database, after) = db.clock_reading().await?;
        let host = |t: Timestamp| {
            t.checked_add_signed(chrono::Duration::milliseconds(skew))
                .unwrap_or(t)
        };
        readings.push((host(before), database, host(after)));
    }
    Ok(offset_of(&readings).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(ms: i64) -> Timestamp {
        chrono::Utc
            .timestamp_millis_opt(1_800_000_000_000 + ms)
            .single()
            .expect("time")
    }

    #[test]
    fn the_offset_is_taken_at_the_midpoint_of_the_shortest_round_trip() {
        // The database is 300 s ahead. A slow round trip (100 ms) would be off by up to 50 ms.
        let readings = [
            (at(0), at(300_000 + 90), at(100)),
            (at(1_000), at(301_000 + 5), at(1_010)),
        ];
        assert_eq!(offset_of(&readings), Some(300_000));
        assert_eq!(offset_of(&[]), None);
    }

    /// A host clock that can be moved.
    struct Movable(AtomicI64);

    impl Clock for Movable {
        fn now(&self) -> Timestamp {
            chrono::Utc::now() + chrono::Duration::milliseconds(self.0.load(Ordering::Relaxed))
        }
    }

    #[test]
    fn a_host_clock_that_jumps_moves_nothing_until_the_next_measurement() {
        let host = Arc::new(Movable(AtomicI64::new(0)));
        let clock = DatabaseClock::over(host.clone());
        clock.set_offset_ms(0);
        host.0.store(3_600_000, Ordering::Relaxed);
        let off = (clock.now() - chrono::Utc::now()).num_milliseconds();
        assert!(off.abs() < 100, "{off}");
    }

    #[test]
    fn the_clock_answers_the_hosts_time_plus_the_offset() {
        let clock = DatabaseClock::default();
        clock.set_offset_ms(-40_000);
        let host = chrono::Utc::now();
        let now = clock.now();
        let diff = (host - now).num_milliseconds();
        assert!((39_900..=40_100).contains(&diff), "{diff}");
    }
}
