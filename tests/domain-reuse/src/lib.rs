//! Nothing but its tests: see tests/reuse.rs.
