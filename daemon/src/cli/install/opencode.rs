//! Installing into OpenCode: the plugin `scripts/opencode/dstream.js`, built into this
//! binary, copied into OpenCode's plugin folder, and removed only when it is dstream's.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};

use super::files::{self, Found};

/// The OpenCode plugin's source; [`rendered`] is what `dstream install opencode` writes.
const OPENCODE_PLUGIN: &str = include_str!("../../../../scripts/opencode/dstream.js");
/// A line in the plugin that marks a file as dstream's to replace or remove.
const OPENCODE_MARKER: &str = "@dstream-opencode-plugin";
/// The line of the plugin that names the dstream program (for `dstream start`), by this tag;
/// its `"dstream"` is replaced with the installing program's own path.
const BIN_TAG: &str = "// @dstream-bin";
const BIN_DEFAULT: &str = "|| \"dstream\";";
/// File name of the plugin in OpenCode's plugin folder.
const OPENCODE_FILE: &str = "dstream.js";

/// OpenCode's plugin folder: `DIR/.opencode/plugins` for a project, else the user's
/// `$XDG_CONFIG_HOME/opencode/plugins` (`~/.config/…` without it).
pub fn plugin_dir(project: Option<&Path>) -> PathBuf {
    match project {
        Some(dir) => dir.join(".opencode").join("plugins"),
        None => {
            // XDG: a relative XDG_CONFIG_HOME is to be ignored.
            let config = std::env::var_os("XDG_CONFIG_HOME")
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
                .unwrap_or_else(|| dstream_sdk::socket::home_dir().join(".config"));
            config.join("opencode").join("plugins")
        }
    }
}

/// The plugin as installed by the program at `exe`: `exe` written into its DSTREAM_BIN line, so
/// that it can start a daemon even when `dstream` is not on OpenCode's PATH. A path that is not
/// UTF-8 cannot be written as JS text: then the plugin looks `dstream` up on the PATH.
fn render(exe: Option<&Path>) -> String {
    let Some(quoted) = exe
        .and_then(|p| p.to_str())
        .and_then(|p| serde_json::to_string(p).ok())
    else {
        return OPENCODE_PLUGIN.to_string();
    };
    let mut out = String::with_capacity(OPENCODE_PLUGIN.len() + quoted.len());
    for line in OPENCODE_PLUGIN.split_inclusive('\n') {
        if line.contains(BIN_TAG) && line.contains(BIN_DEFAULT) {
            out.push_str(&line.replacen(BIN_DEFAULT, &format!("|| {quoted};"), 1));
        } else {
            out.push_str(line);
        }
    }
    out
}

/// The plugin as this program installs it.
fn rendered() -> String {
    render(std::env::current_exe().ok().as_deref())
}

fn is_our_plugin(content: &[u8], rendered: &str) -> bool {
    content == rendered.as_bytes()
        || content == OPENCODE_PLUGIN.as_bytes()
        || String::from_utf8_lossy(&content[..content.len().min(4096)]).contains(OPENCODE_MARKER)
}

/// What is at the plugin's place in `dir`.
pub enum Installed {
    Missing,
    /// This dstream's plugin, byte for byte (naming this binary).
    Current(PathBuf),
    /// dstream's plugin from another version.
    Other(PathBuf),
    /// A file of that name that is not dstream's (or that cannot be read).
    Foreign(PathBuf, String),
}

/// Whether dstream's plugin is in `dir`, and whether it is this version's.
pub fn installed(dir: &Path) -> Installed {
    let path = dir.join(OPENCODE_FILE);
    match files::read(&path, files::MAX_BYTES) {
        Ok(Found::Missing) => Installed::Missing,
        Ok(Found::DanglingLink(target)) => Installed::Foreign(
            path,
            format!("a link to {}, which does not exist", target.display()),
        ),
        Ok(Found::File(file)) if file.content == rendered().as_bytes() => Installed::Current(path),
        Ok(Found::File(file)) if is_our_plugin(&file.content, &rendered()) => {
            Installed::Other(path)
        }
        Ok(Found::File(_)) => Installed::Foreign(path, "not dstream's plugin".into()),
        Err(e) => Installed::Foreign(path, format!("{e:#}")),
    }
}

/// Writes the plugin into `dir`, or replaces an older dstream plugin there.
pub fn install(dir: &Path) -> anyhow::Result<()> {
    let path = dir.join(OPENCODE_FILE);
    let plugin = rendered();
    match files::read(&path, files::MAX_BYTES)? {
        Found::Missing => {
            fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            files::create(&path, plugin.as_bytes())?;
            println!(
                "installed {}; OpenCode loads it when it next starts",
                path.display()
            );
        }
        Found::DanglingLink(target) => return Err(files::dangling_link(&path, &target)),
        Found::File(file) if file.content == plugin.as_bytes() => {
            println!(
                "the dstream plugin is already in {}; nothing changed",
                file.shown()
            );
        }
        Found::File(file) if is_our_plugin(&file.content, &plugin) => {
            file.replace(plugin.as_bytes())?;
            println!(
                "replaced an older dstream plugin at {}; OpenCode loads it when it next starts",
                file.shown()
            );
        }
        Found::File(file) => bail!(
            "{} exists and is not dstream's plugin; it was left untouched (move it away and \
             run this again)",
            file.shown()
        ),
    }
    Ok(())
}

/// Removes dstream's plugin from `dir`.
pub fn uninstall(dir: &Path) -> anyhow::Result<()> {
    let path = dir.join(OPENCODE_FILE);
    let shown = path.display();
    match files::read(&path, files::MAX_BYTES)? {
        Found::Missing => println!("{shown} does not exist; nothing to remove"),
        Found::DanglingLink(target) => println!(
            "{shown} is a link to {}, which does not exist; nothing to remove (the link was \
             left as it is)",
            target.display()
        ),
        Found::File(file) if is_our_plugin(&file.content, &rendered()) => {
            file.remove()?;
            if file.is_link() {
                println!(
                    "removed the link {shown} (the file it led to, {}, was left in place)",
                    file.real.display()
                );
            } else {
                println!("removed {shown}");
            }
        }
        Found::File(file) => bail!(
            "{} is not dstream's plugin; it was left untouched",
            file.shown()
        ),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plugin_carries_its_marker() {
        let r = rendered();
        assert!(is_our_plugin(OPENCODE_PLUGIN.as_bytes(), &r));
        assert!(is_our_plugin(r.as_bytes(), &r));
        assert!(!is_our_plugin(b"export const Other = async () => ({})", &r));
    }

    #[test]
    fn the_installing_program_is_written_into_its_line_only() {
        let exe = Path::new("/opt/d \"s\"/bin/dstream");
        let r = render(Some(exe));
        assert_ne!(r, OPENCODE_PLUGIN);
        let changed: Vec<&str> = r
            .lines()
            .zip(OPENCODE_PLUGIN.lines())
            .filter(|(a, b)| a != b)
            .map(|(a, _)| a)
            .collect();
        assert_eq!(
            changed,
            [
                r#"const DSTREAM_BIN = process.env.DSTREAM_BIN || "/opt/d \"s\"/bin/dstream"; // @dstream-bin"#
            ]
        );
        assert!(is_our_plugin(r.as_bytes(), &rendered()));
        assert_eq!(render(None), OPENCODE_PLUGIN);
    }
}
