//! The book's first handler (integrations/rust-handler.md includes the ANCHOR part): a
//! welcome mail, retried when the mail server is down and buried when the mail is refused.

use std::sync::Mutex;

use serde_json::Value;

/// The example's mail service: an outbox, a server that is down for `@down.example`, and a
/// refusal of a payload without an address.
#[derive(Default)]
pub struct Mailer {
    pub sent: Mutex<Vec<Value>>,
}

pub enum MailError {
    Unavailable(String),
    Refused(String),
}

impl Mailer {
    pub async fn send(&self, payload: &Value) -> Result<(), MailError> {
        match payload["to"].as_str() {
            None => Err(MailError::Refused("no address to send to".into())),
            Some(to) if to.ends_with("@down.example") => Err(MailError::Unavailable(format!(
                "mail server for {to} is down"
            ))),
            Some(_) => {
                self.sent.lock().unwrap().push(payload.clone());
                Ok(())
            }
        }
    }
}

// ANCHOR: welcome
use event_bridge::{Handler, HandlerError, Task};

/// Sends a welcome mail per task: a mail server that is down is worth another try later,
/// a mail it refuses is not.
pub struct SendWelcomeMail {
    pub mailer: Mailer,
}

impl Handler for SendWelcomeMail {
    async fn handle(&self, task: &Task) -> Result<(), HandlerError> {
        // task.envelope.payload is the event; task.fencing_token grows with every claim.
        self.mailer
            .send(&task.envelope.payload)
            .await
            .map_err(|e| match e {
                MailError::Unavailable(why) => HandlerError::Retryable(why),
                MailError::Refused(why) => HandlerError::Permanent(why),
            })
    }
}
// ANCHOR_END: welcome
