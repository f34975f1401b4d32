//! The record's stored part: the entries a task's envelope no longer keeps, in step znodes of
//! their own (`steps/<id>/<first position>`, each a JSON array of entries). A write of the
//! record stores the entries new since the last one in one such znode and rewrites the
//! envelope with only the tail ([`Record::to_store`]), so a step's write costs the same at the
//! 10th step and at the 10 000th. A run reads the stored part back once, when it claims the
//! task ([`join`]); the steps it records after that stay in its memory.

use super::record::{Entry, Record};

/// A write of the record that the holder makes: the entries to store, and the envelope's part.
#[derive(Clone, Debug, PartialEq)]
pub struct Unwritten {
    /// The handle's change number this write brings the record up to.
    pub change: u64,
    /// The position of the first entry of `chunk`.
    pub first: usize,
    /// The entries to store in a znode of their own (none: nothing new to store).
    pub chunk: Vec<Entry>,
    /// The record as the envelope keeps it once `chunk` is stored.
    pub record: Record,
}

impl Unwritten {
    /// The write of `record` as of change `change`.
    pub(crate) fn of(change: u64, record: &Record) -> Self {
        let count = record.to_store();
        Unwritten {
            change,
            first: record.stored,
            chunk: record.done[..count].to_vec(),
            record: record.after_storing(count),
        }
    }

    /// The chunk's bytes, when there is one.
    ///
    /// # Errors
    /// When an entry is not JSON (it was made from JSON, so never in practice).
    pub fn chunk_bytes(&self) -> serde_json::Result<Option<Vec<u8>>> {
        match self.chunk.is_empty() {
            true => Ok(None),
            false => serde_json::to_vec(&self.chunk).map(Some),
        }
    }
}

/// The `stored` entries of a record, read back from its step znodes (`(name, data)`, in any
/// order). A znode past `stored` (none is written but with the envelope that counts it) is
/// left out.
///
/// # Errors
/// What is wrong, when a znode does not read, or the entries do not run from 0 to `stored`:
/// the task cannot resume (its handler would run its steps again).
pub fn join(stored: usize, mut chunks: Vec<(String, Vec<u8>)>) -> Result<Vec<Entry>, String> {
    chunks.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let mut entries = Vec::with_capacity(stored);
    for (name, data) in chunks {
        let Ok(first) = name.parse::<usize>() else {
            return Err(format!("step znode {name:?} is not named by a position"));
        };
        if first >= stored {
            break;
        }
        if first != entries.len() {
            return Err(gap(entries.len(), stored));
        }
        let chunk: Vec<Entry> = serde_json::from_slice(&data)
            .map_err(|e| format!("step znode {name:?} does not read as entries: {e}"))?;
        entries.extend(chunk);
    }
    if entries.len() != stored {
        return Err(gap(entries.len(), stored));
    }
    Ok(entries)
}

fn gap(position: usize, stored: usize) -> String {
    format!("the record's stored entries stop at position {position}, {stored} were stored")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn step(name: &str) -> Entry {
        Entry::Step {
            name: name.into(),
            result: json!(name),
        }
    }

    fn chunk(first: usize, entries: &[Entry]) -> (String, Vec<u8>) {
        (format!("{first:010}"), serde_json::to_vec(entries).unwrap())
    }

    #[test]
    fn a_write_stores_what_is_new_and_the_envelope_keeps_the_sleep_it_is_in() {
        let record = Record {
            stored: 2,
            stored_steps: 2,
            done: vec![step("c"), Entry::Sleep { until_ms: 9 }],
            ..Record::default()
        };
        let write = Unwritten::of(7, &record);
        assert_eq!((write.change, write.first), (7, 2));
        assert_eq!(write.chunk, [step("c")]);
        assert_eq!(write.record.done, [Entry::Sleep { until_ms: 9 }]);
        assert_eq!((write.record.stored, write.record.stored_steps), (3, 3));
        let nothing = Unwritten::of(8, &write.record);
        assert_eq!(nothing.chunk_bytes().unwrap(), None);
    }

    #[test]
    fn chunks_join_in_position_order_and_one_past_the_count_is_left_out() {
        let chunks = vec![
            chunk(2, &[step("c")]),
            chunk(0, &[step("a"), step("b")]),
            chunk(3, &[step("d")]),
        ];
        let joined = join(3, chunks).unwrap();
        assert_eq!(joined, [step("a"), step("b"), step("c")]);
    }

    #[test]
    fn a_missing_chunk_or_an_unreadable_one_is_named() {
        let gap = join(3, vec![chunk(0, &[step("a")]), chunk(2, &[step("c")])]);
        assert_eq!(
            gap.unwrap_err(),
            "the record's stored entries stop at position 1, 3 were stored"
        );
        let short = join(2, vec![chunk(0, &[step("a")])]).unwrap_err();
        assert!(
            short.contains("stop at position 1, 2 were stored"),
            "{short}"
        );
        let bad = join(1, vec![("0000000000".into(), b"{".to_vec())]).unwrap_err();
        assert!(bad.contains("does not read as entries"), "{bad}");
        let name = join(1, vec![("x".into(), b"[]".to_vec())]).unwrap_err();
        assert_eq!(name, "step znode \"x\" is not named by a position");
    }
}
