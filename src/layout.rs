//! The names of the files in a store's directory (SPEC R1), in a leaf module so that the error
//! type, the opening code and the store can all name them.

/// The file that marks a directory as an oncelake store and stamps its format.
pub const MARKER_FILE: &str = "ONCELAKE";
/// The redb database inside a store.
pub const DB_FILE: &str = "oncelake.redb";
/// The store's lock file.
pub(crate) const LOCK_FILE: &str = "LOCK";
