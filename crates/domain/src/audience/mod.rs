//! The audience flows target: end users with tags and attributes, segments (saved, dynamic
//! filters), and streams (every environment has the undeletable `All cards`). The rules are in
//! docs/api.md, Audience.

pub mod filter;
pub mod test_users;

use crate::id::{new_id, EndUserId, IdKind, SegmentId, StreamId};

use async_trait::async_trait;
use serde_json::{Map, Value};

use crate::page::PageRequest;
use crate::{FieldError, StorageError, Timestamp};
pub use filter::Filter;
mod service;
pub use service::AudienceService;

/// The longest end-user id, in characters (Unicode scalar values).
pub const USER_ID_MAX_CHARS: usize = 255;
/// The most tags one user may have (counted as sent, before duplicates are dropped).
pub const MAX_TAGS_PER_USER: usize = 100;
/// The longest tag, in characters.
pub const TAG_MAX_CHARS: usize = 100;
/// The most attributes one user may have.
pub const MAX_ATTRIBUTES_PER_USER: usize = 100;
/// The longest attribute name, in characters.
pub const ATTRIBUTE_NAME_MAX_CHARS: usize = 100;
/// The longest string attribute value, in characters.
pub const ATTRIBUTE_VALUE_MAX_CHARS: usize = 2_000;
/// The most users one [`AudienceService::put_users`] batch may hold.
pub const MAX_BATCH_USERS: usize = 10_000;
/// The longest segment or stream name, in characters.
pub const NAME_MAX_CHARS: usize = 255;
/// The stream every card is in.
pub const DEFAULT_STREAM_NAME: &str = "All cards";

/// An end user: the caller's own id, a test flag, tags, attributes.
#[derive(Debug, Clone, PartialEq)]
pub struct EndUser {
    /// The environment the user belongs to; the same id in another environment is another user.
    pub environment_id: String,
    /// The caller's own id for the user: 1 to [`USER_ID_MAX_CHARS`] characters, no control
    /// characters.
    pub id: EndUserId,
    /// A test user: test-mode triggers (`/test`) reach test users only.
    pub test_user: bool,
    /// Sorted, without duplicates.
    pub tags: Vec<String>,
    /// Scalar values only (string, number, boolean).
    pub attributes: Map<String, Value>,
    /// When the user was first stored; a later put keeps it.
    pub created: Timestamp,
    /// When the user was last put.
    pub updated: Timestamp,
}

/// What a PUT sends: the whole user (omitted fields take their defaults).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UserInput {
    /// The user's id (the path's `endUserId`, or `id` in a batch).
    pub id: String,
    /// `testUser`; false when omitted.
    pub test_user: bool,
    /// `tags`, in any order and possibly repeated: [`validate_user`] sorts and deduplicates
    /// them.
    pub tags: Vec<String>,
    /// `attributes`: at most [`MAX_ATTRIBUTES_PER_USER`], each a string, a number or a boolean.
    pub attributes: Map<String, Value>,
}

/// A segment: a named, saved filter. It is dynamic: its users are those its filter matches
/// when it is used (a list, a `segment` trigger target), not a list kept when it was saved.
#[derive(Debug, Clone, PartialEq)]
pub struct Segment {
    /// `seg_…`.
    pub id: SegmentId,
    /// The environment the segment belongs to.
    pub environment_id: String,
    /// 1 to [`NAME_MAX_CHARS`] characters, by the rule of [`name`](crate::name). Not unique.
    pub name: String,
    /// The validated filter, which keeps the document as sent in [`Filter::source`].
    pub filter: Filter,
    /// When the segment was created.
    pub created: Timestamp,
    /// When its name or filter was last replaced.
    pub updated: Timestamp,
}

/// A stream: a named part of a user's feed that cards can be sent to (`targetStreamIds`).
/// Every card is in the default stream, `All cards`, too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stream {
    /// `str_…`.
    pub id: StreamId,
    /// The environment the stream belongs to.
    pub environment_id: String,
    /// 1 to [`NAME_MAX_CHARS`] characters, by the rule of [`name`](crate::name); unique within
    /// the environment.
    pub name: String,
    /// `All cards`: exists in every environment, cannot be deleted.
    pub is_default: bool,
    /// When the stream was created.
    pub created: Timestamp,
}

