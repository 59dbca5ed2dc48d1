//! The Model Context Protocol as ralph's servers speak it on stdio: JSON-RPC 2.0, one message a
//! line. Shared by `ralph --mcp` (for agents that steer ralph) and `ralph __agent-tools` (for the
//! agents ralph runs).

use serde_json::{Value, json};

/// The protocol revisions this server speaks, newest first; a client asking another gets the
/// newest.
pub(crate) const VERSIONS: [&str; 5] = [
    "2026-07-28",
    "2025-11-25",
    "2025-06-18",
    "2025-03-26",
    "2024-11-05",
];

/// What to do with one line a client sent.
#[derive(Debug)]
pub(crate) enum Incoming {
    /// Send this back (an answer the protocol decides alone, or an error).
    Reply(Value),
    /// Nothing to send (a notification, or a response).
    Quiet,
    /// Call this tool (one of those declared); its result goes back under `id`.
    Call {
        id: Value,
        name: String,
        arguments: Value,
    },
}

/// Reads one line from a client of a server whose tools are `tools` and whose purpose is
/// `instructions`.
pub(crate) fn incoming(line: &str, (tools, instructions): (&[Value], &str)) -> Incoming {
    let Ok(message) = serde_json::from_str::<Value>(line) else {
        return Incoming::Reply(error(
            &Value::Null,
            -32700,
            "parse error: a message is one JSON object a line",
        ));
    };
    if !message.is_object() {
        return Incoming::Reply(error(
            &Value::Null,
            -32600,
            "invalid request: a message is one JSON object (batches are not taken)",
        ));
    }
    // A response (to nothing this server asked) needs no answer.
    if message.get("method").is_none()
        && (message.get("result").is_some() || message.get("error").is_some())
    {
        return Incoming::Quiet;
    }
    let id = message.get("id").cloned();
    let method = message
        .get("method")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let Some(id) = id else {
        // Notifications (`notifications/initialized`, cancellations) need no answer.
        return Incoming::Quiet;
    };
    let params = message.get("params").cloned().unwrap_or(Value::Null);
    Incoming::Reply(match method {
        "initialize" => result(&id, initialize(&params, instructions)),
        "ping" => result(&id, json!({})),
        "tools/list" => result(&id, json!({"tools": tools})),
        "tools/call" => {
            let name = params
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let arguments = params
                .get("arguments")
                .cloned()
                .unwrap_or_else(|| json!({}));
            // A tool that does not exist is the request's error, not the tool's.
            if !tools.iter().any(|tool| tool["name"] == name) {
                return Incoming::Reply(error(
                    &id,
                    -32602,
                    &format!("unknown tool: {name}; tools/list names them"),
                ));
            }
            return Incoming::Call {
                name: name.to_owned(),
                arguments,
                id,
            };
        }
        "" => error(&id, -32600, "invalid request: no method"),
        other => error(&id, -32601, &format!("method not found: {other}")),
    })
}

pub(crate) fn error(id: &Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

pub(crate) fn result(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

/// A tool's answer: its text, and whether it is an error.
pub(crate) fn tool_text(text: &str, is_error: bool) -> Value {
    json!({"content": [{"type": "text", "text": text}], "isError": is_error})
}

pub(crate) fn tool_json(value: &Value) -> Value {
    let text = serde_json::to_string_pretty(value).unwrap_or_default();
    json!({"content": [{"type": "text", "text": text}], "structuredContent": value, "isError": false})
}

/// Whether `arguments` fit the input schema of tool `name` (of `tools`): why not, in one line.
pub(crate) fn check_arguments(
    tools: &[Value],
    name: &str,
    arguments: &Value,
) -> Result<(), String> {
    let Some(schema) = (tools.iter())
        .find(|tool| tool["name"] == name)
        .map(|tool| &tool["inputSchema"])
    else {
        return Ok(());
    };
    let Some(given) = arguments.as_object() else {
        return Err(format!("{name} takes its arguments as one JSON object"));
    };
    let properties = schema["properties"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    for required in schema["required"].as_array().into_iter().flatten() {
        let key = required.as_str().unwrap_or_default();
        if !given.contains_key(key) {
            return Err(format!(
                "{name} needs \"{key}\": {}",
                describe(&properties[key])
            ));
        }
    }
    for (key, value) in given {
        let Some(property) = properties.get(key) else {
            let known: Vec<&str> = properties.keys().map(String::as_str).collect();
            return Err(format!(
                "{name} has no argument \"{key}\" (its arguments: {})",
                if known.is_empty() {
                    "none".to_owned()
                } else {
                    known.join(", ")
                }
            ));
        };
        let fits = match property["type"].as_str() {
            Some("string") => value.is_string(),
            Some("array") => value.as_array().is_some_and(|items| {
                (property["items"]["type"] != "string") || items.iter().all(Value::is_string)
            }),
            Some("integer") => value.is_u64() || value.is_i64(),
            Some("boolean") => value.is_boolean(),
            _ => true,
        };
        if !fits {
            return Err(format!(
                "{name}: \"{key}\" must be {}: {}, not {value}",
                type_name(property),
                describe(property)
            ));
        }
    }
    Ok(())
}

/// "a string", "a list of strings", … for a property's schema.
fn type_name(property: &Value) -> &'static str {
    match property["type"].as_str() {
        Some("string") => "a string",
        Some("array") => "a list of strings",
        Some("integer") => "a whole number",
        Some("boolean") => "true or false",
        _ => "a value",
    }
}

/// A property's description, lower-cased at its start, for a message.
fn describe(property: &Value) -> String {
    let text = property["description"].as_str().unwrap_or("see tools/list");
    let mut chars = text.chars();
    chars.next().map_or_else(String::new, |first| {
        first.to_lowercase().chain(chars).collect()
    })
}

/// The answer to `initialize`: the client's revision when this server speaks it, and what the
/// server is for (`instructions`).
fn initialize(params: &Value, instructions: &str) -> Value {
    let asked = params
        .get("protocolVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let version = VERSIONS
        .iter()
        .find(|known| **known == asked)
        .unwrap_or(&VERSIONS[0]);
    json!({
        "protocolVersion": version,
        "capabilities": {"tools": {"listChanged": false}},
        "serverInfo": {"name": "ralph", "version": env!("CARGO_PKG_VERSION")},
        "instructions": instructions
    })
}

/// A tool's declaration for `tools/list`.
pub(crate) fn tool(name: &str, description: &str, properties: Value, required: &[&str]) -> Value {
    json!({
        "name": name,
        "description": description,
        "inputSchema": {"type": "object", "properties": properties, "required": required, "additionalProperties": false}
    })
}
