//! One spelling per variant of the domain's field-less enums (statuses, modes, roles, ...),
//! written once: `spelled!` gives an enum its `ALL`, `as_str`, `parse` and `Display` from one
//! list of `Variant => "spelling"` pairs. Storage writes and filters by `as_str`, so no status
//! is spelled a second time in SQL.

/// Implements, for a field-less enum, `ALL` (every variant, in the order given), `as_str` (the
/// spelling the API and storage use) and `parse` (its inverse; `None` for anything else) from
/// one list of `Variant => "spelling"` pairs. Every variant must be listed once: `as_str` is a
/// `match`, so a missing one does not compile.
macro_rules! spelled {
    ($ty:ident { $($variant:ident => $text:literal),+ $(,)? }) => {
        impl $ty {
            #[doc = concat!("Every `", stringify!($ty), "`, in a fixed order.")]
            pub const ALL:
                [$ty; $crate::spelling::spelled!(@count $($variant)+)] = [$($ty::$variant),+];

            #[doc = concat!("The spelling of the API and of storage: ", $("`", $text, "` "),+)]
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($ty::$variant => $text),+
                }
            }

            #[doc = concat!("The `", stringify!($ty), "` that [`as_str`](Self::as_str) spells \
                             `s`; `None` for anything else.")]
            pub fn parse(s: &str) -> Option<Self> {
                match s {
                    $($text => Some($ty::$variant),)+
                    _ => None,
                }
            }
        }

        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
    (@count) => { 0usize };
    (@count $head:ident $($tail:ident)*)
        => { 1usize + $crate::spelling::spelled!(@count $($tail)*) };
}

pub(crate) use spelled;
