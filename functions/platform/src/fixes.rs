//! Every error answer an HTTP caller can get names its fix: the one list of the functions'
//! refusals (401, 400, 405, 413, and a failure's 5xx), each built as the code builds it, with
//! the fix its message must carry. A fix starts with a verb of [`DOING`], or is a command or
//! header in backquotes. The library's own errors have their list in `event_bridge`'s
//! `fixes.rs`; a 5xx carries one of those.

use event_bridge::{Config, Error};
use serde_json::json;

use crate::intake::{self, Refused};
use crate::{HttpReply, admit, admit_publish, trigger};

/// The verbs a fix starts with.
const DOING: &[&str] = &[
    "send ", "set ", "give ", "remove ", "split ", "keep ", "correct ", "check ", "run ",
];

fn message(reply: HttpReply) -> String {
    reply.body["message"]
        .as_str()
        .expect("a message")
        .to_string()
}

fn refused(body: &[u8]) -> String {
    match intake::read_batch(body, 1_000, &Default::default()) {
        Err(Refused::Bad(problem)) => message(HttpReply::bad_request(&problem)),
        Err(Refused::TooLarge(problem)) => message(HttpReply::too_large(&problem)),
        Ok(_) => panic!("{} was read", String::from_utf8_lossy(body)),
    }
}

fn rows() -> Vec<(String, &'static str)> {
    let closed = Config::default();
    let mut with_secret = Config::default();
    with_secret.cron_secret = Some(event_bridge::Secret::new("s"));
    with_secret.publish_secret = Some(event_bridge::Secret::new("p"));
    let bad_signal = |body: &str| intake::read_signal(body.as_bytes()).unwrap().unwrap_err();
    vec![
        (message(admit(&with_secret, None).unwrap_err()), "send Authorization: Bearer <CRON_SECRET>"),
        (message(admit(&closed, None).unwrap_err()), "set it (Vercel sends it with its crons)"),
        (message(admit_publish(&with_secret, None).unwrap_err()), "send Authorization: Bearer <PUBLISH_SECRET>"),
        (message(admit_publish(&closed, None).unwrap_err()), "set it, or ALLOW_UNAUTHENTICATED=1"),
        (message(intake::run_method("DELETE").unwrap_err()), "send one of"),
        (message(intake::ask("PUT", "", false).unwrap_err()), "send one of"),
        (message(intake::ask("GET", "status=", false).unwrap_err()), "give it a task name or id"),
        (message(intake::ask("GET", "batch=", false).unwrap_err()), "give it a batch name"),
        (message(intake::ask("POST", "max_tasks=0", false).unwrap_err()), "send a positive whole number"),
        (trigger::from_lambda_event(&json!({"mode": "fast"})).unwrap_err(), "send \"drain\" or \"scheduled\""),
        (trigger::from_lambda_event(&json!({"max_tasks": 3})).unwrap_err(), "send {\"mode\": \"drain\""),
        (bad_signal(r#"{"signal": 7}"#), "send {\"signal\": \"<key>\"}"),
        (bad_signal(r#"{"signal": "k", "extra": 1}"#), "remove \"extra\""),
        (refused(&[b'x'; 1_001]), "split it into smaller publishes, or raise PUBLISH_MAX_BYTES"),
        (refused(b"{\"payload\": \"\xff\"}"), "send JSON in UTF-8"),
        (refused(b"[1, 2]"), "send a task object, or one per line"),
        (refused(b"  \n"), "send a task object, or one per line"),
        (refused(b"{\"type\": \"a\", \"payload\": {}}\nnot json"), "correct that line"),
        (
            refused(b"{\"type\": \"a\", \"payload\": {}, \"id\": \"x\"}\n{\"type\": \"a\", \"payload\": {}, \"id\": \"x\"}"),
            "give each line its own id",
        ),
        (
            message(HttpReply::failed(&Error::Unreachable {
                address: "10.0.0.1:2181".into(),
                timeout_ms: 5_000,
                reason: "timed out".into(),
            })),
            "check that it runs",
        ),
    ]
}

#[test]
fn every_http_error_answer_names_its_fix() {
    for (message, fix) in rows() {
        assert!(
            DOING.iter().any(|verb| fix.starts_with(verb)),
            "the fix {fix:?} says nothing to do"
        );
        assert!(message.contains(fix), "{message:?} does not say {fix:?}");
    }
}
