//! What one batch of an invocation is made of: its flow version's plan, the next users of its
//! audience after its cursor (test users only in test mode) and its environment's default
//! stream.

use std::sync::Arc;

use super::{Engine, StepReads};
use crate::audience::{Filter, UserQuery};
use crate::flow::VersionRef;
use crate::page::{Page, PageRequest};
use crate::trigger::batch::{batch_for, default_stream_of, inputs_of, Audience};
use crate::trigger::invocation::{BatchResult, Invocation, BATCH_USERS};
use crate::trigger::plan::FlowPlan;
use crate::trigger::request::Target;
use crate::trigger::Mode;
use crate::{DomainError, Resource, Timestamp};

impl Engine {
    /// One batch of `invocation`. `reads` keeps what one step has read.
    pub(super) async fn run_batch(
        &self,
        invocation: &Invocation,
        now: Timestamp,
        reads: &mut StepReads,
    ) -> Result<BatchResult, DomainError> {
        let env = &invocation.environment_id;
        let key = (invocation.flow_id.clone(), invocation.flow_version);
        let plan = match reads.plans.get(&key) {
            Some(plan) => plan.clone(),
            None => {
                let version = self
                    .flows
                    .get_version(
                        &invocation.flow_id,
                        VersionRef::Number(invocation.flow_version),
                    )
                    .await?
                    .ok_or(DomainError::NotFound(Resource::FlowVersion))?;
                let plan = Arc::new(FlowPlan::of(version.config));
                reads.plans.insert(key, plan.clone());
                plan
            }
        };
        let (element, variables) = inputs_of(invocation, &plan)?;
        let audience = self.audience(invocation, &element.target).await?;
        let default_stream = match reads.streams.get(env) {
            Some(id) => id.clone(),
            None => {
                let id = default_stream_of(&*self.streams, env, now).await?;
                reads.streams.insert(env.clone(), id.clone());
                id
            }
        };
        Ok(batch_for(
            invocation,
            &plan,
            &element.payload,
            &variables,
            audience,
            &default_stream,
            now,
        ))
    }
    /// The next batch of users after the invocation's cursor. Test mode keeps test users only.
    async fn audience(
        &self,
        invocation: &Invocation,
        target: &Target,
    ) -> Result<Audience, DomainError> {
        let env = &invocation.environment_id;
        let test_only = invocation.mode == Mode::Test;
        let after = invocation.cursor.clone();
        let page = PageRequest {
            limit: BATCH_USERS,
            after: after.clone(),
        };
        let query = |tag: Option<String>| UserQuery {
            tag,
            test_user: test_only.then_some(true),
        };
        match target {
            Target::Users(ids) => {
                let start = after
                    .as_ref()
                    .map(|a| ids.partition_point(|id| id <= a))
                    .unwrap_or(0);
                let slice: Vec<String> = ids
                    .iter()
                    .skip(start)
                    .take(BATCH_USERS as usize)
                    .cloned()
                    .collect();
                let next = (start + slice.len() < ids.len())
                    .then(|| slice.last().cloned())
                    .flatten();
                let users = if test_only {
                    let mut test_users = Vec::new();
                    for id in &slice {
                        if self.users.get(env, id).await?.is_some_and(|u| u.test_user) {
                            test_users.push(id.clone());
                        }
                    }
                    test_users
                } else {
                    slice
                };
                Ok(Audience { users, next })
            }
            Target::Tag(tag) => {
                self.page_of(env, &query(Some(tag.clone())), page, None)
                    .await
            }
            Target::AllTestUsers => {
                self.page_of(
                    env,
                    &UserQuery {
                        tag: None,
                        test_user: Some(true),
                    },
                    page,
                    None,
                )
                .await
            }
            Target::Filters(filter) => self.page_of(env, &query(None), page, Some(filter)).await,
            Target::Segment(id) => {
                let segment = self
                    .segments
                    .get(env, id)
                    .await?
                    .ok_or(DomainError::NotFound(Resource::Segment))?;
                self.page_of(env, &query(None), page, Some(&segment.filter))
                    .await
            }
        }
    }

    async fn page_of(
        &self,
        env: &str,
        query: &UserQuery,
        page: PageRequest,
        filter: Option<&Filter>,
    ) -> Result<Audience, DomainError> {
        let Some(filter) = filter else {
            let ids = self.users.ids(env, query, &page).await?;
            let Page { items, next_after } = Page::from_overfetch(ids, page.limit, String::clone);
            return Ok(Audience {
                users: items,
                next: next_after,
            });
        };
        let users = self.users.list(env, query, &page).await?;
        let Page { items, next_after } =
            Page::from_overfetch(users, page.limit, |u| u.id.clone().into());
        let users = items
            .into_iter()
            .filter(|u| filter.matches(u))
            .map(|u| u.id.into_string())
            .collect();
        Ok(Audience {
            users,
            next: next_after,
        })
    }
}
