//! Query strings of list endpoints: parameters, and `limit`/`cursor` paging (contract §1).
//! A cursor is the base64url of the last item's key: opaque to clients, checked when read.
//! The list-with-cursor shape lives here: [`page_only`] reads a page, [`paged`] answers one.

use actix_web::HttpRequest;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use domain::{DomainError, FieldError, Page, PageRequest};

use super::shape::{listed, valid};
use crate::problem::ApiError;

pub struct Query {
    pairs: Vec<(String, String)>,
}

impl Query {
    pub fn parse(req: &HttpRequest) -> Result<Self, ApiError> {
        serde_urlencoded::from_str(req.query_string())
            .map(|pairs| Query { pairs })
            .map_err(|e| {
                ApiError::validation(vec![FieldError::new(
                    "query",
                    format!("cannot be read: {e}"),
                )])
            })
    }

    /// The parameter's last non-empty value.
    pub fn get(&self, key: &str) -> Option<String> {
        self.pairs
            .iter()
            .rev()
            .find(|(k, v)| k == key && !v.is_empty())
            .map(|(_, v)| v.clone())
    }

    /// The parameter's last value, empty or not: for a parameter whose values are a list of
    /// names, where an empty `status=` is no name of the list, not an absent filter.
    pub fn get_sent(&self, key: &str) -> Option<String> {
        self.pairs
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
    }

    /// A `true` / `false` parameter; None when absent, or (a problem added to `errors`) when
    /// it is neither.
    pub fn flag(&self, key: &str, errors: &mut Vec<FieldError>) -> Option<bool> {
        match self.get(key).as_deref() {
            None => None,
            Some("true") => Some(true),
            Some("false") => Some(false),
            Some(_) => {
                errors.push(FieldError::new(key, "must be true or false"));
                None
            }
        }
    }

    /// A parameter sent as one of the names of `P` (see [`one_of`]), as the domain's `T`; None
    /// when absent, or (a problem `message` added to `errors`) when it is no name of `P`.
    pub fn choice<P: serde::de::DeserializeOwned + Into<T>, T>(
        &self,
        key: &str,
        message: &str,
        errors: &mut Vec<FieldError>,
    ) -> Option<T> {
        let value = self.get_sent(key)?;
        let choice = one_of::<P>(&value);
        if choice.is_none() {
            errors.push(FieldError::new(key, message));
        }
        choice.map(P::into)
    }

    /// `limit` and `cursor`; problems are added to `errors`.
    pub fn page(&self, errors: &mut Vec<FieldError>) -> PageRequest {
        // An empty `limit=` is not a number either: refused, not read as no limit.
        let limit = match self.get_sent("limit").map(|l| l.parse::<i64>()) {
            None => None,
            Some(Ok(n)) => Some(n),
            // Not a number: PageRequest reports it with the range it takes.
            Some(Err(_)) => Some(0),
        };
        let after = self.get("cursor").and_then(|c| {
            let id = read_cursor(&c);
            if id.is_none() {
                errors.push(FieldError::new(
                    "cursor",
                    "is not a cursor this service returned",
                ));
            }
            id
        });
        match PageRequest::new(limit, after) {
            Ok(page) => page,
            Err(DomainError::Validation(mut e)) => {
                errors.append(&mut e);
                PageRequest::default()
            }
            Err(_) => PageRequest::default(),
        }
    }
}

/// The page a list's query asks for, when `limit` and `cursor` are its only parameters.
pub fn page_only(req: &HttpRequest) -> Result<PageRequest, ApiError> {
    let mut errors = Vec::new();
    let page = Query::parse(req)?.page(&mut errors);
    valid(errors)?;
    Ok(page)
}

/// A page as a list answers it: its items as the API shows them, and the `next` cursor.
pub fn paged<T, D: From<T>>(page: Page<T>) -> (Vec<D>, Option<String>) {
    (listed(page.items), cursor(page.next_after))
}

/// A parameter's value as one of the names of `T`, an enum of unit variants that documents the
/// parameter's values (its schema lists them), in any letter case; None for any other value.
pub fn one_of<T: serde::de::DeserializeOwned>(value: &str) -> Option<T> {
    use serde::de::IntoDeserializer;
    let value = value.to_ascii_lowercase();
    T::deserialize(IntoDeserializer::<serde::de::value::Error>::into_deserializer(value.as_str()))
        .ok()
}

/// The longest cursor read, in characters: longer than any a page hands out (keys are ids and
/// times), and a bound on the work a cursor can ask for.
const MAX_CURSOR_CHARS: usize = 1_024;
/// Bytes of the check a cursor carries after its key.
const CHECK_BYTES: usize = 8;

/// The check of a cursor's key: a cursor that no page handed out (made up, cut, or edited)
/// fails it, so it is refused rather than read as a key. It is no secret and needs none: the
/// key is a position in a list the caller may read anyway.
fn check(key: &[u8]) -> [u8; CHECK_BYTES] {
    use sha2::Digest;
    let digest = sha2::Sha256::new()
        .chain_update(b"workbench cursor\0")
        .chain_update(key)
        .finalize();
    let mut check = [0u8; CHECK_BYTES];
    check.copy_from_slice(&digest[..CHECK_BYTES]);
    check
}

