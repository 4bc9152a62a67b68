//! Rate limits (contract §16): a token bucket per customer key, and on the token exchange one
//! per client id and one per client address. They are per process: behind a load balancer
//! with `n` replicas, a caller spread over all of them gets up to `n` times the rate.
//!
//! Every answer to a limited caller says where it stands (`RateLimit-Limit`,
//! `RateLimit-Remaining`, `RateLimit-Reset`); beyond the limit the answer is 429
//! `rate_limited` with `Retry-After`.

use std::fmt;
use std::hash::{BuildHasher, Hash, RandomState};
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use actix_web::http::header::{HeaderMap, HeaderName, HeaderValue};
use actix_web::{HttpMessage, HttpRequest};
use governor::clock::{Clock, DefaultClock};
use governor::middleware::StateInformationMiddleware;
use governor::state::keyed::DefaultKeyedStateStore;
use governor::{Quota, RateLimiter};

use crate::problem::ApiError;

/// A sustained rate: `count` requests per `period`, with a burst of twice `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    count: u32,
    period: Period,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Period {
    Second,
    Minute,
    Hour,
}

impl Period {
    fn duration(self) -> Duration {
        Duration::from_secs(match self {
            Period::Second => 1,
            Period::Minute => 60,
            Period::Hour => 3600,
        })
    }
}

impl Rate {
    /// The largest count a rate may have (its burst, twice that, still fits a `u32`).
    pub const MAX_COUNT: u32 = 1_000_000;

    /// `count` requests a second.
    pub fn per_second(count: u32) -> Option<Rate> {
        Self::checked(count, Period::Second)
    }

    /// `count` requests a minute.
    pub fn per_minute(count: u32) -> Option<Rate> {
        Self::checked(count, Period::Minute)
    }

    fn checked(count: u32, period: Period) -> Option<Rate> {
        (1..=Self::MAX_COUNT)
            .contains(&count)
            .then_some(Rate { count, period })
    }

    /// Reads `200/s`, `10/min` or `1000/h` (also `sec`, `second`, `m`, `minute`, `hour`), or
    /// `off` (`Ok(None)`). The count is 1 to [`Rate::MAX_COUNT`].
    pub fn parse(text: &str) -> Result<Option<Rate>, String> {
        let text = text.trim();
        if text.eq_ignore_ascii_case("off") {
            return Ok(None);
        }
        let wrong = || {
            format!(
                "must be `off` or a rate such as `200/s`, `10/min` or `1000/h` (1 to {} per \
                    period), got `{text}`",
                Self::MAX_COUNT
            )
        };
        let (count, period) = text.split_once('/').ok_or_else(wrong)?;
        let count: u32 = count.trim().parse().map_err(|_| wrong())?;
        let period = match period.trim().to_ascii_lowercase().as_str() {
            "s" | "sec" | "second" => Period::Second,
            "m" | "min" | "minute" => Period::Minute,
            "h" | "hour" => Period::Hour,
            _ => return Err(wrong()),
        };
        Self::checked(count, period).map(Some).ok_or_else(wrong)
    }

    /// Twice the sustained count: what a caller may send at once after a quiet spell.
    pub fn burst(self) -> u32 {
        self.count.saturating_mul(2)
    }

    /// The time one request's worth of the bucket takes to refill.
    fn interval(self) -> Duration {
        self.period.duration() / self.count
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let unit = match self.period {
            Period::Second => "s",
            Period::Minute => "min",
            Period::Hour => "h",
        };
        write!(f, "{}/{unit}", self.count)
    }
}

/// The limits of one process, as configured; `None` turns one off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimitOptions {
    /// `WORKBENCH_RATE_LIMIT_KEY`: per customer key (client id), on every authenticated route.
    pub key: Option<Rate>,
    /// `WORKBENCH_RATE_LIMIT_TOKEN`: per client id and per client address on
    /// `POST /oauth/token`.
    pub token: Option<Rate>,
    /// `WORKBENCH_RATE_LIMIT_USER`: per end user signed in with a token of an SDK key
    /// (contract §15), on that user's routes.
    pub user: Option<Rate>,
}

impl Default for RateLimitOptions {
    /// Contract §16: 200/s per key, 10/min on the token exchange, 20/s per end user.
    fn default() -> Self {
        Self {
            key: Rate::per_second(200),
            token: Rate::per_minute(10),
            user: Rate::per_second(20),
        }
    }
}

