//! The audience flows target (contract §3): end users with tags and attributes, segments
//! (saved, dynamic filters), and streams (every environment has the undeletable `All cards`).

pub mod filter;

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Map, Value};

use crate::id::{new_id, IdKind};
use crate::page::{Page, PageRequest};
use crate::tenancy::{Permission, Principal};
use crate::{Clock, ConflictKind, DomainError, FieldError, Resource, StorageError, Timestamp};
pub use filter::Filter;

pub const USER_ID_MAX_CHARS: usize = 255;
pub const MAX_TAGS_PER_USER: usize = 100;
pub const TAG_MAX_CHARS: usize = 100;
pub const MAX_ATTRIBUTES_PER_USER: usize = 100;
pub const ATTRIBUTE_NAME_MAX_CHARS: usize = 100;
pub const ATTRIBUTE_VALUE_MAX_CHARS: usize = 2_000;
pub const MAX_BATCH_USERS: usize = 10_000;
pub const NAME_MAX_CHARS: usize = 255;
/// The stream every card is in.
pub const DEFAULT_STREAM_NAME: &str = "All cards";
/// Users read per batch when a list has to evaluate a segment's filter.
const SCAN_BATCH: u32 = 1_000;

/// An end user: the caller's own id, a test flag, tags, attributes.
#[derive(Debug, Clone, PartialEq)]
pub struct EndUser {
    pub environment_id: String,
    pub id: String,
    pub test_user: bool,
    /// Sorted, without duplicates.
    pub tags: Vec<String>,
    /// Scalar values only (string, number, boolean).
    pub attributes: Map<String, Value>,
    pub created: Timestamp,
    pub updated: Timestamp,
}

