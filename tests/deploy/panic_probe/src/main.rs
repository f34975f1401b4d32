//! A Lambda function for tests/deploy/panic.rs: `{"panic": "message"}` makes the handler panic
//! with that message; any other event is answered with `{"echoed": <event>}`.

use lambda_runtime::{Error, LambdaEvent, service_fn};
use serde_json::{Value, json};

async fn handle(event: LambdaEvent<Value>) -> Result<Value, Error> {
    if let Some(message) = event.payload.get("panic").and_then(Value::as_str) {
        panic!("{message}");
    }
    Ok(json!({ "echoed": event.payload }))
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::run(service_fn(handle)).await
}
