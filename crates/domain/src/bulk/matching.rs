//! Rows without a `target.attributes.id` target the end users whose attributes hold the row's
//! values. One step's rows are matched together, in one read of the environment's users: a
//! row reading them all for itself made every row pay for a read of the whole environment.
//!
//! The rule is the row's [`Filter`](crate::audience::Filter) (`eq` on each attribute): an index
//! of the rows by their values only picks the candidates, and the filter decides.

use std::collections::HashMap;

use crate::audience::{EndUser, Filter};

use super::MAX_USERS_PER_ROW;

/// A row to match: its number, its attributes (`field`, `value`; no `id`), and its filter.
pub(super) struct Wanted {
    pub number: u64,
    pub attributes: Vec<(String, String)>,
    pub filter: Filter,
}

/// What one row matched: the users' ids in ascending order, or why it targets no one.
pub(super) type Matched = Result<Vec<String>, String>;

/// The rows of one step, indexed by their fields and then by their values.
pub(super) struct Matcher {
    wanted: Vec<Wanted>,
    found: Vec<Vec<String>>,
    /// Field names (sorted, as a row's attributes are) → the rows' values in that order → the
    /// rows with those values.
    index: HashMap<Vec<String>, HashMap<Vec<String>, Vec<usize>>>,
}

impl Matcher {
    pub(super) fn new(wanted: Vec<Wanted>) -> Self {
        let mut index: HashMap<Vec<String>, HashMap<Vec<String>, Vec<usize>>> = HashMap::new();
        for (i, row) in wanted.iter().enumerate() {
            let (fields, values): (Vec<String>, Vec<String>) =
                row.attributes.iter().cloned().unzip();
            index
                .entry(fields)
                .or_default()
                .entry(values)
                .or_default()
                .push(i);
        }
        let found = vec![Vec::new(); wanted.len()];
        Self {
            wanted,
            found,
            index,
        }
    }

    /// Whether there is nothing to match (no user need be read).
    pub(super) fn is_empty(&self) -> bool {
        self.wanted.is_empty()
    }

    /// Offers one user, in ascending order of id, to every row.
    pub(super) fn offer(&mut self, user: &EndUser) {
        for (fields, by_values) in &self.index {
            // A candidate holds a text value in every field; anything else cannot equal a
            // CSV cell, which is text.
            let values: Option<Vec<String>> = fields
                .iter()
                .map(|f| {
                    user.attributes
                        .get(f)
                        .and_then(|v| v.as_str())
                        .map(str::to_owned)
                })
                .collect();
            let Some(rows) = values.and_then(|values| by_values.get(&values)) else {
                continue;
            };
            for &i in rows {
                let (Some(row), Some(found)) = (self.wanted.get(i), self.found.get_mut(i)) else {
                    continue;
                };
                // One more than allowed is enough to refuse the row.
                if found.len() <= MAX_USERS_PER_ROW && row.filter.matches(user) {
                    found.push(user.id.clone().into());
                }
            }
        }
    }

    /// Each row's outcome, by row number.
    pub(super) fn finish(self) -> HashMap<u64, Matched> {
        self.wanted
            .into_iter()
            .zip(self.found)
            .map(|(row, found)| {
                let outcome = if found.len() > MAX_USERS_PER_ROW {
                    Err(format!("matches more than {MAX_USERS_PER_ROW} end users"))
                } else if found.is_empty() {
                    Err("matches no end user".into())
                } else {
                    Ok(found)
                };
                (row.number, outcome)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::testing::t0;

    fn user(id: &str, attributes: serde_json::Value) -> EndUser {
        EndUser {
            environment_id: "env_1".into(),
            id: id.into(),
            test_user: false,
            tags: Vec::new(),
            attributes: attributes.as_object().cloned().unwrap_or_default(),
            created: t0(),
            updated: t0(),
        }
    }

    fn wanted(number: u64, attributes: &[(&str, &str)]) -> Wanted {
        let conditions: Vec<_> = attributes
            .iter()
            .map(|(f, v)| json!({"field": format!("attributes.{f}"), "op": "eq", "value": v}))
            .collect();
        Wanted {
            number,
            attributes: attributes
                .iter()
                .map(|(f, v)| ((*f).to_owned(), (*v).to_owned()))
                .collect(),
            filter: Filter::parse(&json!({"match": "all", "conditions": conditions}), "t")
                .expect("filter"),
        }
    }

    #[test]
    fn rows_match_the_users_whose_text_attributes_hold_their_values() {
        let mut matcher = Matcher::new(vec![
            wanted(1, &[("country", "NZ")]),
            wanted(2, &[("country", "NZ"), ("plan", "gold")]),
            wanted(3, &[("age", "42")]),
            wanted(4, &[("country", "AU")]),
        ]);
        for u in [
            user("u1", json!({"country": "NZ", "plan": "gold", "age": 42})),
            user("u2", json!({"country": "NZ", "plan": "free"})),
            user("u3", json!({"country": "nz", "plan": "gold"})),
        ] {
            matcher.offer(&u);
        }
        let outcome = matcher.finish();
        assert_eq!(outcome[&1], Ok(vec!["u1".to_owned(), "u2".to_owned()]));
        assert_eq!(outcome[&2], Ok(vec!["u1".to_owned()]));
        // The number 42 is not the text "42", as the filter says.
        assert_eq!(outcome[&3], Err("matches no end user".to_owned()));
        assert_eq!(outcome[&4], Err("matches no end user".to_owned()));
    }

    #[test]
    fn a_row_matching_too_many_users_is_refused() {
        let mut matcher = Matcher::new(vec![wanted(7, &[("team", "all")])]);
        for n in 0..=MAX_USERS_PER_ROW {
            matcher.offer(&user(&format!("u{n:03}"), json!({"team": "all"})));
        }
        let outcome = matcher.finish();
        assert_eq!(
            outcome[&7],
            Err(format!("matches more than {MAX_USERS_PER_ROW} end users"))
        );
    }
}
