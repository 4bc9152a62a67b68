//! Pagination of lists that can grow without bound: `limit` (default 50, at most 500) and an
//! opaque `cursor`; the answer says where the next page starts (docs/api.md, Action Flows).
//!
//! Lists ordered by id take the previous page's last id as their key. Lists ordered newest
//! first by creation time (invocations, tasks), whose ids do not follow time, take the last
//! item's time and id ([`newest_first_key`]), and ask storage for what comes [`After`] it.

use chrono::{DateTime, SecondsFormat, Utc};

use crate::time::in_range;
use crate::{DomainError, FieldError, Timestamp};

/// The `limit` of a request that gives none.
pub const DEFAULT_LIMIT: u32 = 50;
/// The largest `limit` accepted.
pub const MAX_LIMIT: u32 = 500;

/// A page request: at most `limit` items after the item whose key is `after`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageRequest {
    /// Items wanted, from 1 to [`MAX_LIMIT`].
    pub limit: u32,
    /// The key of the previous page's last item (the `cursor`, decoded); `None` for the first
    /// page.
    pub after: Option<String>,
}

impl PageRequest {
    /// Validates a requested limit and a cursor already decoded to an item key. No limit is
    /// [`DEFAULT_LIMIT`]; one outside 1 to [`MAX_LIMIT`] is a [`DomainError::Validation`] on
    /// `limit`.
    pub fn new(limit: Option<i64>, after: Option<String>) -> Result<Self, DomainError> {
        let limit = match limit {
            None => DEFAULT_LIMIT,
            Some(n) if (1..=i64::from(MAX_LIMIT)).contains(&n) => n as u32,
            Some(_) => {
                return Err(DomainError::Validation(vec![FieldError::new(
                    "limit",
                    format!("must be a whole number from 1 to {MAX_LIMIT}"),
                )]))
            }
        };
        Ok(Self { limit, after })
    }
}

impl Default for PageRequest {
    fn default() -> Self {
        Self {
            limit: DEFAULT_LIMIT,
            after: None,
        }
    }
}

/// One page, and the key of its last item when more follow. A repository fetches
/// `limit + 1` items and builds it with [`Page::from_overfetch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page<T> {
    /// At most the requested `limit` items, in the list's order.
    pub items: Vec<T>,
    /// The key of the last item when more follow: the next request's `after` (the API hands
    /// it out encoded, as the `next` cursor). `None` on the last page.
    pub next_after: Option<String>,
}

impl<T> Page<T> {
    /// From up to `limit + 1` items fetched: the extra one only says that more follow.
    pub fn from_overfetch(mut items: Vec<T>, limit: u32, key: impl Fn(&T) -> String) -> Self {
        let more = items.len() > limit as usize;
        items.truncate(limit as usize);
        let next_after = if more { items.last().map(key) } else { None };
        Page { items, next_after }
    }
}

/// Where a page of a list ordered newest first starts: a repository answers only the items
/// after it in that order, which is by creation time, then by id, both descending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum After<Id> {
    /// After this item: items created before `created`, and those created at `created` whose
    /// id is less than `id`.
    Item {
        /// The item's creation time.
        created: Timestamp,
        /// The item's id.
        id: Id,
    },
    /// Items created before this instant.
    CreatedBefore(Timestamp),
    /// Items created at this instant or before.
    CreatedAtOrBefore(Timestamp),
}

/// The key of an item of a list ordered newest first: its creation time, to the nanosecond,
/// and `id`, which may hold anything. [`parse_newest_first_key`] reads it back.
pub fn newest_first_key(created: &Timestamp, id: &str) -> String {
    format!(
        "{}|{id}",
        created.to_rfc3339_opts(SecondsFormat::Nanos, true)
    )
}

/// The creation time and id of a key [`newest_first_key`] wrote; None for any other text, and
/// for a time outside the range every stored instant lies in (docs/api.md, Bounded values).
pub fn parse_newest_first_key(key: &str) -> Option<(Timestamp, &str)> {
    let (time, id) = key.split_once('|')?;
    let created = DateTime::parse_from_rfc3339(time).ok()?.with_timezone(&Utc);
    in_range(&created).then_some((created, id))
}

/// The answer to a `cursor` that no page of this list handed out: a
/// [`DomainError::Validation`] on `cursor`.
pub fn bad_cursor() -> DomainError {
    DomainError::invalid("cursor", "is not a cursor this service returned")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_newest_first_key_reads_back_exactly_and_nothing_else_reads() {
        let at = crate::testing::t0() + chrono::Duration::nanoseconds(123_456_789);
        for id in ["inv_1", "a|b", "", "ünïcode id"] {
            let key = newest_first_key(&at, id);
            assert_eq!(parse_newest_first_key(&key), Some((at, id)), "{key}");
        }
        for bad in [
            "",
            "inv_1",
            "yesterday|inv_1",
            "1969-12-31T23:59:59Z|inv_1",
            "+10000-01-01T00:00:00Z|inv_1",
        ] {
            assert_eq!(parse_newest_first_key(bad), None, "{bad}");
        }
    }
}
