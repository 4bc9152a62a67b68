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
}

impl IdKind {
    /// The three letters before the `_` of this kind's ids.
    pub const fn prefix(self) -> &'static str {
        match self {
            IdKind::Organisation => "org",
            IdKind::Environment => "env",
            IdKind::Folder => "fld",
            IdKind::Key => "key",
            IdKind::Flow => "flw",
            IdKind::Segment => "seg",
            IdKind::Stream => "str",
            IdKind::Invocation => "inv",
            IdKind::FlowInstance => "fin",
            IdKind::Card => "crd",
            IdKind::Event => "evt",
            IdKind::Webhook => "whk",
            IdKind::Delivery => "whd",
            IdKind::Attempt => "wha",
            IdKind::Error => "err",
            IdKind::PushPlatform => "npl",
            IdKind::Push => "psh",
        }
    }
}

/// A new, time-ordered, globally unique identifier of the given kind.
pub fn new_id(kind: IdKind) -> String {
    // Written into one string (three cards' ids per CSV row: three allocations each were
    // 4% of a CSV task's preparing thread).
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

#[cfg(test)]
mod tests {
    use super::*;

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
