//! A usage error as clap reports it, but with the bad value quoted short and escaped: clap
//! writes the value as it came, so a 100 KB argument came back whole, and one holding a line
//! break or a terminal escape sequence broke the line or reached the terminal.

use clap::error::{ContextKind, ContextValue, ErrorKind};
use event_bridge::task::{SHOWN_BYTES, shown};

/// Prints `e` and exits with clap's code (2 for bad usage).
pub(crate) fn exit(e: clap::Error) -> ! {
    let value = match (e.kind(), e.get(ContextKind::InvalidValue)) {
        (ErrorKind::InvalidValue | ErrorKind::ValueValidation, Some(ContextValue::String(v))) => v,
        _ => e.exit(),
    };
    if value.len() <= SHOWN_BYTES && !value.chars().any(char::is_control) {
        e.exit(); // short, nothing to escape: clap's own words
    }
    let arg = match e.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(arg)) => arg.as_str(),
        _ => "an argument",
    };
    let why = match (
        std::error::Error::source(&e),
        e.get(ContextKind::ValidValue),
    ) {
        (Some(cause), _) => cause.to_string(),
        (None, Some(ContextValue::Strings(valid))) => {
            format!("[possible values: {}]", valid.join(", "))
        }
        _ => "not a value it takes".to_string(),
    };
    eprintln!(
        "error: invalid value {} for '{arg}': {}\n\nFor more information, try '--help'.",
        shown(value),
        event_bridge::task::one_line(&why, 400)
    );
    std::process::exit(e.exit_code());
}
