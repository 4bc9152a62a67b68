//! Outbound webhook delivery (contract §7): the domain's delivery ports implemented with an
//! HTTP client that signs with Standard Webhooks v1, resolves through an SSRF-checking
//! resolver pinned to the checked address, and retries on the configured schedule.
//!
//! Nothing of it exists yet: the webhooks issue builds it. The crate is part of the workspace
//! now so that the dependency rule (adapters depend on `domain` only) is fixed from the start.
