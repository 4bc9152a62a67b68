//! Resource identifiers: `<prefix>_<26-char lowercase ULID>` (`fld_01jd...`). The prefix says
//! the kind of resource; the ULID's first 10 characters are the time it was minted, in
//! milliseconds of the minting host's clock, so ids of one kind sort by that time (ids minted
//! in the same millisecond in no particular order).

/// Prefixes of the identifiers this service mints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdKind {
    /// An organisation (`org`).
    Organisation,
    /// An environment (`env`).
    Environment,
    /// A Workbench folder (`fld`).
    Folder,
    /// An API key, its OAuth client id (`key`).
    Key,
    /// An Action Flow (its "flow config id").
    Flow,
    /// A segment of end users (`seg`).
    Segment,
    /// A stream of cards (`str`).
    Stream,
    /// A generated `flowInvocationId`.
    Invocation,
    /// One run of an Action Flow for one end user (`fin`).
    FlowInstance,
    /// A card in an end user's feed (`crd`).
    Card,
    /// An analytics event (`evt`).
    Event,
    /// A webhook subscription (`whk`).
    Webhook,
    /// One event queued for one webhook subscription.
    Delivery,
    /// One call of a delivery.
    Attempt,
    /// A push notification platform (`npl`).
    PushPlatform,
    /// One card pushed to one device.
    Push,
    /// An unexpected failure of one unit of background work, as logged (`errorId`).
    Error,
    /// An SDK key: the public key that verifies end users' tokens (`sdk`).
    SdkKey,
}

crate::spelling::spelled!(IdKind {
    Organisation => "org",
    Environment => "env",
    Folder => "fld",
    Key => "key",
    Flow => "flw",
    Segment => "seg",
    Stream => "str",
    Invocation => "inv",
    FlowInstance => "fin",
    Card => "crd",
    Event => "evt",
    Webhook => "whk",
    Delivery => "whd",
    Attempt => "wha",
    PushPlatform => "npl",
    Push => "psh",
    Error => "err",
    SdkKey => "sdk",
});

impl IdKind {
    /// The three letters before the `_` of this kind's ids.
    pub const fn prefix(self) -> &'static str {
        self.as_str()
    }
}

/// A new, time-ordered, globally unique identifier of the given kind.
pub fn new_id(kind: IdKind) -> String {
    // Written into one string (three cards' ids per CSV row: three allocations each showed
    // in the profile of a CSV task's preparing thread).
    let mut body = [0u8; ulid::ULID_LEN];
    let body = ulid::Ulid::new().array_to_str(&mut body);
    body.make_ascii_lowercase();
    let prefix = kind.prefix();
    let mut id = String::with_capacity(prefix.len() + 1 + body.len());
    id.push_str(prefix);
    id.push('_');
    id.push_str(body);
    id
}

/// Declares id newtypes: each wraps the id's text, derefs to `str` (so storage binds it as
/// text and every `&str` reader takes it), converts from and into `String`, and (de)serialises
/// as a plain string, so a path or a body reads it directly. A type with an [`IdKind`] also
/// mints new ids of that kind.
macro_rules! ids {
    ($($(#[$doc:meta])* $name:ident $(: $kind:ident)?;)+) => {$(
        $(#[$doc])*
        #[derive(
            Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord,
            serde::Serialize, serde::Deserialize,
        )]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// The id's text.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// The id's text, taken out.
            pub fn into_string(self) -> String {
                self.0
            }

            $(
                #[doc = concat!("The kind of these ids: [`IdKind::", stringify!($kind), "`].")]
                pub const KIND: IdKind = IdKind::$kind;

                #[doc = concat!("A new id of kind [`IdKind::", stringify!($kind), "`].")]
                pub fn mint() -> Self {
                    $name(new_id(IdKind::$kind))
                }
            )?
        }

        impl From<String> for $name {
            fn from(id: String) -> Self {
                $name(id)
            }
        }

        impl From<&str> for $name {
            fn from(id: &str) -> Self {
                $name(id.to_owned())
            }
        }

        impl From<&String> for $name {
            fn from(id: &String) -> Self {
                $name(id.clone())
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> Self {
                id.0
            }
        }

        impl std::ops::Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl std::borrow::Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl PartialEq<String> for $name {
            fn eq(&self, other: &String) -> bool {
                &self.0 == other
            }
        }

        impl PartialEq<$name> for String {
            fn eq(&self, other: &$name) -> bool {
                *self == other.0
            }
        }

        impl PartialEq<&$name> for String {
            fn eq(&self, other: &&$name) -> bool {
                *self == other.0
            }
        }
    )+
        /// The kinds that have an id type; a test checks that every [`IdKind`] is here.
        #[cfg(test)]
        const TYPED_KINDS: &[IdKind] = &[$($(IdKind::$kind,)?)+];
    };
}

