//! The audience: end users with their tags, segments of them, and the streams cards are
//! published on.

mod segments;
mod streams;
mod users;
pub use segments::DieselSegmentRepository;
pub use streams::DieselStreamRepository;
pub use users::DieselEndUserRepository;
