//! One module per command: each turns its arguments into div-core options, calls div-core and
//! renders what comes back. A command names only `shared/` (what they all use: the control
//! plane, the run acted on, output, the log followed), never another command; the dispatch
//! that names them all is `dispatch.rs`, above them, which nothing names.

pub(crate) mod config;
pub(crate) mod dashboard;
pub(crate) mod generate;
pub(crate) mod image;
pub(crate) mod logs;
pub(crate) mod models;
pub(crate) mod result;
pub(crate) mod run;
pub(crate) mod runs;
pub(crate) mod secrets;
pub(crate) mod server;
pub(crate) mod server_users;
pub(crate) mod shared;
pub(crate) mod stop;
pub(crate) mod storage;
pub(crate) mod telemetry;
