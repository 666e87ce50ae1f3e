//! Semantic rules: everything the macros reject, each error spanned on the
//! user's token with a how-to-fix message.

pub(crate) mod graph;
pub(crate) mod state;
