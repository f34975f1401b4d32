//! Whether a queue answers, without sending it anything: `GetQueueAttributes` (what `event-bridge
//! doctor` asks of each SQS sink).

use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::QueueAttributeName;

use super::classify::classify;
use super::fifo::queue_name;

/// Why a queue did not answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unreachable {
    /// SQS answered that the queue does not exist.
    pub missing: bool,
    /// SQS's or the SDK's error, naming the queue (as a delivery's error would).
    pub message: String,
}

/// Asks the queue at `queue_url` for its ARN.
pub async fn reachable(client: &Client, queue_url: &str) -> Result<(), Unreachable> {
    let asked = client
        .get_queue_attributes()
        .queue_url(queue_url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await;
    match asked {
        Ok(_) => Ok(()),
        Err(e) => {
            let message = classify(queue_name(queue_url), &e).message;
            let missing = (e.as_service_error()).is_some_and(|s| s.is_queue_does_not_exist())
                || message.contains(": does not exist");
            Err(Unreachable { missing, message })
        }
    }
}