impl Stream {
    /// A new `All cards` stream for the environment (stored only when the environment has none).
    pub fn default_for(environment_id: &str, created: Timestamp) -> Stream {
        Stream {
            id: new_id(IdKind::Stream).into(),
            environment_id: environment_id.to_owned(),
            name: DEFAULT_STREAM_NAME.to_owned(),
            is_default: true,
            created,
        }
    }
}

/// Which users a list returns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserQuery {
    /// Only users with this tag (exact match).
    pub tag: Option<String>,
    /// Only test users (`Some(true)`) or only the others (`Some(false)`).
    pub test_user: Option<bool>,
}

/// Storage of end users and their tags (a port). Every call is scoped to its environment: a
/// user is known by (environment, id), and nothing of another environment is read or changed.
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait EndUserRepository: Send + Sync {
    /// Inserts or replaces every user (test flag, tags, attributes; `created` is kept for an
    /// existing user), all in one transaction.
    ///
    /// All or nothing: an error must leave every user as it was ([`AudienceService::put_users`]
    /// promises that). A replaced user's tags are exactly the new ones; `updated` is taken
    /// from the user given.
    async fn upsert(&self, users: Vec<EndUser>) -> Result<(), StorageError>;
    /// The user with this id in the environment, with its tags (sorted); None when there is
    /// none.
    async fn get(
        &self,
        environment_id: &str,
        user_id: &str,
    ) -> Result<Option<EndUser>, StorageError>;
    /// Deletes the user and its tags. False when there was no such user.
    async fn delete(&self, environment_id: &str, user_id: &str) -> Result<bool, StorageError>;
    /// An end user signing in (contract §15), in one transaction: when the environment has no
    /// user of this id, creates it (not a test user, no tags) with `attributes`, `created`
    /// and `updated` at `at`; otherwise sets each of `attributes` on it, keeping its other
    /// attributes and its tags, and `updated` at `at` only when a value changed (an
    /// unchanged user is not written). A new attribute past [`MAX_ATTRIBUTES_PER_USER`] is
    /// left out.
    async fn merge_attributes(
        &self,
        environment_id: &str,
        user_id: &str,
        attributes: Map<String, Value>,
        at: Timestamp,
    ) -> Result<(), StorageError>;
    /// Users matching the query, by id, after `page.after`, at most `page.limit + 1`.
    ///
    /// In ascending order of id, strictly after `page.after` when given: the services page
    /// through with the last id read as the next `after`, and the extra user only tells that
    /// more follow. Each user comes with its tags.
    async fn list(
        &self,
        environment_id: &str,
        query: &UserQuery,
        page: &PageRequest,
    ) -> Result<Vec<EndUser>, StorageError>;
    /// Like [`EndUserRepository::list`], ids only: what a fan-out needs when no filter is
    /// applied (no attributes or tags read).
    async fn ids(
        &self,
        environment_id: &str,
        query: &UserQuery,
        page: &PageRequest,
    ) -> Result<Vec<String>, StorageError>;
}

/// Storage of segments (a port). Every call is scoped to its environment: a segment id of
/// another environment is not found.
///
/// A segment's filter is stored as its [`Filter::source`] and parsed again when read; a
/// stored filter that no longer parses is a [`StorageError::Internal`].
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait SegmentRepository: Send + Sync {
    /// Stores a new segment (its id is new; names need not be unique).
    async fn insert(&self, segment: &Segment) -> Result<(), StorageError>;
    /// The segment with this id in the environment; None when there is none.
    async fn get(
        &self,
        environment_id: &str,
        segment_id: &str,
    ) -> Result<Option<Segment>, StorageError>;
    /// Every segment of the environment, by name.
    async fn list(&self, environment_id: &str) -> Result<Vec<Segment>, StorageError>;
    /// Replaces name and filter. False when there is no such segment.
    ///
    /// Also sets `updated`; `created` is left as stored. The segment is found by its
    /// `environment_id` and `id`.
    async fn update(&self, segment: &Segment) -> Result<bool, StorageError>;
    /// Deletes the segment. False when there was no such segment in the environment.
    async fn delete(&self, environment_id: &str, segment_id: &str) -> Result<bool, StorageError>;
}

