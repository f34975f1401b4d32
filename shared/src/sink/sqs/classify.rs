//! Reading SQS's and the SDK's errors: whether a failure is worth another try, and what it
//! means, in a message that names the queue. The tables are the tests below.

use aws_sdk_sqs::config::http::HttpResponse;
use aws_sdk_sqs::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};

use crate::sink::error::SinkError;

/// How many bytes of an error's detail a message quotes.
const DETAIL_BYTES: usize = 200;

/// An SQS failure, classified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Failure {
    pub(super) retryable: bool,
    pub(super) message: String,
}

impl Failure {
    pub(super) fn into_sink_error(self) -> SinkError {
        if self.retryable {
            SinkError::Retryable(self.message)
        } else {
            SinkError::Permanent(self.message)
        }
    }
}

/// Classifies an SDK error on queue `name`; the tables are the tests below.
pub(super) fn classify<E>(name: &str, error: &SdkError<E, HttpResponse>) -> Failure
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    let (retryable, what, detail) = match error {
        SdkError::ServiceError(context) => {
            let err = context.err();
            let status = context.raw().status().as_u16();
            let (retryable, what) = classify_service(err.code(), status);
            let detail = match (err.code(), err.message()) {
                (Some(code), Some(message)) => format!("{code}: {message}"),
                (Some(code), None) => code.to_string(),
                (None, Some(message)) => format!("HTTP {status}: {message}"),
                (None, None) => format!("HTTP {status}"),
            };
            (retryable, what, detail)
        }
        SdkError::TimeoutError(_) => (true, "timed out", String::new()),
        SdkError::DispatchFailure(failure) => {
            let what = match failure.as_connector_error() {
                Some(e) if e.is_io() => "unreachable",
                Some(e) if e.is_timeout() => "timed out",
                _ => "could not send",
            };
            (true, what, context_of(error))
        }
        SdkError::ResponseError(_) => (true, "unreadable response", context_of(error)),
        SdkError::ConstructionFailure(_) => {
            (false, "request could not be built", context_of(error))
        }
        _ => (true, "failed", context_of(error)),
    };
    let message = if detail.is_empty() {
        format!("SQS queue {name}: {what}")
    } else {
        format!("SQS queue {name}: {what} ({})", truncate(&detail))
    };
    Failure { retryable, message }
}

// Error codes SQS (and KMS behind it) answers with, by what they mean.
const MISSING: &[&str] = &[
    "AWS.SimpleQueueService.NonExistentQueue",
    "QueueDoesNotExist",
];
const DENIED: &[&str] = &[
    "AccessDenied",
    "AccessDeniedException",
    "InvalidSecurity",
    "InvalidClientTokenId",
    "UnrecognizedClientException",
    "SignatureDoesNotMatch",
    "IncompleteSignature",
    "MissingAuthenticationToken",
    "OptInRequired",
    "KMS.AccessDeniedException",
];
const MESSAGE: &[&str] = &[
    "InvalidMessageContents",
    "InvalidParameterValue",
    "InvalidParameterCombination",
    "InvalidAttributeValue",
    "InvalidAttributeName",
    "MissingParameter",
    "ValidationError",
    "ValidationException",
];
const KEY: &[&str] = &[
    "KMS.DisabledException",
    "KMS.InvalidKeyUsageException",
    "KMS.InvalidStateException",
    "KMS.NotFoundException",
    "KMS.OptInRequired",
];
const THROTTLED: &[&str] = &[
    "RequestThrottled",
    "ThrottlingException",
    "Throttling",
    "ThrottledException",
    "RequestThrottledException",
    "TooManyRequestsException",
    "RequestLimitExceeded",
    "SlowDown",
    "KMS.ThrottlingException",
];
const EXPIRED: &[&str] = &["ExpiredToken", "ExpiredTokenException", "RequestExpired"];
const UNAVAILABLE: &[&str] = &[
    "InternalError",
    "InternalFailure",
    "InternalServerError",
    "ServiceUnavailable",
    "RequestTimeout",
    "RequestTimeoutException",
];

/// Whether an error SQS answered with is worth another try, and what it means, by its code and
/// HTTP status.
fn classify_service(code: Option<&str>, status: u16) -> (bool, &'static str) {
    let is = |list: &[&str]| code.is_some_and(|c| list.contains(&c));
    if is(MISSING) {
        (false, "does not exist")
    } else if is(DENIED) {
        (false, "access denied")
    } else if is(MESSAGE) {
        (false, "message refused")
    } else if is(KEY) {
        (false, "encryption key unusable")
    } else if is(THROTTLED) || status == 429 {
        (true, "throttled")
    } else if is(EXPIRED) {
        (true, "credentials expired")
    } else if is(UNAVAILABLE) || status >= 500 {
        (true, "unavailable")
    } else {
        (false, "request refused")
    }
}

