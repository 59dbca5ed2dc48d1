//! The Gemini API as Gemini CLI calls it: `POST /v1beta/models/MODEL:streamGenerateContent?alt=sse`
//! answered with SSE `data:` lines of `GenerateContentResponse`, and `:generateContent` with one.

use serde_json::{Value, json};

use super::{Answer, INPUT_TOKENS, OUTPUT_TOKENS, Shared, sse_event};

/// One `GenerateContentResponse` holding the whole answer, with the finish reason and usage.
pub(crate) fn response(shared: &Shared, model: &str, answer: &Answer) -> Value {
    let part = match answer {
        Answer::Text(text) => json!({"text": text}),
        Answer::Tool { name, arguments } => {
            json!({"functionCall": {"name": name, "args": arguments}})
        }
    };
    json!({
        "candidates": [{
            "content": {"role": "model", "parts": [part]},
            "index": 0,
            "finishReason": "STOP",
        }],
        "modelVersion": model,
        "responseId": shared.next_id("resp"),
        "usageMetadata": {
            "promptTokenCount": INPUT_TOKENS,
            "candidatesTokenCount": OUTPUT_TOKENS,
            "totalTokenCount": INPUT_TOKENS + OUTPUT_TOKENS,
        },
    })
}

/// The streamed answer: one SSE event with the whole response.
pub(crate) fn sse(shared: &Shared, model: &str, answer: &Answer) -> String {
    let mut out = String::new();
    sse_event(&mut out, None, &response(shared, model, answer));
    out
}

/// A Google-style error body.
pub(crate) fn error(status: u16, message: &str) -> Value {
    let name = match status {
        400 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        429 => "RESOURCE_EXHAUSTED",
        503 => "UNAVAILABLE",
        _ => "INTERNAL",
    };
    json!({"error": {"code": status, "message": message, "status": name}})
}