/// The `next` of a page: the cursor after its last item, the base64url of its key and the
/// key's check.
pub fn cursor(after: Option<String>) -> Option<String> {
    after.map(|id| {
        let mut bytes = id.into_bytes();
        let check = check(&bytes);
        bytes.extend_from_slice(&check);
        URL_SAFE_NO_PAD.encode(bytes)
    })
}

/// The key a cursor of [`cursor`] carries; `None` for any text that no page handed out.
fn read_cursor(text: &str) -> Option<String> {
    if text.len() > MAX_CURSOR_CHARS {
        return None;
    }
    let mut bytes = URL_SAFE_NO_PAD.decode(text).ok()?;
    let at = bytes.len().checked_sub(CHECK_BYTES)?;
    let given = bytes.split_off(at);
    (given == check(&bytes)).then_some(())?;
    String::from_utf8(bytes).ok()
}

#[cfg(test)]
mod tests {
    use domain::bulk::PublicStatus;
    use domain::tasks::TaskKind;
    use domain::trigger::{InvocationStatus, Mode};

    use super::*;
    use crate::routes::tasks::{TaskKindParam, TaskStatusParam};
    use crate::routes::trigger::{InvocationStatusParam, ModeParam};

    fn page(query: &str) -> (PageRequest, Vec<FieldError>) {
        let pairs = serde_urlencoded::from_str(query).expect("a query string");
        let mut errors = Vec::new();
        let page = Query { pairs }.page(&mut errors);
        (page, errors)
    }

    #[test]
    fn a_cursor_reads_back_its_key_and_nothing_else_is_a_cursor() {
        let next = cursor(Some("2026-12-02T08:00:00Z fld_1".into())).expect("a cursor");
        assert_eq!(
            read_cursor(&next).as_deref(),
            Some("2026-12-02T08:00:00Z fld_1")
        );
        let forged = URL_SAFE_NO_PAD.encode("fld_1");
        let long = "A".repeat(5_000);
        let cut = &next[..next.len() - 1];
        for bad in [forged.as_str(), long.as_str(), cut, "", "eS1saXZl", "!!"] {
            assert_eq!(read_cursor(bad), None, "{bad:?}");
        }
        // The format is fixed: .ci/api-fuzz-setup.py writes this cursor for its fuzzing.
        assert_eq!(
            cursor(Some("fuzz-user".into())).as_deref(),
            Some("ZnV6ei11c2VyB-_Do16ECuk")
        );
        let (_, errors) = page(&format!("cursor={long}"));
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].field, "cursor");
    }

    #[test]
    fn an_empty_limit_is_refused_not_read_as_the_default() {
        let (_, errors) = page("limit=");
        let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(fields, ["limit"]);
    }

    #[test]
    fn an_empty_value_is_sent_but_not_got() {
        let pairs = serde_urlencoded::from_str("status=&mode=live").expect("a query string");
        let query = Query { pairs };
        assert_eq!(query.get("status"), None);
        assert_eq!(query.get_sent("status").as_deref(), Some(""));
        assert_eq!(query.get_sent("kind"), None);
        assert_eq!(query.get_sent("mode").as_deref(), Some("live"));
    }

    #[test]
    fn no_limit_and_a_limit_in_range_are_read() {
        assert!(page("").1.is_empty());
        assert!(page("limit=500").1.is_empty());
        assert_eq!(page("limit=0").1.len(), 1);
    }

    #[test]
    fn a_value_is_one_of_the_names_in_any_letter_case_and_nothing_else() {
        assert_eq!(
            one_of::<ModeParam>("TeSt").map(Mode::from),
            Some(Mode::Test)
        );
        for bad in ["", "tests", " live", "live ", "0", "li%65"] {
            assert!(one_of::<ModeParam>(bad).is_none(), "{bad}");
        }
    }

    /// The parameters name every value the domain has, as the API spells it.
    #[test]
    fn list_parameters_take_every_value_the_domain_spells() {
        use InvocationStatus::*;
        for s in [Pending, Running, Completed, Failed, Cancelled] {
            let param = one_of::<InvocationStatusParam>(s.as_str()).map(InvocationStatus::from);
            assert_eq!(param, Some(s));
        }
        for m in [Mode::Live, Mode::Test] {
            assert_eq!(one_of::<ModeParam>(m.as_str()).map(Mode::from), Some(m));
        }
        for k in [TaskKind::Csv, TaskKind::Cancel] {
            assert_eq!(
                one_of::<TaskKindParam>(k.as_str()).map(TaskKind::from),
                Some(k)
            );
        }
        for s in [
            PublicStatus::Pending,
            PublicStatus::Processing,
            PublicStatus::Completed,
            PublicStatus::Failed,
        ] {
            let param = one_of::<TaskStatusParam>(s.as_str()).map(PublicStatus::from);
            assert_eq!(param, Some(s));
        }
    }
}
