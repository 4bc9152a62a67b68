//! What a credential may do: the legacy [`Role`]s and fine-grained [`Scope`]s a key holds
//! ([`KeyAccess`]), and the [`Permission`] each operation needs.

use std::str::FromStr;

/// Legacy credential roles. Each grants a fixed set of permissions
/// ([`Permission::legacy_roles`]); none grants the folder permissions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    /// `events`: Action Flows (read, write, trigger), end users and cards; the SDK's credential.
    Events,
    /// `workbench`: webhooks, push notification platforms, SDK keys and end users.
    Workbench,
    /// `auth`: the Credentials API. Only an administrator creates keys with it.
    Auth,
}

crate::spelling::spelled!(Role {
    Events => "events",
    Workbench => "workbench",
    Auth => "auth",
});

impl FromStr for Role {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Role::parse(s).ok_or_else(|| format!("unknown role `{s}` (known: events, workbench, auth)"))
    }
}

/// Fine-grained scopes. Each grants exactly one [`Permission`] ([`Permission::scope`]).
/// [`Scope::ALL`] is every scope: what the bootstrap key and a
/// [`Principal::trusted`](super::Principal::trusted) caller hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scope {
    /// `workbench_folders:read`: grants [`Permission::FoldersRead`].
    WorkbenchFoldersRead,
    /// `workbench_folders:create`: grants [`Permission::FoldersCreate`].
    WorkbenchFoldersCreate,
    /// `workbench_folders:update`: grants [`Permission::FoldersUpdate`].
    WorkbenchFoldersUpdate,
    /// `workbench_folders:delete`: grants [`Permission::FoldersDelete`].
    WorkbenchFoldersDelete,
    /// `action_flows:read`: grants [`Permission::ActionFlowsRead`].
    ActionFlowsRead,
    /// `action_flows:trigger`: grants [`Permission::ActionFlowsTrigger`].
    ActionFlowsTrigger,
    /// `action_flows:write`: grants [`Permission::ActionFlowsWrite`].
    ActionFlowsWrite,
    /// `webhooks:read`: grants [`Permission::WebhooksRead`].
    WebhooksRead,
    /// `webhooks:write`: grants [`Permission::WebhooksWrite`].
    WebhooksWrite,
    /// `notification_platforms:read`: grants [`Permission::NotificationPlatformsRead`].
    NotificationPlatformsRead,
    /// `notification_platforms:write`: grants [`Permission::NotificationPlatformsWrite`].
    NotificationPlatformsWrite,
    /// `users:read`: grants [`Permission::UsersRead`].
    UsersRead,
    /// `users:write`: grants [`Permission::UsersWrite`].
    UsersWrite,
    /// `cards:write`: grants [`Permission::CardsWrite`].
    CardsWrite,
    /// `credentials:write`: grants [`Permission::CredentialsWrite`].
    CredentialsWrite,
    /// `credentials:read`: grants [`Permission::CredentialsRead`].
    CredentialsRead,
    /// `environment_settings:write`: grants [`Permission::EnvironmentSettingsWrite`].
    EnvironmentSettingsWrite,
    /// `sdk_keys:read`: grants [`Permission::SdkKeysRead`].
    SdkKeysRead,
    /// `sdk_keys:write`: grants [`Permission::SdkKeysWrite`].
    SdkKeysWrite,
}

crate::spelling::spelled!(Scope {
    WorkbenchFoldersRead => "workbench_folders:read",
    WorkbenchFoldersCreate => "workbench_folders:create",
    WorkbenchFoldersUpdate => "workbench_folders:update",
    WorkbenchFoldersDelete => "workbench_folders:delete",
    ActionFlowsRead => "action_flows:read",
    ActionFlowsTrigger => "action_flows:trigger",
    ActionFlowsWrite => "action_flows:write",
    WebhooksRead => "webhooks:read",
    WebhooksWrite => "webhooks:write",
    NotificationPlatformsRead => "notification_platforms:read",
    NotificationPlatformsWrite => "notification_platforms:write",
    UsersRead => "users:read",
    UsersWrite => "users:write",
    CardsWrite => "cards:write",
    CredentialsWrite => "credentials:write",
    CredentialsRead => "credentials:read",
    EnvironmentSettingsWrite => "environment_settings:write",
    SdkKeysRead => "sdk_keys:read",
    SdkKeysWrite => "sdk_keys:write",
});

impl FromStr for Scope {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Scope::parse(s).ok_or_else(|| format!("unknown scope `{s}`"))
    }
}

