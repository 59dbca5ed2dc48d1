//! The tools a request offers, and the call that writes a file with one of them. Every CLI names
//! its tools and their arguments differently (`Write{file_path}`, `write{filePath}`,
//! `write{path}`, `write_file{file_path}`, `Create{file_path}`, `create{path, file_text}`), so the
//! argument names are read from the tool's JSON schema when the request carries one.

use serde_json::{Map, Value, json};

use super::Answer;

/// A tool as a request offers it: its name and the JSON schema of its arguments.
struct Tool<'a> {
    name: &'a str,
    schema: Option<&'a Value>,
}

/// The tools of a request: Anthropic `tools[].{name, input_schema}`, OpenAI Responses
/// `tools[].{name, parameters}`, Chat Completions `tools[].function.{name, parameters}`, Gemini
/// `tools[].functionDeclarations[].{name, parametersJsonSchema | parameters}`.
fn tools(body: &Value) -> Vec<Tool<'_>> {
    let mut found = Vec::new();
    for tool in body
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let declarations = tool.get("functionDeclarations").and_then(Value::as_array);
        let entries: Vec<&Value> = match declarations {
            Some(declarations) => declarations.iter().collect(),
            None => vec![tool.get("function").unwrap_or(tool)],
        };
        for entry in entries {
            if let Some(name) = entry.get("name").and_then(Value::as_str) {
                let schema = ["input_schema", "parameters", "parametersJsonSchema"]
                    .iter()
                    .find_map(|key| entry.get(*key));
                found.push(Tool { name, schema });
            }
        }
    }
    found
}

/// The names of the tools a request offers.
pub(crate) fn offered(body: &Value) -> Vec<String> {
    tools(body)
        .iter()
        .map(|tool| tool.name.to_owned())
        .collect()
}

/// File-writing tools, best first, with the argument names used when there is no schema.
const FILE_TOOLS: [(&str, &str, &str); 7] = [
    ("Write", "file_path", "content"),
    ("write", "filePath", "content"),
    ("write_file", "file_path", "content"),
    ("Create", "file_path", "content"),
    ("create", "path", "file_text"),
    ("WriteFile", "file_path", "content"),
    // Cline's, with `command: "create"`.
    ("editor", "path", "new_text"),
];

/// Shell tools, best first, with the name of their command argument.
const SHELL_TOOLS: [(&str, &str); 7] = [
    ("Bash", "command"),
    ("bash", "command"),
    ("run_shell_command", "command"),
    ("Execute", "command"),
    ("shell_command", "command"),
    ("exec_command", "cmd"),
    ("shell", "command"),
];

/// Picks the tool that writes `content` to `path` (absolute) from those the request offers.
pub(crate) fn write_file_call(body: &Value, path: &str, content: &str) -> Answer {
    let available = tools(body);
    let find = |name: &str| available.iter().find(|tool| tool.name == name);
    for (name, path_key, content_key) in FILE_TOOLS {
        if let Some(tool) = find(name) {
            let properties = properties(tool.schema);
            let path_key = pick(
                &properties,
                &["file_path", "filePath", "path", "absolute_path"],
            )
            .unwrap_or(path_key);
            let content_key = pick(&properties, &["content", "file_text", "contents", "text"])
                .unwrap_or(content_key);
            let mut arguments = Map::new();
            arguments.insert(path_key.to_owned(), json!(path));
            arguments.insert(content_key.to_owned(), json!(content));
            if name == "editor" {
                arguments.insert("command".to_owned(), json!("create"));
            }
            return call(tool, arguments);
        }
    }
    let command = format!(
        "printf '%s' {} > {}",
        shell_quote(content),
        shell_quote(path)
    );
    for (name, command_key) in SHELL_TOOLS {
        if let Some(tool) = find(name) {
            let mut arguments = Map::new();
            if name == "shell" {
                arguments.insert(command_key.to_owned(), json!(["bash", "-lc", command]));
            } else {
                arguments.insert(command_key.to_owned(), json!(command));
            }
            return call(tool, arguments);
        }
    }
    Answer::Text(format!(
        "mock: no tool to write a file among {:?}",
        offered(body)
    ))
}

/// The call, with a filler for every other argument the schema requires (Droid's `Execute`
/// wants a `summary`, for one).
fn call(tool: &Tool<'_>, mut arguments: Map<String, Value>) -> Answer {
    let required = tool
        .schema
        .and_then(|schema| schema.get("required"))
        .and_then(Value::as_array);
    let properties = properties(tool.schema);
    for key in required.into_iter().flatten().filter_map(Value::as_str) {
        if arguments.contains_key(key) {
            continue;
        }
        let kind = properties
            .iter()
            .find(|(name, _)| *name == key)
            .and_then(|(_, schema)| schema.get("type"))
            .and_then(Value::as_str);
        let filler = match kind {
            Some("boolean") => json!(false),
            Some("number" | "integer") => json!(1),
            Some("array") => json!([]),
            Some("object") => json!({}),
            _ => json!("Write the requested file"),
        };
        arguments.insert(key.to_owned(), filler);
    }
    Answer::Tool {
        name: tool.name.to_owned(),
        arguments: Value::Object(arguments),
    }
}

/// The properties of a JSON schema, as (name, schema) pairs.
fn properties(schema: Option<&Value>) -> Vec<(&str, &Value)> {
    schema
        .and_then(|schema| schema.get("properties"))
        .and_then(Value::as_object)
        .map(|properties| properties.iter().map(|(k, v)| (k.as_str(), v)).collect())
        .unwrap_or_default()
}

/// The first of `candidates` that the schema's properties name.
fn pick<'a>(properties: &[(&str, &Value)], candidates: &[&'a str]) -> Option<&'a str> {
    candidates
        .iter()
        .find(|candidate| properties.iter().any(|(name, _)| name == *candidate))
        .copied()
}

/// Quotes `text` for a POSIX shell.
fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}
