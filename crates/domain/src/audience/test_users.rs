//! Test users (contract §3): marking a user as one, and saying why a test send did not reach
//! a user it named.

use serde_json::Value;

use super::{AudienceService, EndUser, UserInput};
use crate::id::{EndUserId, EnvironmentId};
use crate::tenancy::Principal;
use crate::trigger::views::InvocationView;
use crate::trigger::Mode;
use crate::DomainError;

impl AudienceService {
    /// Marks the user as a test user (`true`) or not, keeping its tags and attributes, and
    /// answers it as stored. Needs `users:read` and `users:write`; [`DomainError::NotFound`]
    /// when the environment has no such user.
    ///
    /// The user is read, then written whole, as `PUT .../users/{id}` writes it: a change of
    /// its tags or attributes that lands between the two is replaced by what was read.
    pub async fn set_test_user(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        id: &EndUserId,
        test_user: bool,
    ) -> Result<EndUser, DomainError> {
        let user = self.get_user(who, env, id).await?;
        let input = UserInput {
            id: user.id.as_str().to_owned(),
            test_user,
            tags: user.tags,
            attributes: user.attributes,
        };
        self.put_user(who, env, input).await
    }
}

/// Why a test send that named `user` did not reach it, given the user as stored (none when
/// the environment has no such user); none when it would have reached it.
///
/// ```
/// use workbench_domain::audience::test_users::why_not_reached;
/// assert_eq!(
///     why_not_reached("user-7", None).as_deref(),
///     Some("user-7 does not exist in this environment: test sends only reach test users")
/// );
/// ```
pub fn why_not_reached(user: &str, found: Option<&EndUser>) -> Option<String> {
    match found {
        None => Some(format!(
            "{user} does not exist in this environment: test sends only reach test users"
        )),
        Some(u) if !u.test_user => Some(format!(
            "{user} is not a test user: test sends only reach test users"
        )),
        Some(_) => None,
    }
}

/// Why a test invocation whose target names no user reached no one: it was sent to all test
/// users, and the environment has none. None for any other invocation, or one still running.
pub fn why_none_reached(view: &InvocationView) -> Option<String> {
    let inv = &view.invocation;
    let to_all = serde_json::from_str::<Value>(inv.target.text())
        .ok()
        .is_some_and(|t| t.get("type").and_then(Value::as_str) == Some("allTestUsers"));
    let none = inv.mode == Mode::Test && view.status().is_final() && inv.users_targeted == 0;
    (to_all && none).then(|| {
        "This environment has no test user: mark one on the user's page in Audience.".to_owned()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(test_user: bool) -> EndUser {
        EndUser {
            environment_id: "env".into(),
            id: "u1".into(),
            test_user,
            tags: vec![],
            attributes: Default::default(),
            created: chrono::DateTime::UNIX_EPOCH,
            updated: chrono::DateTime::UNIX_EPOCH,
        }
    }

    fn view(target: serde_json::Value, mode: Mode, targeted: u64) -> InvocationView {
        use crate::trigger::{Invocation, InvocationStatus};
        InvocationView {
            invocation: Invocation {
                environment_id: "env".into(),
                id: "inv".into(),
                flow_id: "flw".into(),
                mode,
                flow_version: 1,
                fingerprint: "fp".into(),
                target: target.into(),
                payload: serde_json::json!({}).into(),
                strict_variables: false,
                bulk: false,
                status: InvocationStatus::Completed,
                users_targeted: targeted,
                cards_created: 0,
                errors: Vec::new(),
                cursor: None,
                created: chrono::DateTime::UNIX_EPOCH,
                updated: chrono::DateTime::UNIX_EPOCH,
            },
            instances: None,
        }
    }

    #[test]
    fn a_test_send_to_all_test_users_of_an_environment_without_one_says_so() {
        let all = serde_json::json!({"type": "allTestUsers"});
        assert!(why_none_reached(&view(all.clone(), Mode::Test, 0))
            .is_some_and(|w| w.contains("no test user")));
        assert_eq!(why_none_reached(&view(all.clone(), Mode::Test, 2)), None);
        assert_eq!(why_none_reached(&view(all, Mode::Live, 0)), None);
        let tag = serde_json::json!({"type": "tag", "tagName": "allTestUsers"});
        assert_eq!(
            why_none_reached(&view(tag, Mode::Test, 0)),
            None,
            "the type, not the text"
        );
    }

    #[test]
    fn a_test_send_says_why_it_missed_a_user() {
        assert_eq!(
            why_not_reached("u1", Some(&user(false))).as_deref(),
            Some("u1 is not a test user: test sends only reach test users")
        );
        assert_eq!(why_not_reached("u1", Some(&user(true))), None);
        assert!(why_not_reached("u1", None).is_some_and(|w| w.contains("does not exist")));
    }
}
