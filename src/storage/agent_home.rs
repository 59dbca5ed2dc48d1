//! A home of its own for an agent that reads MCP servers only from a file in its config folder
//! (Gemini CLI's `~/.gemini/settings.json`, Droid's `~/.factory/mcp.json`) and can be pointed at
//! another home by a variable: `.ralph/agent-homes/<agent>/<folder>/` holds a symbolic link to
//! each entry of the user's config folder (credentials, sessions and caches stay the user's) and
//! a copy of that one file with ralph's server added. The user's own file is never written; what
//! the agent saves over a link reaches the user's folder as it would without ralph.

use std::fs;
use std::io;
use std::path::Path;

use serde_json::Value;

/// The folder under `.ralph/` (never committed).
pub(crate) const AGENT_HOMES_DIR: &str = "agent-homes";

/// The home ralph gives agent `id` under the run's `dir`: `.ralph/agent-homes/<id>`.
pub(crate) fn home_for(dir: &super::RalphDir, id: &str) -> std::path::PathBuf {
    let home = dir.file(AGENT_HOMES_DIR).join(id);
    std::path::absolute(&home).unwrap_or(home)
}

/// Makes `mirror` link to every entry of `real` but `except` (which the caller writes): links
/// that are missing or point elsewhere are made again. A file the agent saved over its link (by
/// renaming a new one onto it, as a refreshed login is saved) is what the agent would have
/// written to the user's folder without ralph: unless the user's is newer, it is copied there
/// before the link is made again. A folder the agent made before the user's folder had one of
/// that name stays the agent's (nothing in it is thrown away).
pub(crate) fn mirror(real: &Path, mirror: &Path, except: &str) -> io::Result<()> {
    fs::create_dir_all(mirror)?;
    let entries = match fs::read_dir(real) {
        Ok(entries) => entries,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(err) => return Err(err),
    };
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        if name == except {
            continue;
        }
        let (target, link) = (entry.path(), mirror.join(&name));
        if fs::read_link(&link).is_ok_and(|points| points == target) {
            continue;
        }
        match fs::symlink_metadata(&link) {
            Ok(meta) if meta.is_dir() => continue,
            Ok(meta) if meta.is_file() => {
                let users = fs::metadata(&target).ok();
                let theirs_newer = users.as_ref().is_some_and(
                    |users| matches!((users.modified(), meta.modified()), (Ok(a), Ok(b)) if a > b),
                );
                if users.is_some_and(|users| users.is_file()) && !theirs_newer {
                    fs::copy(&link, &target)?;
                }
                fs::remove_file(&link)?;
            }
            Ok(_) => fs::remove_file(&link)?,
            Err(_) => {}
        }
        std::os::unix::fs::symlink(&target, &link)?;
    }
    Ok(())
}

/// The JSON object in `path` (comments and trailing commas allowed, as the agents allow them):
/// `None` when there is no file, an error naming the file when it is not a JSON object.
pub(crate) fn read_own(path: &Path) -> anyhow::Result<Option<Value>> {
    let text = match fs::read_to_string(path) {
        Ok(text) => text,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(err) => anyhow::bail!("cannot read {}: {err}", path.display()),
    };
    if text.trim().is_empty() {
        return Ok(None);
    }
    match serde_json::from_str::<Value>(&crate::agents::plain_json(&text)) {
        Ok(value) if value.is_object() => Ok(Some(value)),
        Ok(_) => anyhow::bail!("{} is not a JSON object", path.display()),
        Err(err) => anyhow::bail!("{} is not JSON ralph can read: {err}", path.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mirror_links_the_users_entries_and_mends_what_the_agent_wrote_over() {
        let tmp = crate::testing::tempdir().unwrap();
        let (real, copy) = (tmp.path().join("real"), tmp.path().join("copy"));
        fs::create_dir_all(real.join("sessions")).unwrap();
        fs::write(real.join("auth.json"), "{}").unwrap();
        fs::write(real.join("mcp.json"), "{}").unwrap();
        mirror(&real, &copy, "mcp.json").unwrap();
        assert_eq!(
            fs::read_link(copy.join("auth.json")).unwrap(),
            real.join("auth.json")
        );
        assert_eq!(
            fs::read_link(copy.join("sessions")).unwrap(),
            real.join("sessions")
        );
        assert!(!copy.join("mcp.json").exists());
        // The agent saved a file over its link, and made a file and a folder the user's folder
        // lacks; then the user's folder got a folder of that name.
        fs::remove_file(copy.join("auth.json")).unwrap();
        fs::write(copy.join("auth.json"), "{\"new\": 1}").unwrap();
        fs::write(copy.join("installation_id"), "1").unwrap();
        fs::create_dir_all(copy.join("tmp")).unwrap();
        fs::write(copy.join("tmp/chat"), "kept").unwrap();
        fs::create_dir_all(real.join("tmp")).unwrap();
        mirror(&real, &copy, "mcp.json").unwrap();
        let link = fs::read_link(copy.join("auth.json")).unwrap();
        assert_eq!(link, real.join("auth.json"));
        let saved = fs::read_to_string(real.join("auth.json")).unwrap();
        assert_eq!(saved, "{\"new\": 1}");
        assert!(copy.join("installation_id").is_file());
        assert_eq!(fs::read_to_string(copy.join("tmp/chat")).unwrap(), "kept");
    }

    #[test]
    fn the_users_file_is_read_with_comments_and_refused_when_not_an_object() {
        let tmp = crate::testing::tempdir().unwrap();
        let path = tmp.path().join("settings.json");
        assert!(read_own(&path).unwrap().is_none());
        fs::write(&path, "{\"a\": 1, // one\n}").unwrap();
        assert_eq!(read_own(&path).unwrap(), Some(serde_json::json!({"a": 1})));
        fs::write(&path, "[1]").unwrap();
        let err = read_own(&path).unwrap_err().to_string();
        assert!(err.contains("settings.json is not a JSON object"), "{err}");
    }
}
