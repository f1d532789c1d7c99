//! Identifier helpers.

use uuid::Uuid;

/// A new time-ordered id (UUIDv7): request ids, audit rows and every record we create,
/// so primary-key inserts stay append-mostly and ids sort by creation time.
pub fn new_id() -> Uuid {
    Uuid::now_v7()
}
