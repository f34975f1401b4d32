//! How long a task's names and keys may be. Each becomes a znode name, where every byte other
//! than ASCII letters, digits, `-` and `_` takes three ([`crate::segment::encode_segment`]): the
//! group's lock, the id's entries (`done/…/@<id>`, `after/<id>`, `dependents/<id>`), the keys.
//! Claims, completions and burials write up to 32 tasks' names in one multi-op, which must stay
//! within the megabyte ZooKeeper takes in one request: a larger one makes the server drop the
//! connection, and every request on it fails.
//!
//! What a publish takes, each measured as its znode name:
//!
//! | Field | At most |
//! |---|---|
//! | `id`, each of `after` | [`MAX_ID_NAME_BYTES`] (256) |
//! | `type` | [`MAX_TYPE_NAME_BYTES`] (256) |
//! | `group` | [`MAX_GROUP_NAME_BYTES`] (256) |
//! | `idempotency_key` | [`MAX_KEY_NAME_BYTES`] (4 096) |
//! | `concurrency_key` | [`MAX_CONCURRENCY_KEY_NAME_BYTES`] (1 024) |
//! | `debounce_key` | [`super::MAX_DEBOUNCE_KEY_NAME_BYTES`] (1 024) |
//! | `batch` | 512 (see [`super::batch::check_batch_name`]) |
//!
//! A task already in the queue (written by another producer, or by a version without these
//! limits) is run while each of its names is at most [`MAX_RUNNABLE_NAME_BYTES`]; past that its
//! body is poison ([`super::parse`]), buried on its first claim with the reason, and the tasks
//! claimed beside it go on.

/// The longest an id may be as a znode name (and each parent `after` names).
pub const MAX_ID_NAME_BYTES: usize = 256;

/// The longest an event type may be as a znode name (a limited route's gate is named after it).
pub const MAX_TYPE_NAME_BYTES: usize = 256;

/// The longest a group may be as a znode name (`groups/<group>`, its lock).
pub const MAX_GROUP_NAME_BYTES: usize = 256;

/// The longest an idempotency key may be as a znode name (`keys/<key>`). A completion writes
/// that name twice (the key and its expiry entry) in a multi-op it shares with up to 31 other
/// tasks.
pub const MAX_KEY_NAME_BYTES: usize = 4_096;

/// The longest a concurrency key may be as a znode name (`concurrency/<route>/<key>`): a claim
/// writes it twice per task (the key's gate and the task's slot under it), for up to 32 tasks
/// in one request.
pub const MAX_CONCURRENCY_KEY_NAME_BYTES: usize = 1_024;

/// The longest any name of a task in the queue may be, as a znode name, for a consumer to run
/// it: the largest a publish takes (an idempotency key's). Past it, a claim's or a completion's
/// multi-op of the task could be larger than ZooKeeper takes.
pub const MAX_RUNNABLE_NAME_BYTES: usize = MAX_KEY_NAME_BYTES;
