//! One message as SQS takes it: body, attributes and, on a FIFO queue, group and
//! deduplication id; alone or as a batch entry.

use std::collections::HashMap;

use aws_sdk_sqs::types::{MessageAttributeValue, SendMessageBatchRequestEntry};

use super::fifo::{deduplication_id, message_group_id};
use super::{ATTEMPT, EVENT_NAME, SOURCE, SOURCE_VALUE, TASK_ID, TRACEPARENT};
use crate::task::Task;

/// One message, ready for `SendMessage` or a batch entry.
#[derive(Clone, Debug)]
pub(super) struct Outgoing {
    /// The task's name, for logs.
    pub(super) task: String,
    pub(super) body: String,
    pub(super) attributes: HashMap<String, MessageAttributeValue>,
    pub(super) group: Option<String>,
    pub(super) deduplication_id: Option<String>,
    /// Body and attributes, in bytes, as SQS counts them against its size limits.
    pub(super) size: usize,
}

impl Outgoing {
    /// `task`'s message: body, attributes and, on a FIFO queue (`fifo`), group and
    /// deduplication id (`default_group` for a task without a group).
    pub(super) fn for_task(task: &Task, fifo: bool, default_group: Option<&str>) -> Self {
        let envelope = &task.envelope;
        let body = envelope.payload.to_string();
        let (attributes, attributes_size) = attributes([
            (EVENT_NAME, "String", envelope.event_type.clone()),
            (SOURCE, "String", SOURCE_VALUE.to_string()),
            (TASK_ID, "String", envelope.id.clone()),
            (ATTEMPT, "Number", task.attempt().to_string()),
            (
                TRACEPARENT,
                "String",
                envelope.traceparent.clone().unwrap_or_default(),
            ),
        ]);
        let (group, deduplication_id) = if fifo {
            (
                Some(message_group_id(envelope, default_group)),
                Some(deduplication_id(envelope)),
            )
        } else {
            (None, None)
        };
        Outgoing {
            task: task.name.clone(),
            size: body.len() + attributes_size,
            body,
            attributes,
            group,
            deduplication_id,
        }
    }

    /// This message as entry `index` of a batch.
    pub(super) fn entry(&self, index: usize) -> SendMessageBatchRequestEntry {
        SendMessageBatchRequestEntry::builder()
            .id(index.to_string())
            .message_body(self.body.clone())
            .set_message_attributes(Some(self.attributes.clone()))
            .set_message_group_id(self.group.clone())
            .set_message_deduplication_id(self.deduplication_id.clone())
            .build()
            .expect("id and body are set")
    }
}

/// The message attributes whose value is not empty (SQS refuses empty ones), and their size
/// as SQS counts it (name, data type and value).
pub(super) fn attributes<const N: usize>(
    list: [(&str, &str, String); N],
) -> (HashMap<String, MessageAttributeValue>, usize) {
    let mut map = HashMap::with_capacity(N);
    let mut size = 0;
    for (name, data_type, value) in list {
        if value.is_empty() {
            continue;
        }
        size += name.len() + data_type.len() + value.len();
        let value = MessageAttributeValue::builder()
            .data_type(data_type)
            .string_value(value)
            .build()
            .expect("the data type is set");
        map.insert(name.to_string(), value);
    }
    (map, size)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attribute_sizes_count_name_type_and_value_and_skip_empty_values() {
        let (map, size) = attributes([
            ("A", "String", "xy".to_string()),
            ("B", "Number", String::new()),
        ]);
        assert_eq!(map.len(), 1);
        assert_eq!(size, 1 + 6 + 2);
    }
}