/// Where a caller stands after one request: the `RateLimit-*` headers, and `Retry-After` when
/// it was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allowance {
    /// The bucket's size.
    pub limit: u32,
    /// Requests that may still be sent at once.
    pub remaining: u32,
    /// Seconds until the bucket is full again (refused: until the next request may go).
    pub reset: u64,
    /// Refused: seconds until the next request may go (at least 1).
    pub retry_after: Option<u64>,
}

const RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("ratelimit-limit");
const RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("ratelimit-remaining");
const RATELIMIT_RESET: HeaderName = HeaderName::from_static("ratelimit-reset");

impl Allowance {
    /// Writes the `RateLimit-*` headers.
    pub(crate) fn write(&self, headers: &mut HeaderMap) {
        headers.insert(RATELIMIT_LIMIT, HeaderValue::from(self.limit));
        headers.insert(RATELIMIT_REMAINING, HeaderValue::from(self.remaining));
        headers.insert(RATELIMIT_RESET, HeaderValue::from(self.reset));
    }

    /// The 429 of a refused request; `None` when it was allowed.
    pub(crate) fn refusal(&self, what: &str) -> Option<ApiError> {
        self.retry_after
            .map(|seconds| ApiError::rate_limited(seconds, what))
    }

    /// Of two allowances of one request, the one that binds first.
    fn tighter(self, other: Allowance) -> Allowance {
        match (self.retry_after, other.retry_after) {
            (Some(_), None) => self,
            (None, Some(_)) => other,
            (Some(a), Some(b)) if b > a => other,
            (Some(_), Some(_)) => self,
            (None, None) if other.remaining < self.remaining => other,
            (None, None) => self,
        }
    }
}