ids! {
    /// An organisation's id (`org_…`).
    OrganisationId: Organisation;
    /// An environment's id (`env_…`): every resource but organisations and keys belongs to one.
    EnvironmentId: Environment;
    /// A Workbench folder's id (`fld_…`).
    FolderId: Folder;
    /// An API key's id, its OAuth client id (`key_…`).
    KeyId: Key;
    /// An Action Flow's id (`flw_…`), its "flow config id".
    FlowId: Flow;
    /// A segment's id (`seg_…`).
    SegmentId: Segment;
    /// A stream's id (`str_…`).
    StreamId: Stream;
    /// A `flowInvocationId`: minted (`inv_…`), or chosen by the caller for idempotency.
    InvocationId: Invocation;
    /// A flow instance's id (`fin_…`).
    FlowInstanceId: FlowInstance;
    /// A card's id (`crd_…`).
    CardId: Card;
    /// An analytics event's id (`evt_…`).
    EventId: Event;
    /// A webhook subscription's id (`whk_…`).
    WebhookId: Webhook;
    /// A webhook delivery's id (`whd_…`).
    DeliveryId: Delivery;
    /// A webhook call's id (`wha_…`).
    AttemptId: Attempt;
    /// A push notification platform's id (`npl_…`).
    PushPlatformId: PushPlatform;
    /// An SDK key's id (`sdk_…`).
    SdkKeyId: SdkKey;
    /// One card pushed to one device (`psh_…`).
    PushId: Push;
    /// An unexpected failure of one unit of background work, as logged (`err_…`).
    ErrorId: Error;
    /// An end user's id, chosen by the customer (any text of the allowed length).
    EndUserId;
    /// A CSV task's or a cancel task's id.
    TaskId;
}

/// A random (version 4) UUID, lowercase.
pub fn new_uuid() -> String {
    let mut b = [0u8; 16];
    rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, &mut b);
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex = crate::secret::hex(&b);
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// Whether `s` is a UUID as [`new_uuid`] writes them (any letter case).
pub(crate) fn is_uuid(s: &str) -> bool {
    s.len() == 36
        && s.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_hexdigit(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_ids_mint_their_kind_read_as_text_and_serialise_as_strings() {
        let flow = FlowId::mint();
        assert!(flow.starts_with("flw_"));
        assert_eq!(flow.as_str().len(), 30);
        let env = EnvironmentId::from("env_1");
        assert_eq!(env, "env_1");
        assert_eq!(serde_json::to_string(&env).expect("json"), "\"env_1\"");
        let read: EnvironmentId = serde_json::from_str("\"env_1\"").expect("read");
        assert_eq!(read, env);
        assert_eq!(String::from(read), "env_1");
    }

    #[test]
    fn every_kind_of_id_has_its_type() {
        for kind in IdKind::ALL {
            assert!(TYPED_KINDS.contains(&kind), "{kind:?} has no id type");
        }
        assert_eq!(FlowId::KIND, IdKind::Flow);
        assert_eq!(IdKind::parse("psh"), Some(IdKind::Push));
    }

    #[test]
    fn ids_have_prefix_and_26_lowercase_base32_chars() {
        let id = new_id(IdKind::Folder);
        let (prefix, body) = id.split_once('_').expect("separator");
        assert_eq!(prefix, "fld");
        assert_eq!(body.len(), 26);
        assert!(body
            .chars()
            .all(|c| c.is_ascii_digit() || c.is_ascii_lowercase()));
        assert_ne!(id, new_id(IdKind::Folder));
    }
}
