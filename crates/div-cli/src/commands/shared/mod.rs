//! What the commands share, beneath all of them: none of these modules names a command, so a
//! command depends on them and on nothing of another command's. Lowest first; each uses only
//! those listed before it.

pub(crate) mod connect;
pub(crate) mod follow;
pub(crate) mod local;
pub(crate) mod output;
pub(crate) mod prompt;
pub(crate) mod timings;
