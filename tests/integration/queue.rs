//! (tests added in this module)
