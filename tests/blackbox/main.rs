//! Black-box tests: the real `workbench` binary, started per test on a free port against a
//! fresh SQLite file or PostgreSQL schema, driven over HTTP and through its admin commands.

mod access;
mod audience;
mod auth;
mod browser;
mod bulk;
mod cancel;
mod clock;
mod console;
mod console_journeys;
mod console_steps;
mod document;
mod feed;
mod flows;
mod folders;
mod hang;
mod hostile;
mod limits;
mod lists;
mod migrations;
mod ops;
mod push;
mod receiver;
mod retention;
mod sdk;
mod shutdown;
mod steps;
mod storage;
mod support;
mod trigger;
mod webhooks;