/// An error with its sources, as one line.
fn context_of(error: &(dyn std::error::Error + 'static)) -> String {
    DisplayErrorContext(error).to_string()
}

/// `text` on one line, at most [`DETAIL_BYTES`] of it, cut at a character boundary, with `…`
/// when cut.
pub(super) fn truncate(text: &str) -> String {
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if text.len() <= DETAIL_BYTES {
        return text;
    }
    let mut end = DETAIL_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// Whether a failed batch entry is worth another try, and what it means: see "Batching".
pub(super) fn classify_entry(code: &str, sender_fault: bool) -> (bool, &'static str) {
    let (retryable, what) = classify_service(Some(code), 400);
    match (sender_fault, retryable, what) {
        (true, false, "request refused") => (false, "message refused"),
        (true, _, _) => (retryable, what),
        (false, true, _) => (true, what),
        (false, false, _) => (true, "unavailable"),
    }
}

/// The error code of a service error, if `error` is one.
pub(super) fn service_code<E: ProvideErrorMetadata>(
    error: &SdkError<E, HttpResponse>,
) -> Option<&str> {
    match error {
        SdkError::ServiceError(context) => context.err().code(),
        _ => None,
    }
}

/// Whether a batch refused as a whole with `code` is sent again message by message: when the
/// refusal may be about one message, or about the batch's shape.
pub(super) fn resend_singly(code: Option<&str>) -> bool {
    let Some(code) = code else { return false };
    let code = code.trim_start_matches("AWS.SimpleQueueService.");
    matches!(
        code,
        "BatchRequestTooLong"
            | "TooManyEntriesInBatchRequest"
            | "BatchEntryIdsNotDistinct"
            | "InvalidBatchEntryId"
    ) || matches!(
        classify_service(Some(code), 400),
        (false, "message refused")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_errors_are_classified_by_code_then_status() {
        let cases: [(Option<&str>, u16, bool, &str); 14] = [
            (
                Some("AWS.SimpleQueueService.NonExistentQueue"),
                400,
                false,
                "does not exist",
            ),
            (Some("QueueDoesNotExist"), 400, false, "does not exist"),
            (Some("AccessDenied"), 403, false, "access denied"),
            (Some("InvalidClientTokenId"), 403, false, "access denied"),
            (
                Some("KMS.AccessDeniedException"),
                400,
                false,
                "access denied",
            ),
            (
                Some("InvalidMessageContents"),
                400,
                false,
                "message refused",
            ),
            (Some("InvalidParameterValue"), 400, false, "message refused"),
            (
                Some("KMS.NotFoundException"),
                400,
                false,
                "encryption key unusable",
            ),
            (Some("RequestThrottled"), 400, true, "throttled"),
            (Some("KMS.ThrottlingException"), 400, true, "throttled"),
            (None, 429, true, "throttled"),
            (Some("ExpiredToken"), 403, true, "credentials expired"),
            (Some("ServiceUnavailable"), 503, true, "unavailable"),
            (Some("SomethingNew"), 502, true, "unavailable"),
        ];
        for (code, status, retryable, what) in cases {
            assert_eq!(
                classify_service(code, status),
                (retryable, what),
                "{code:?} {status}"
            );
        }
        assert_eq!(
            classify_service(Some("SomethingNew"), 400),
            (false, "request refused")
        );
        assert_eq!(classify_service(None, 404), (false, "request refused"));
    }

    #[test]
    fn failed_entries_are_classified_by_fault_then_code() {
        let cases = [
            (
                "AWS.SimpleQueueService.NonExistentQueue",
                true,
                false,
                "does not exist",
            ),
            ("AccessDenied", true, false, "access denied"),
            ("InvalidMessageContents", true, false, "message refused"),
            ("Unknown", true, false, "message refused"),
            ("ThrottlingException", true, true, "throttled"),
            ("ExpiredToken", true, true, "credentials expired"),
            ("InternalError", false, true, "unavailable"),
            ("InvalidParameterValue", false, true, "unavailable"),
            ("RequestThrottled", false, true, "throttled"),
        ];
        for (code, sender_fault, retryable, what) in cases {
            assert_eq!(
                classify_entry(code, sender_fault),
                (retryable, what),
                "{code} {sender_fault}"
            );
        }
    }

    #[test]
    fn a_batch_refused_for_one_message_or_its_shape_is_resent_singly() {
        for code in [
            "InvalidParameterValue",
            "InvalidMessageContents",
            "AWS.SimpleQueueService.BatchRequestTooLong",
            "BatchRequestTooLong",
            "AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
            "AWS.SimpleQueueService.BatchEntryIdsNotDistinct",
            "AWS.SimpleQueueService.InvalidBatchEntryId",
        ] {
            assert!(resend_singly(Some(code)), "{code}");
        }
        for code in [
            None,
            Some("AWS.SimpleQueueService.NonExistentQueue"),
            Some("AccessDenied"),
            Some("RequestThrottled"),
            Some("InternalError"),
            Some("SomethingNew"),
        ] {
            assert!(!resend_singly(code), "{code:?}");
        }
    }

    #[test]
    fn details_are_cut_at_a_character_boundary() {
        assert_eq!(truncate("short"), "short");
        assert_eq!(
            truncate("no credentials:\n  Environment: unset"),
            "no credentials: Environment: unset"
        );
        let long = "é".repeat(150); // 300 bytes
        let cut = truncate(&long);
        assert!(cut.ends_with('…') && cut.len() <= DETAIL_BYTES + '…'.len_utf8());
    }
}
