//! Vercel glue: reading a request's `Authorization` header, and writing a JSON response.

use vercel_runtime::{Request, Response};

use crate::reply::HttpReply;

/// A Vercel request's `Authorization` header, if it is readable text.
pub fn authorization(req: &Request) -> Option<&str> {
    req.headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
}

/// The response a Vercel function returns.
pub fn response(reply: HttpReply) -> Result<Response<String>, vercel_runtime::Error> {
    let mut response = Response::builder()
        .status(reply.status)
        .header("content-type", "application/json");
    for (name, value) in &reply.headers {
        response = response.header(*name, value);
    }
    Ok(response.body(reply.body.to_string())?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn responses_are_json() {
        let response = response(HttpReply::unauthorized()).unwrap();
        assert_eq!(response.status(), 401);
        assert_eq!(response.headers()["content-type"], "application/json");
        let body: Value = serde_json::from_str(response.body()).unwrap();
        assert_eq!(body["error"], "Unauthorized");
        let refused = super::response(HttpReply::method_not_allowed("PUT", "GET, POST")).unwrap();
        assert_eq!(refused.headers()["allow"], "GET, POST");
    }
}
