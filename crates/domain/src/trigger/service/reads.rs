//! The request path's reads: one invocation of a flow, and a page of them.

use super::TriggerService;
use crate::id::{EnvironmentId, FlowId, InvocationId};
use crate::page::{bad_cursor, newest_first_key, parse_newest_first_key, After, Page, PageRequest};
use crate::tenancy::{Permission, Principal};
use crate::trigger::invocation::{Invocation, InvocationFilter};
use crate::trigger::views::flow_invocation;
use crate::{DomainError, Resource};

impl TriggerService {
    /// The invocation `id` of the flow, for `GET .../invocations/{flowInvocationId}`.
    ///
    /// Needs `action_flows:read`. Fails with [`DomainError::NotFound`] of
    /// [`Resource::Invocation`] when the environment has no such invocation of this flow.
    pub async fn invocation(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        flow_id: &FlowId,
        id: &InvocationId,
    ) -> Result<Invocation, DomainError> {
        flow_invocation(&*self.invocations, who, env, flow_id, id).await
    }

    /// One page of the flow's invocations that match `filter`, newest first (by `created`,
    /// then by id, both descending); the page's `next_after` is the key to list after for the
    /// next page ([`newest_first_key`] of the last invocation's time and id).
    ///
    /// Needs [`Permission::ActionFlowsRead`]. A `page.after` that is not such a key is a
    /// [`DomainError::Validation`] on `cursor`; a flow the environment does not have is
    /// [`DomainError::NotFound`]. `page.limit` is not checked here: the API keeps it within
    /// 1–500.
    pub async fn invocations(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        flow_id: &FlowId,
        filter: InvocationFilter,
        page: PageRequest,
    ) -> Result<Page<Invocation>, DomainError> {
        who.authorize(env, Permission::ActionFlowsRead)?;
        let after = match page.after.as_deref() {
            None => None,
            Some(key) => {
                let (created, id) = parse_newest_first_key(key).ok_or_else(bad_cursor)?;
                Some(After::Item {
                    created,
                    id: id.to_owned(),
                })
            }
        };
        self.flows
            .get(env, flow_id)
            .await?
            .ok_or(DomainError::NotFound(Resource::Flow))?;
        let invocations = self
            .invocations
            .list(env, flow_id, filter, after, page.limit.saturating_add(1))
            .await?;
        Ok(Page::from_overfetch(invocations, page.limit, |i| {
            newest_first_key(&i.created, &i.id)
        }))
    }
}
