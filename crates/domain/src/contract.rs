//! The contract of the folder, flow and settings ports, as executable cases (feature
//! `contract`). Every implementation runs them: the SQLite and PostgreSQL adapters in their
//! contract tests, and [`MemoryStore`](crate::memory::MemoryStore) in this crate's.
//!
//! What the cases hold an implementation to:
//! - every read and write is scoped to its environment: another environment's folder or flow
//!   is invisible, and is not a valid parent or folder to file in;
//! - sibling folder names are unique by exact match (roots are siblings too): a clash is
//!   [`StorageError::UniqueViolation`];
//! - a parent or folder that does not exist in the environment is
//!   [`StorageError::ForeignKeyViolation`], and so is deleting a folder that has sub-folders;
//! - deleting a folder un-files its flows in the same transaction;
//! - [`FlowRepository::save`] is a compare-and-swap on `revision`: a stale one is
//!   [`StorageError::StaleRevision`] and changes nothing, not even the version rows; of racing
//!   saves on one revision exactly one wins;
//! - lists come newest first (by id, descending), after the cursor, at most `limit + 1`;
//! - settings default to off and are kept per environment.
//!
//! [`StorageError::UniqueViolation`]: crate::StorageError::UniqueViolation
//! [`StorageError::ForeignKeyViolation`]: crate::StorageError::ForeignKeyViolation
//! [`FlowRepository::save`]: crate::FlowRepository::save
//! [`StorageError::StaleRevision`]: crate::StorageError::StaleRevision
//!
//! ```
//! use std::sync::Arc;
//! use workbench_domain::contract::{check, Stores};
//! use workbench_domain::memory::MemoryStore;
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! check(|| async {
//!     let store = Arc::new(MemoryStore::new());
//!     let stores = Stores { folders: store.clone(), flows: store.clone(), settings: store };
//!     (stores, ())
//! })
//! .await;
//! # });
//! ```

mod fixtures;
mod flows;
mod folders;
mod settings;

use std::future::Future;

use futures_util::future::{BoxFuture, FutureExt};

use flows::{
    compare_and_swap, filed_in_environment, flows_round_trip, list_filters, next_revision,
    racing_saves,
};
use folders::{
    delete, folders_round_trip, parent_in_environment, rename, sibling_names_unique, unfile,
};
use settings::settings;

pub use fixtures::Stores;

type Case = fn(Stores) -> BoxFuture<'static, ()>;

/// Every case, by name.
pub const CASES: &[(&str, Case)] = &[
    ("folders_round_trip_and_stay_in_their_environment", |s| {
        folders_round_trip(s).boxed()
    }),
    (
        "sibling_names_are_unique_by_exact_match_including_roots",
        |s| sibling_names_unique(s).boxed(),
    ),
    ("a_parent_must_exist_in_the_same_environment", |s| {
        parent_in_environment(s).boxed()
    }),
    ("rename_updates_name_and_time_only", |s| rename(s).boxed()),
    ("delete_refuses_parents_and_removes_leaves", |s| {
        delete(s).boxed()
    }),
    ("flows_and_versions_round_trip", |s| {
        flows_round_trip(s).boxed()
    }),
    ("save_is_a_compare_and_swap_with_its_version_change", |s| {
        compare_and_swap(s).boxed()
    }),
    (
        "a_save_writes_the_next_revision_whatever_the_flow_says",
        |s| next_revision(s).boxed(),
    ),
    ("racing_saves_on_one_revision_let_exactly_one_win", |s| {
        racing_saves(s).boxed()
    }),
    ("list_filters_combine_and_pages_follow_newest_first", |s| {
        list_filters(s).boxed()
    }),
    (
        "deleting_a_folder_unfiles_its_flows_in_the_same_transaction",
        |s| unfile(s).boxed(),
    ),
    (
        "a_flow_can_only_be_filed_in_a_folder_of_its_environment",
        |s| filed_in_environment(s).boxed(),
    ),
    ("settings_default_off_and_upsert", |s| settings(s).boxed()),
];

/// Runs every case on stores from `fresh`, a new set for each case. `fresh` also returns a
/// guard kept until its case ends (a temporary database, say). A failing case panics; the
/// name of each case is printed to standard error before it runs.
pub async fn check<G, F, Fut>(fresh: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = (Stores, G)>,
{
    for (name, case) in CASES {
        let (stores, guard) = fresh().await;
        eprintln!("port contract: {name}");
        case(stores).await;
        drop(guard);
    }
}