/// Whole seconds, rounded up.
fn ceil_seconds(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

type Keyed<K> = RateLimiter<K, DefaultKeyedStateStore<K>, DefaultClock, StateInformationMiddleware>;

/// How often buckets that are full again are forgotten, so that memory follows the callers
/// of the last minutes, not every caller ever seen.
const SWEEP_EVERY: Duration = Duration::from_secs(60);

/// One bucket per key, of one rate.
struct Buckets<K: Hash + Eq + Clone> {
    limiter: Keyed<K>,
    rate: Rate,
    clock: DefaultClock,
    started: Instant,
    /// Seconds after `started` of the last sweep.
    swept: AtomicU64,
}

impl<K: Hash + Eq + Clone> Buckets<K> {
    fn new(rate: Rate) -> Option<Self> {
        let burst = NonZeroU32::new(rate.burst())?;
        let quota = Quota::with_period(rate.interval())?.allow_burst(burst);
        Some(Self {
            limiter: RateLimiter::keyed(quota).with_middleware::<StateInformationMiddleware>(),
            rate,
            clock: DefaultClock::default(),
            started: Instant::now(),
            swept: AtomicU64::new(0),
        })
    }

    fn check(&self, key: &K) -> Allowance {
        self.sweep();
        let limit = self.rate.burst();
        match self.limiter.check_key(key) {
            Ok(snapshot) => {
                let remaining = snapshot.remaining_burst_capacity();
                let used = limit.saturating_sub(remaining);
                Allowance {
                    limit,
                    remaining,
                    reset: ceil_seconds(self.rate.interval().saturating_mul(used)),
                    retry_after: None,
                }
            }
            Err(not_until) => {
                let wait = ceil_seconds(not_until.wait_time_from(self.clock.now())).max(1);
                Allowance {
                    limit,
                    remaining: 0,
                    reset: wait,
                    retry_after: Some(wait),
                }
            }
        }
    }

    fn sweep(&self) {
        let now = self.started.elapsed().as_secs();
        let last = self.swept.load(Ordering::Relaxed);
        if now.saturating_sub(last) < SWEEP_EVERY.as_secs() {
            return;
        }
        // One thread sweeps; the others go on.
        if self
            .swept
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            self.limiter.retain_recent();
            self.limiter.shrink_to_fit();
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.limiter.len()
    }
}

/// The rate limits of one process.
pub struct RateLimits {
    /// Keys are hashed with a per-process random seed: a bucket costs the same whatever the
    /// length of the id a caller sends, and ids cannot be chosen to collide.
    hasher: RandomState,
    key: Option<Buckets<u64>>,
    user: Option<Buckets<u64>>,
    token_client: Option<Buckets<u64>>,
    token_address: Option<Buckets<IpAddr>>,
}

impl RateLimits {
    /// Empty buckets for `options`.
    pub fn new(options: RateLimitOptions) -> Self {
        Self {
            hasher: RandomState::new(),
            key: options.key.and_then(Buckets::new),
            user: options.user.and_then(Buckets::new),
            token_client: options.token.and_then(Buckets::new),
            token_address: options.token.and_then(Buckets::new),
        }
    }

    /// Admits one request of `req` against `allowance` (when limited): the allowance is kept on
    /// the request, for the answer's `RateLimit-*` headers, and a caller past it (`who`) is
    /// refused with 429.
    fn admit(
        req: &HttpRequest,
        allowance: Option<Allowance>,
        who: &str,
    ) -> Result<Option<Allowance>, ApiError> {
        if let Some(allowance) = allowance {
            req.extensions_mut().insert(allowance);
            if let Some(refusal) = allowance.refusal(who) {
                return Err(refusal);
            }
        }
        Ok(allowance)
    }

    /// Admits one request of the customer key `client_id` (the API's and the console's).
    pub(crate) fn admit_key(&self, req: &HttpRequest, client_id: &str) -> Result<(), ApiError> {
        Self::admit(req, self.key(client_id), "this API key").map(|_| ())
    }

    /// Admits one token exchange from `req`'s client address, before its credentials are read;
    /// the allowance, for [`RateLimits::admit_token_client`].
    pub(crate) fn admit_token_address(
        &self,
        req: &HttpRequest,
    ) -> Result<Option<Allowance>, ApiError> {
        let client = req
            .extensions()
            .get::<crate::client::ClientAddress>()
            .map(|c| c.0);
        Self::admit(req, self.token_address(client), "this client address")
    }

    /// Admits one token exchange for `client_id`, after its address was admitted.
    pub(crate) fn admit_token_client(
        &self,
        req: &HttpRequest,
        client_id: &str,
        by_address: Option<Allowance>,
    ) -> Result<(), ApiError> {
        Self::admit(req, self.token_client(client_id, by_address), "this client").map(|_| ())
    }

    /// One request of the customer key `client_id`; `None` when keys are not limited.
    pub(crate) fn key(&self, client_id: &str) -> Option<Allowance> {
        let buckets = self.key.as_ref()?;
        Some(buckets.check(&self.hasher.hash_one(client_id)))
    }

    /// One request of an end user signed in with a token (`caller` names the SDK key and the
    /// user); `None` when end users are not limited.
    pub(crate) fn user(&self, caller: &str) -> Option<Allowance> {
        let buckets = self.user.as_ref()?;
        Some(buckets.check(&self.hasher.hash_one(caller)))
    }

    /// One token exchange from `address` (when known), before its credentials are read.
    pub(crate) fn token_address(&self, address: Option<IpAddr>) -> Option<Allowance> {
        let buckets = self.token_address.as_ref()?;
        Some(buckets.check(&network(address?)))
    }

    /// One token exchange for `client_id`, after its address was let through: the allowance
    /// that binds first of the two.
    pub(crate) fn token_client(
        &self,
        client_id: &str,
        by_address: Option<Allowance>,
    ) -> Option<Allowance> {
        let by_client = self
            .token_client
            .as_ref()
            .map(|b| b.check(&self.hasher.hash_one(client_id)));
        match (by_client, by_address) {
            (Some(a), Some(b)) => Some(a.tighter(b)),
            (a, b) => a.or(b),
        }
    }
}

/// The network a client address stands for: an IPv6 client usually holds a whole /64, so it
/// counts as one; an IPv4 address mapped into IPv6 is that IPv4 address.
fn network(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let mut segments = v6.segments();
                segments[4..].fill(0);
                IpAddr::V6(segments.into())
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_read_with_their_period_and_off_turns_them_off() {
        assert_eq!(Rate::parse("200/s"), Ok(Rate::per_second(200)));
        assert_eq!(Rate::parse(" 10/min "), Ok(Rate::per_minute(10)));
        assert_eq!(Rate::parse("10/M"), Ok(Rate::per_minute(10)));
        assert_eq!(Rate::parse("OFF"), Ok(None));
        let hourly = Rate::parse("1000/h").ok().flatten();
        assert_eq!(hourly.map(|r| r.to_string()), Some("1000/h".to_owned()));
        assert_eq!(hourly.map(Rate::burst), Some(2000));
    }

    #[test]
    fn a_rate_out_of_range_or_misspelt_is_refused_with_what_is_expected() {
        for bad in [
            "",
            "0/s",
            "-1/s",
            "200",
            "200/day",
            "s/200",
            "1000001/s",
            "99999999999/s",
            "2.5/s",
            "200/ s/",
        ] {
            let err = Rate::parse(bad).expect_err(bad);
            assert!(err.contains("`200/s`"), "{bad}: {err}");
        }
    }

    #[test]
    fn a_key_gets_its_burst_then_429_with_the_wait_and_another_key_is_not_slowed() {
        let limits = RateLimits::new(RateLimitOptions {
            key: Rate::per_minute(3),
            token: None,
            user: None,
        });
        for sent in 1..=6u32 {
            let allowance = limits.key("k1").expect("limited");
            assert_eq!(allowance.limit, 6);
            assert_eq!(allowance.remaining, 6 - sent);
            assert_eq!(allowance.retry_after, None);
            // Each request used takes 20 s to refill.
            assert!(allowance.reset <= 20 * u64::from(sent), "{allowance:?}");
        }
        let refused = limits.key("k1").expect("limited");
        assert_eq!(refused.remaining, 0);
        let wait = refused.retry_after.expect("refused");
        assert!((1..=20).contains(&wait), "{refused:?}");
        assert!(refused.refusal("this key").is_some());

        let other = limits.key("k2").expect("limited");
        assert_eq!((other.remaining, other.retry_after), (5, None));
    }

    #[test]
    fn off_limits_nothing() {
        let limits = RateLimits::new(RateLimitOptions {
            key: None,
            token: None,
            user: None,
        });
        assert_eq!(limits.key("k1"), None);
        assert_eq!(limits.user("sdk_1/u1"), None);
        assert_eq!(limits.token_address("127.0.0.1".parse().ok()), None);
        assert_eq!(limits.token_client("c1", None), None);
    }

    #[test]
    fn the_token_exchange_is_limited_by_client_and_by_address_whichever_binds_first() {
        let limits = RateLimits::new(RateLimitOptions {
            key: None,
            token: Rate::per_minute(1),
            user: None,
        });
        let here: Option<IpAddr> = "10.0.0.1".parse().ok();
        // Two exchanges from one address, for two clients: the address's bucket (2) is empty.
        for client in ["a", "b"] {
            let by_address = limits.token_address(here);
            assert_eq!(by_address.and_then(|a| a.retry_after), None);
            let both = limits.token_client(client, by_address).expect("limited");
            assert_eq!(both.retry_after, None);
        }
        let refused = limits.token_address(here).expect("limited");
        assert!(refused.retry_after.is_some());
        // Another address, for client `a`, whose own bucket has one left.
        let there = limits.token_address("10.0.0.2".parse().ok());
        let allowed = limits.token_client("a", there).expect("limited");
        assert_eq!((allowed.remaining, allowed.retry_after), (0, None));
        let there = limits.token_address("10.0.0.2".parse().ok());
        let refused = limits.token_client("a", there).expect("limited");
        assert!(refused.retry_after.is_some(), "{refused:?}");
    }

    #[test]
    fn an_ipv6_client_counts_as_its_slash_64_and_mapped_ipv4_as_ipv4() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().expect("ip");
        let b: IpAddr = "2001:db8:1:2:bbbb::2".parse().expect("ip");
        assert_eq!(network(a), network(b));
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().expect("ip");
        assert_eq!(network(mapped), "10.0.0.1".parse::<IpAddr>().expect("ip"));
    }

    #[test]
    fn invented_client_ids_of_any_length_cost_one_small_bucket_each() {
        let limits = RateLimits::new(RateLimitOptions {
            key: None,
            token: Rate::per_minute(10),
            user: Rate::per_second(20),
        });
        let huge = "x".repeat(1 << 20);
        let _ = limits.token_client(&huge, None);
        let _ = limits.token_client(&format!("{huge}y"), None);
        assert_eq!(limits.token_client.as_ref().map(Buckets::len), Some(2));
    }
}
