//! A task nobody holds, as read: what burying it needs.

use crate::task::OnDead;

/// A task nobody holds, about to be buried.
pub(super) struct Unclaimed<'a> {
    pub name: &'a str,
    pub body: &'a [u8],
    /// The task znode's version as read.
    pub version: i32,
    pub attempts: u32,
    /// What its group does if it holds the group's lock.
    pub on_dead: OnDead,
}

impl<'a> Unclaimed<'a> {
    pub fn new(
        name: &'a str,
        body: &'a [u8],
        version: i32,
        attempts: u32,
        on_dead: OnDead,
    ) -> Self {
        Unclaimed {
            name,
            body,
            version,
            attempts,
            on_dead,
        }
    }
}
