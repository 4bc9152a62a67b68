//! Test users (contract §3): marking a user as one, and saying why a test send did not reach
//! a user it named.

use super::{AudienceService, EndUser, UserInput};
use crate::id::{EndUserId, EnvironmentId};
use crate::tenancy::Principal;
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
