//! `--sandbox-mount PATH[:ro|rw]`.

use std::path::PathBuf;

/// How a path is mounted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mode {
    Ro,
    Rw,
}

/// Every `--sandbox-mount`, checked: the path must exist.
pub(super) fn parse_all(items: &[String]) -> Result<Vec<(PathBuf, Mode)>, String> {
    items.iter().map(|item| parse(item)).collect()
}

fn parse(item: &str) -> Result<(PathBuf, Mode), String> {
    let (path, mode) = match item.rsplit_once(':') {
        Some((path, "ro")) => (path, Mode::Ro),
        Some((path, "rw")) => (path, Mode::Rw),
        _ => (item, Mode::Ro),
    };
    let expanded = match path.strip_prefix("~/") {
        Some(rest) => std::env::var_os("HOME").map_or_else(
            || PathBuf::from(path),
            |home| PathBuf::from(home).join(rest),
        ),
        None => PathBuf::from(path),
    };
    if path.is_empty() {
        return Err(format!(
            "--sandbox-mount '{item}' names no path; give PATH, PATH:ro or PATH:rw"
        ));
    }
    let absolute =
        std::path::absolute(&expanded).map_err(|err| format!("--sandbox-mount {path}: {err}"))?;
    if !absolute.exists() {
        return Err(format!(
            "--sandbox-mount: {} does not exist; create it or leave the mount out",
            absolute.display()
        ));
    }
    Ok((absolute, mode))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mount_is_read_only_unless_it_says_rw_and_must_exist() {
        let tmp = crate::testing::tempdir().unwrap();
        let dir = tmp.path().to_string_lossy().into_owned();
        assert_eq!(parse(&dir).unwrap(), (tmp.path().to_owned(), Mode::Ro));
        assert_eq!(parse(&format!("{dir}:rw")).unwrap().1, Mode::Rw);
        assert_eq!(parse(&format!("{dir}:ro")).unwrap().1, Mode::Ro);
        let missing = format!("{dir}/none");
        let err = parse(&missing).unwrap_err();
        assert_eq!(
            err,
            format!("--sandbox-mount: {missing} does not exist; create it or leave the mount out")
        );
        assert!(parse(":rw").is_err());
    }
}
