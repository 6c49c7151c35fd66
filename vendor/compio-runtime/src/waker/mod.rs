//! Waker related utilities.

mod ext;

pub(crate) use ext::*;