/// What an operation needs. Each permission is granted by one scope ([`Permission::scope`]),
/// and by the legacy roles of [`Permission::legacy_roles`] (none, for folders: they require a
/// fine-grained key). Services check it with
/// [`Principal::authorize`](super::Principal::authorize).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Permission {
    /// List and read folders.
    FoldersRead,
    /// Create folders.
    FoldersCreate,
    /// Rename folders.
    FoldersUpdate,
    /// Delete folders.
    FoldersDelete,
    /// List and read Action Flows, their versions and settings, invocations, and the status of
    /// CSV and cancel tasks.
    ActionFlowsRead,
    /// Start Action Flows (live and test), create CSV tasks and cancel.
    ActionFlowsTrigger,
    /// Create Action Flows and change them: metadata, drafts, approvals, publishing,
    /// archiving.
    ActionFlowsWrite,
    /// List and read webhook subscriptions and their attempt logs.
    WebhooksRead,
    /// Subscribe, disable, enable, delete, rotate secrets, resend, recover and test webhooks.
    WebhooksWrite,
    /// List push notification platforms.
    NotificationPlatformsRead,
    /// Create, update, enable, disable and delete push notification platforms.
    NotificationPlatformsWrite,
    /// Read end users, segments, streams and devices, and a card's events and pushes.
    UsersRead,
    /// Write end users, segments, streams and devices.
    UsersWrite,
    /// Read an end user's feed and act on its cards (submit, dismiss, snooze).
    CardsWrite,
    /// Create and revoke keys through the Credentials API.
    CredentialsWrite,
    /// List the keys that may use an environment (never a secret).
    CredentialsRead,
    /// Change the environment's settings (approvals on or off): not a permission of the keys
    /// whose drafts the approvals are meant to check (docs/api.md, Credentials).
    EnvironmentSettingsWrite,
    /// List and read the environment's SDK keys (contract §15).
    SdkKeysRead,
    /// Add, change and delete the environment's SDK keys.
    SdkKeysWrite,
}

impl Permission {
    /// The permission `scope` grants: the inverse of [`Permission::scope`] (the OpenAPI
    /// document names an operation's scope and derives its legacy roles from it).
    pub const fn granted_by(scope: Scope) -> Permission {
        match scope {
            Scope::WorkbenchFoldersRead => Permission::FoldersRead,
            Scope::WorkbenchFoldersCreate => Permission::FoldersCreate,
            Scope::WorkbenchFoldersUpdate => Permission::FoldersUpdate,
            Scope::WorkbenchFoldersDelete => Permission::FoldersDelete,
            Scope::ActionFlowsRead => Permission::ActionFlowsRead,
            Scope::ActionFlowsTrigger => Permission::ActionFlowsTrigger,
            Scope::ActionFlowsWrite => Permission::ActionFlowsWrite,
            Scope::WebhooksRead => Permission::WebhooksRead,
            Scope::WebhooksWrite => Permission::WebhooksWrite,
            Scope::NotificationPlatformsRead => Permission::NotificationPlatformsRead,
            Scope::NotificationPlatformsWrite => Permission::NotificationPlatformsWrite,
            Scope::UsersRead => Permission::UsersRead,
            Scope::UsersWrite => Permission::UsersWrite,
            Scope::CardsWrite => Permission::CardsWrite,
            Scope::CredentialsWrite => Permission::CredentialsWrite,
            Scope::CredentialsRead => Permission::CredentialsRead,
            Scope::EnvironmentSettingsWrite => Permission::EnvironmentSettingsWrite,
            Scope::SdkKeysRead => Permission::SdkKeysRead,
            Scope::SdkKeysWrite => Permission::SdkKeysWrite,
        }
    }

    /// The one scope that grants this permission.
    pub const fn scope(self) -> Scope {
        match self {
            Permission::FoldersRead => Scope::WorkbenchFoldersRead,
            Permission::FoldersCreate => Scope::WorkbenchFoldersCreate,
            Permission::FoldersUpdate => Scope::WorkbenchFoldersUpdate,
            Permission::FoldersDelete => Scope::WorkbenchFoldersDelete,
            Permission::ActionFlowsRead => Scope::ActionFlowsRead,
            Permission::ActionFlowsTrigger => Scope::ActionFlowsTrigger,
            Permission::ActionFlowsWrite => Scope::ActionFlowsWrite,
            Permission::WebhooksRead => Scope::WebhooksRead,
            Permission::WebhooksWrite => Scope::WebhooksWrite,
            Permission::NotificationPlatformsRead => Scope::NotificationPlatformsRead,
            Permission::NotificationPlatformsWrite => Scope::NotificationPlatformsWrite,
            Permission::UsersRead => Scope::UsersRead,
            Permission::UsersWrite => Scope::UsersWrite,
            Permission::CardsWrite => Scope::CardsWrite,
            Permission::CredentialsWrite => Scope::CredentialsWrite,
            Permission::CredentialsRead => Scope::CredentialsRead,
            Permission::EnvironmentSettingsWrite => Scope::EnvironmentSettingsWrite,
            Permission::SdkKeysRead => Scope::SdkKeysRead,
            Permission::SdkKeysWrite => Scope::SdkKeysWrite,
        }
    }