/// What a PUT sends: the whole user (omitted fields take their defaults).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UserInput {
    pub id: String,
    pub test_user: bool,
    pub tags: Vec<String>,
    pub attributes: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Segment {
    pub id: String,
    pub environment_id: String,
    pub name: String,
    pub filter: Filter,
    pub created: Timestamp,
    pub updated: Timestamp,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stream {
    pub id: String,
    pub environment_id: String,
    pub name: String,
    /// `All cards`: exists in every environment, cannot be deleted.
    pub is_default: bool,
    pub created: Timestamp,
}

impl Stream {
    /// A new `All cards` stream for the environment (stored only when the environment has none).
    pub fn default_for(environment_id: &str, created: Timestamp) -> Stream {
        Stream {
            id: new_id(IdKind::Stream),
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
    pub tag: Option<String>,
    pub test_user: Option<bool>,
}

#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait EndUserRepository: Send + Sync {
    /// Inserts or replaces every user (test flag, tags, attributes; `created` is kept for an
    /// existing user), all in one transaction.
    async fn upsert(&self, users: Vec<EndUser>) -> Result<(), StorageError>;
    async fn get(
        &self,
        environment_id: &str,
        user_id: &str,
    ) -> Result<Option<EndUser>, StorageError>;
    /// Deletes the user and its tags. False when there was no such user.
    async fn delete(&self, environment_id: &str, user_id: &str) -> Result<bool, StorageError>;
    /// Users matching the query, by id, after `page.after`, at most `page.limit + 1`.
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

#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait SegmentRepository: Send + Sync {
    async fn insert(&self, segment: &Segment) -> Result<(), StorageError>;
    async fn get(
        &self,
        environment_id: &str,
        segment_id: &str,
    ) -> Result<Option<Segment>, StorageError>;
    /// Every segment of the environment, by name.
    async fn list(&self, environment_id: &str) -> Result<Vec<Segment>, StorageError>;
    /// Replaces name and filter. False when there is no such segment.
    async fn update(&self, segment: &Segment) -> Result<bool, StorageError>;
    async fn delete(&self, environment_id: &str, segment_id: &str) -> Result<bool, StorageError>;
}

#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait StreamRepository: Send + Sync {
    /// The environment's streams, the default one first; the default is created when missing.
    async fn list(
        &self,
        environment_id: &str,
        default: Stream,
    ) -> Result<Vec<Stream>, StorageError>;
    /// A name used by another stream of the environment is a `UniqueViolation`.
    async fn insert(&self, stream: &Stream) -> Result<(), StorageError>;
    async fn get(
        &self,
        environment_id: &str,
        stream_id: &str,
    ) -> Result<Option<Stream>, StorageError>;
    async fn delete(&self, environment_id: &str, stream_id: &str) -> Result<bool, StorageError>;
}

/// Checks a user id (the caller's own string): 1–255 characters, no control characters.
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

fn validate_name(errors: &mut Vec<FieldError>, field: &str, name: &str) {
    if name.trim().is_empty() {
        errors.push(FieldError::new(field, "must not be empty"));
    } else if name.chars().count() > NAME_MAX_CHARS {
        errors.push(FieldError::new(
            field,
            format!("must be at most {NAME_MAX_CHARS} characters"),
        ));
    } else if name.chars().any(char::is_control) {
        errors.push(FieldError::new(
            field,
            "must not contain control characters",
        ));
    }
}

pub struct AudienceService {
    users: Arc<dyn EndUserRepository>,
    segments: Arc<dyn SegmentRepository>,
    streams: Arc<dyn StreamRepository>,
    clock: Arc<dyn Clock>,
}

impl AudienceService {
    pub fn new(
        users: Arc<dyn EndUserRepository>,
        segments: Arc<dyn SegmentRepository>,
        streams: Arc<dyn StreamRepository>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            users,
            segments,
            streams,
            clock,
        }
    }

    fn stamp(&self, env: &str, input: UserInput) -> EndUser {
        let now = self.clock.now();
        EndUser {
            environment_id: env.to_owned(),
            id: input.id,
            test_user: input.test_user,
            tags: input.tags,
            attributes: input.attributes,
            created: now,
            updated: now,
        }
    }

    /// Creates or replaces a user.
    pub async fn put_user(
        &self,
        who: &Principal,
        env: &str,
        input: UserInput,
    ) -> Result<EndUser, DomainError> {
        who.authorize(env, Permission::UsersWrite)?;
        let mut errors = Vec::new();
        let input = validate_user(&mut errors, "", input);
        if !errors.is_empty() {
            return Err(DomainError::Validation(errors));
        }
        let id = input.id.clone();
        self.users.upsert(vec![self.stamp(env, input)]).await?;
        // Read back: an existing user keeps its `created`.
        self.users
            .get(env, &id)
            .await?
            .ok_or(DomainError::NotFound(Resource::EndUser))
    }

    /// Creates or replaces up to 10,000 users in one transaction; all or nothing.
    pub async fn put_users(
        &self,
        who: &Principal,
        env: &str,
        inputs: Vec<UserInput>,
    ) -> Result<usize, DomainError> {
        who.authorize(env, Permission::UsersWrite)?;
        if inputs.is_empty() || inputs.len() > MAX_BATCH_USERS {
            return Err(DomainError::invalid(
                "users",
                format!("send 1 to {MAX_BATCH_USERS} users"),
            ));
        }
        let mut errors = Vec::new();
        let mut seen = std::collections::HashSet::new();
        let mut users = Vec::with_capacity(inputs.len());
        for (i, input) in inputs.into_iter().enumerate() {
            let input = validate_user(&mut errors, &format!("users[{i}]"), input);
            if !seen.insert(input.id.clone()) {
                errors.push(FieldError::new(
                    format!("users[{i}].id"),
                    format!("`{}` appears twice in the batch", input.id),
                ));
            }
            users.push(self.stamp(env, input));
        }
        if !errors.is_empty() {
            return Err(DomainError::Validation(errors));
        }
        let count = users.len();
        self.users.upsert(users).await?;
        Ok(count)
    }

    pub async fn get_user(
        &self,
        who: &Principal,
        env: &str,
        id: &str,
    ) -> Result<EndUser, DomainError> {
        who.authorize(env, Permission::UsersRead)?;
        self.users
            .get(env, id)
            .await?
            .ok_or(DomainError::NotFound(Resource::EndUser))
    }

    pub async fn delete_user(
        &self,
        who: &Principal,
        env: &str,
        id: &str,
    ) -> Result<(), DomainError> {
        who.authorize(env, Permission::UsersWrite)?;
        if self.users.delete(env, id).await? {
            Ok(())
        } else {
            Err(DomainError::NotFound(Resource::EndUser))
        }
    }

    /// Users by id. With a segment, its filter is evaluated on the users read (in batches)
    /// until the page is full.
    pub async fn list_users(
        &self,
        who: &Principal,
        env: &str,
        query: UserQuery,
        segment_id: Option<String>,
        page: PageRequest,
    ) -> Result<Page<EndUser>, DomainError> {
        who.authorize(env, Permission::UsersRead)?;
        let Some(segment_id) = segment_id else {
            let users = self.users.list(env, &query, &page).await?;
            return Ok(Page::from_overfetch(users, page.limit, |u| u.id.clone()));
        };
        let segment = self.segments.get(env, &segment_id).await?.ok_or_else(|| {
            DomainError::invalid(
                "segmentId",
                format!("`{segment_id}` is not a segment of this environment"),
            )
        })?;
        let mut found = Vec::new();
        let mut after = page.after.clone();
        loop {
            let batch = self
                .users
                .list(
                    env,
                    &query,
                    &PageRequest {
                        limit: SCAN_BATCH,
                        after: after.clone(),
                    },
                )
                .await?;
            let more = batch.len() > SCAN_BATCH as usize;
            for user in batch.into_iter().take(SCAN_BATCH as usize) {
                after = Some(user.id.clone());
                if segment.filter.matches(&user) {
                    found.push(user);
                    if found.len() > page.limit as usize {
                        return Ok(Page::from_overfetch(found, page.limit, |u| u.id.clone()));
                    }
                }
            }
            if !more {
                return Ok(Page::from_overfetch(found, page.limit, |u| u.id.clone()));
            }
        }
    }

    pub async fn create_segment(
        &self,
        who: &Principal,
        env: &str,
        name: String,
        filter: Value,
    ) -> Result<Segment, DomainError> {
        who.authorize(env, Permission::UsersWrite)?;
        let (name, filter) = validate_segment(name, &filter)?;
        let now = self.clock.now();
        let segment = Segment {
            id: new_id(IdKind::Segment),
            environment_id: env.to_owned(),
            name,
            filter,
            created: now,
            updated: now,
        };
        self.segments.insert(&segment).await?;
        Ok(segment)
    }

    pub async fn get_segment(
        &self,
        who: &Principal,
        env: &str,
        id: &str,
    ) -> Result<Segment, DomainError> {
        who.authorize(env, Permission::UsersRead)?;
        self.segments
            .get(env, id)
            .await?
            .ok_or(DomainError::NotFound(Resource::Segment))
    }

    pub async fn list_segments(
        &self,
        who: &Principal,
        env: &str,
    ) -> Result<Vec<Segment>, DomainError> {
        who.authorize(env, Permission::UsersRead)?;
        Ok(self.segments.list(env).await?)
    }

    pub async fn update_segment(
        &self,
        who: &Principal,
        env: &str,
        id: &str,
        name: String,
        filter: Value,
    ) -> Result<Segment, DomainError> {
        who.authorize(env, Permission::UsersWrite)?;
        let current = self
            .segments
            .get(env, id)
            .await?
            .ok_or(DomainError::NotFound(Resource::Segment))?;
        let (name, filter) = validate_segment(name, &filter)?;
        let segment = Segment {
            name,
            filter,
            updated: self.clock.now(),
            ..current
        };
        if self.segments.update(&segment).await? {
            Ok(segment)
        } else {
            Err(DomainError::NotFound(Resource::Segment))
        }
    }

    pub async fn delete_segment(
        &self,
        who: &Principal,
        env: &str,
        id: &str,
    ) -> Result<(), DomainError> {
        who.authorize(env, Permission::UsersWrite)?;
        if self.segments.delete(env, id).await? {
            Ok(())
        } else {
            Err(DomainError::NotFound(Resource::Segment))
        }
    }

    fn default_stream(&self, env: &str) -> Stream {
        Stream::default_for(env, self.clock.now())
    }

    pub async fn list_streams(
        &self,
        who: &Principal,
        env: &str,
    ) -> Result<Vec<Stream>, DomainError> {
        who.authorize(env, Permission::UsersRead)?;
        Ok(self.streams.list(env, self.default_stream(env)).await?)
    }

    pub async fn create_stream(
        &self,
        who: &Principal,
        env: &str,
        name: String,
    ) -> Result<Stream, DomainError> {
        who.authorize(env, Permission::UsersWrite)?;
        let mut errors = Vec::new();
        validate_name(&mut errors, "name", &name);
        if !errors.is_empty() {
            return Err(DomainError::Validation(errors));
        }
        // The default stream exists before any other, so its name is taken from the start.
        self.streams.list(env, self.default_stream(env)).await?;
        let stream = Stream {
            id: new_id(IdKind::Stream),
            environment_id: env.to_owned(),
            name,
            is_default: false,
            created: self.clock.now(),
        };
        match self.streams.insert(&stream).await {
            Ok(()) => Ok(stream),
            Err(StorageError::UniqueViolation(_)) => Err(DomainError::conflict(
                ConflictKind::StreamNameTaken,
                format!("a stream named `{}` already exists", stream.name),
            )),
            Err(e) => Err(e.into()),
        }
    }

    pub async fn delete_stream(
        &self,
        who: &Principal,
        env: &str,
        id: &str,
    ) -> Result<(), DomainError> {
        who.authorize(env, Permission::UsersWrite)?;
        let stream = self
            .streams
            .get(env, id)
            .await?
            .ok_or(DomainError::NotFound(Resource::Stream))?;
        if stream.is_default {
            return Err(DomainError::conflict(
                ConflictKind::DefaultStream,
                "the `All cards` stream cannot be deleted",
            ));
        }
        if self.streams.delete(env, id).await? {
            Ok(())
        } else {
            Err(DomainError::NotFound(Resource::Stream))
        }
    }
}

fn validate_segment(name: String, filter: &Value) -> Result<(String, Filter), DomainError> {
    let mut errors = Vec::new();
    validate_name(&mut errors, "name", &name);
    match Filter::parse(filter, "filter") {
        Ok(filter) if errors.is_empty() => Ok((name, filter)),
        Ok(_) => Err(DomainError::Validation(errors)),
        Err(mut e) => {
            errors.append(&mut e);
            Err(DomainError::Validation(errors))
        }
    }
}

#[cfg(test)]
mod tests;
