//! Pagination of lists that can grow without bound: `limit` (default 50, at most 500) and an
//! opaque `cursor`; the answer says where the next page starts (docs/api.md, Action Flows).

use crate::{DomainError, FieldError};

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
