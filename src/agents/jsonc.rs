//! JSON as the agents' configuration files allow it (JSONC): comments and trailing commas.

/// `text` without `//` and `/* */` comments and without commas before a closing bracket, strings
/// left as they are.
pub(crate) fn plain_json(text: &str) -> String {
    let mut bare = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                bare.push(c);
                copy_string(&mut chars, &mut bare);
            }
            '/' if chars.peek() == Some(&'/') => {
                while chars.next_if(|&next| next != '\n').is_some() {}
            }
            '/' if chars.peek() == Some(&'*') => {
                chars.next();
                let mut last = ' ';
                for inner in chars.by_ref() {
                    if last == '*' && inner == '/' {
                        break;
                    }
                    last = inner;
                }
            }
            _ => bare.push(c),
        }
    }
    let mut out = String::with_capacity(bare.len());
    let mut chars = bare.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                out.push(c);
                copy_string(&mut chars, &mut out);
            }
            ',' => {
                let next = chars.clone().find(|next| !next.is_whitespace());
                if !matches!(next, Some('}' | ']')) {
                    out.push(c);
                }
            }
            _ => out.push(c),
        }
    }
    out
}

/// Copies the rest of a JSON string (its opening quote already copied) through its closing quote.
fn copy_string(chars: &mut std::iter::Peekable<std::str::Chars<'_>>, out: &mut String) {
    while let Some(inner) = chars.next() {
        out.push(inner);
        match inner {
            '\\' => out.extend(chars.next()),
            '"' => break,
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_and_trailing_commas_go_and_strings_stay() {
        let text = "{\n  // the key\n  \"a\": \"x // y /* z */\", /* b */ \"b\": [1, 2,],\n}";
        let value: serde_json::Value = serde_json::from_str(&plain_json(text)).unwrap();
        assert_eq!(
            value,
            serde_json::json!({"a": "x // y /* z */", "b": [1, 2]})
        );
        let escaped = r#"{"a": "quote \" // not a comment"}"#;
        assert_eq!(plain_json(escaped), escaped);
    }
}