    /// Legacy roles that also grant this permission: `events` for Action Flows and cards,
    /// `workbench` for webhooks and push platforms, either for end users, `auth` for
    /// credentials, none for folders. docs/api.md states each area's permissions.
    pub const fn legacy_roles(self) -> &'static [Role] {
        match self {
            Permission::FoldersRead
            | Permission::FoldersCreate
            | Permission::FoldersUpdate
            | Permission::FoldersDelete => &[],
            Permission::ActionFlowsRead
            | Permission::ActionFlowsTrigger
            | Permission::ActionFlowsWrite
            | Permission::CardsWrite => &[Role::Events],
            Permission::WebhooksRead
            | Permission::WebhooksWrite
            | Permission::NotificationPlatformsRead
            | Permission::NotificationPlatformsWrite
            | Permission::SdkKeysRead
            | Permission::SdkKeysWrite => &[Role::Workbench],
            Permission::UsersRead | Permission::UsersWrite => &[Role::Events, Role::Workbench],
            Permission::CredentialsWrite
            | Permission::CredentialsRead
            | Permission::EnvironmentSettingsWrite => &[Role::Auth],
        }
    }

    /// Why a caller without this permission is refused.
    pub(super) fn denial(self) -> String {
        let scope = self.scope();
        match self.legacy_roles() {
            [] => format!("this operation needs a fine-grained key with the scope `{scope}`"),
            roles => {
                let roles: Vec<_> = roles.iter().map(|r| format!("`{r}`")).collect();
                format!(
                    "this operation needs the scope `{scope}` or the legacy role {}",
                    roles.join(" or ")
                )
            }
        }
    }
}

/// A key holds legacy roles or scopes, never both.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyAccess {
    /// A legacy key: it holds every permission one of these roles grants.
    Roles(Vec<Role>),
    /// A fine-grained key: it holds the permission of each of these scopes, no other.
    Scopes(Vec<Scope>),
}

impl KeyAccess {
    /// Whether the key holds `permission`: one of its roles is among
    /// [`Permission::legacy_roles`], or it has [`Permission::scope`].
    pub fn allows(&self, permission: Permission) -> bool {
        match self {
            KeyAccess::Roles(roles) => permission.legacy_roles().iter().any(|r| roles.contains(r)),
            KeyAccess::Scopes(scopes) => scopes.contains(&permission.scope()),
        }
    }

    /// The permissions `other` holds that this access does not: empty when a key with this
    /// access may create a key with `other` (docs/api.md, Credentials: no key creates a key
    /// that can do more than itself).
    ///
    /// ```
    /// use workbench_domain::{KeyAccess, Permission, Role, Scope};
    ///
    /// let admin = KeyAccess::Scopes(Scope::ALL.to_vec());
    /// assert!(admin.missing_of(&KeyAccess::Roles(vec![Role::Workbench])).is_empty());
    /// let auth = KeyAccess::Roles(vec![Role::Auth]);
    /// let workbench = KeyAccess::Roles(vec![Role::Workbench]);
    /// assert!(auth.missing_of(&workbench).contains(&Permission::WebhooksRead));
    /// ```
    pub fn missing_of(&self, other: &KeyAccess) -> Vec<Permission> {
        Scope::ALL
            .iter()
            .map(|s| Permission::granted_by(*s))
            .filter(|p| other.allows(*p) && !self.allows(*p))
            .collect()
    }

    /// The legacy roles; empty for a fine-grained key.
    pub fn roles(&self) -> &[Role] {
        match self {
            KeyAccess::Roles(r) => r,
            KeyAccess::Scopes(_) => &[],
        }
    }

    /// The scopes; empty for a legacy key.
    pub fn scopes(&self) -> &[Scope] {
        match self {
            KeyAccess::Roles(_) => &[],
            KeyAccess::Scopes(s) => s,
        }
    }

    /// The roles' names, as the API and the admin commands show them.
    pub fn role_names(&self) -> Vec<&'static str> {
        self.roles().iter().map(|r| r.as_str()).collect()
    }

    /// The scopes' names, as the API and the admin commands show them.
    pub fn scope_names(&self) -> Vec<&'static str> {
        self.scopes().iter().map(|s| s.as_str()).collect()
    }
}
