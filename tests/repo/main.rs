//! Checks of the repository itself: doc links, cited labels, module layering, and the fuzz
//! corpus replayed.

#[path = "../common/mod.rs"]
mod common;

mod doc_links;
mod fuzz_corpus;
mod labels;
mod layers;