/// Storage of streams (a port). Every call is scoped to its environment; stream names are
/// unique within an environment.
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait StreamRepository: Send + Sync {
    /// The environment's streams, the default one first; the default is created when missing.
    ///
    /// When the environment has no default stream yet, `default` (a [`Stream::default_for`]
    /// the caller built) is stored first, in the same transaction as the read; of two first
    /// listings that race, one stores it and the other stores nothing. The others follow,
    /// oldest first. The trigger engine takes the default stream's id from this answer, so it
    /// must always be in it.
    async fn list(
        &self,
        environment_id: &str,
        default: Stream,
    ) -> Result<Vec<Stream>, StorageError>;
    /// A name used by another stream of the environment is a `UniqueViolation`.
    ///
    /// It must be [`StorageError::UniqueViolation`]: the service answers it with
    /// [`ConflictKind::StreamNameTaken`](crate::ConflictKind::StreamNameTaken).
    async fn insert(&self, stream: &Stream) -> Result<(), StorageError>;
    /// The stream with this id in the environment; None when there is none.
    async fn get(
        &self,
        environment_id: &str,
        stream_id: &str,
    ) -> Result<Option<Stream>, StorageError>;
    /// Deletes a stream that is not the default one. False when there was no such stream; the
    /// default stream is never deleted (false for it too).
    async fn delete(&self, environment_id: &str, stream_id: &str) -> Result<bool, StorageError>;
}

/// Checks a user id (the caller's own string): 1–255 characters, no control characters.
///
/// Adds at most one problem to `errors`, at `field`.
pub fn validate_user_id(errors: &mut Vec<FieldError>, field: &str, id: &str) {
    if id.is_empty() {
        errors.push(FieldError::new(field, "must not be empty"));
    } else if id.chars().count() > USER_ID_MAX_CHARS {
        errors.push(FieldError::new(
            field,
            format!("must be at most {USER_ID_MAX_CHARS} characters"),
        ));
    } else if id.chars().any(char::is_control) {
        errors.push(FieldError::new(
            field,
            "must not contain control characters",
        ));
    }
}

/// Validates a user sent whole and normalises its tags (sorted, deduplicated).
///
/// Every problem is added to `errors` with its path under `prefix` (`users[3].tags[0]`; plain
/// `tags[0]` when `prefix` is empty): the id, at most [`MAX_TAGS_PER_USER`] tags of 1 to
/// [`TAG_MAX_CHARS`] characters, at most [`MAX_ATTRIBUTES_PER_USER`] attributes with names of
/// 1 to [`ATTRIBUTE_NAME_MAX_CHARS`] characters and scalar values (strings of at most
/// [`ATTRIBUTE_VALUE_MAX_CHARS`] characters). The input comes back normalised even when it has
/// problems.
pub fn validate_user(
    errors: &mut Vec<FieldError>,
    prefix: &str,
    mut input: UserInput,
) -> UserInput {
    let at = |field: &str| {
        if prefix.is_empty() {
            field.to_owned()
        } else {
            format!("{prefix}.{field}")
        }
    };
    validate_user_id(errors, &at("id"), &input.id);
    if input.tags.len() > MAX_TAGS_PER_USER {
        errors.push(FieldError::new(
            at("tags"),
            format!("at most {MAX_TAGS_PER_USER} tags"),
        ));
    }
    for (i, tag) in input.tags.iter().enumerate() {
        let length = tag.chars().count();
        if length == 0 || length > TAG_MAX_CHARS || tag.chars().any(char::is_control) {
            errors.push(FieldError::new(
                format!("{}[{i}]", at("tags")),
                format!("a tag is 1 to {TAG_MAX_CHARS} characters without control characters"),
            ));
        }
    }
    input.tags.sort();
    input.tags.dedup();
    if input.attributes.len() > MAX_ATTRIBUTES_PER_USER {
        errors.push(FieldError::new(
            at("attributes"),
            format!("at most {MAX_ATTRIBUTES_PER_USER} attributes"),
        ));
    }
    for (name, value) in &input.attributes {
        let path = format!("{}.{name}", at("attributes"));
        if name.is_empty() || name.chars().count() > ATTRIBUTE_NAME_MAX_CHARS {
            errors.push(FieldError::new(
                &path,
                format!("attribute names are 1 to {ATTRIBUTE_NAME_MAX_CHARS} characters"),
            ));
        }
        match value {
            Value::String(s) if s.chars().count() > ATTRIBUTE_VALUE_MAX_CHARS => {
                errors.push(FieldError::new(
                    &path,
                    format!("must be at most {ATTRIBUTE_VALUE_MAX_CHARS} characters"),
                ))
            }
            Value::String(_) | Value::Number(_) | Value::Bool(_) => {}
            _ => errors.push(FieldError::new(
                &path,
                "must be a string, a number or a boolean",
            )),
        }
    }
    input
}

#[cfg(test)]
mod tests;
