//! The kinds of plugin file, and finding them: the built-in and folder `*.lua` scripts, and the
//! folder's native libraries. Each kind says how its files are named, fingerprinted and
//! started ([`PluginFile`]); what a reload keeps is the loader's job, the same for all.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use dstream_sdk::protocol::PluginLoadError;
use serde_json::Value as Json;

use super::builtin;
use super::contract::{Limits, PluginError, PluginSettings, Shared, Started};
use super::loader::PluginFile;
use super::{isolated, lua, native};

/// Largest plugin file read.
const MAX_PLUGIN_FILE: u64 = 1 << 20;

/// A Lua script: a built-in, or a folder file (which replaces the built-in of its name).
pub(super) struct LuaFile {
    pub file: String,
    /// `builtin`, or the path.
    pub origin: String,
    pub text: String,
    /// `[plugins.<stem>]`, or null.
    pub config: Json,
    pub limits: Limits,
}

impl LuaFile {
    pub fn new(file: String, origin: String, text: String, settings: &PluginSettings) -> LuaFile {
        let config = settings
            .config
            .get(lua_stem(&file))
            .cloned()
            .unwrap_or(Json::Null);
        LuaFile {
            file,
            origin,
            text,
            config,
            limits: settings.limits,
        }
    }
}

fn lua_stem(file: &str) -> &str {
    file.trim_end_matches(".lua")
}

impl PluginFile for LuaFile {
    const KIND: &'static str = "lua";

    fn file(&self) -> &str {
        &self.file
    }

    fn stem(&self) -> &str {
        lua_stem(&self.file)
    }

    fn origin(&self) -> String {
        self.origin.clone()
    }

    fn fingerprint(&self) -> Result<u64, String> {
        Ok(fingerprint(&self.text, &self.config, &self.limits))
    }

    fn start(self, shared: Arc<Shared>) -> Result<Started, PluginError> {
        let config = match self.config {
            Json::Null => Json::Object(Default::default()),
            other => other,
        };
        lua::spawn(&self.file, self.text, config, self.limits, shared)
    }
}

/// A native library in the plugin folder, loaded from a fresh copy when it changed.
pub(super) struct NativeFile {
    pub file: String,
    pub path: PathBuf,
    /// `[plugins.native.<stem>]`, or an empty table.
    pub config: Json,
    pub cache_dir: PathBuf,
    pub limits: Limits,
}

impl NativeFile {
    pub fn new(file: String, path: PathBuf, settings: &PluginSettings) -> NativeFile {
        NativeFile {
            config: native_config(settings, native::stem(&file)),
            file,
            path,
            cache_dir: settings.cache_dir.clone(),
            limits: settings.limits,
        }
    }
}

/// `[plugins.native.<stem>]`, or an empty table.
pub(super) fn native_config(settings: &PluginSettings, stem: &str) -> Json {
    settings
        .native_config
        .get(stem)
        .cloned()
        .unwrap_or_else(|| Json::Object(Default::default()))
}

impl PluginFile for NativeFile {
    const KIND: &'static str = "native";

    fn file(&self) -> &str {
        &self.file
    }

    fn stem(&self) -> &str {
        native::stem(&self.file)
    }

    fn origin(&self) -> String {
        self.path.display().to_string()
    }

    /// The library's bytes, read only now (a disabled library is not read at all).
    fn fingerprint(&self) -> Result<u64, String> {
        let bytes = std::fs::read(&self.path).map_err(|e| format!("cannot read: {e}"))?;
        let mut h = std::collections::hash_map::DefaultHasher::new();
        bytes.hash(&mut h);
        fingerprint(&self.config.to_string(), &self.config, &self.limits).hash(&mut h);
        Ok(h.finish())
    }

    fn start(self, shared: Arc<Shared>) -> Result<Started, PluginError> {
        // `isolation = "process"`: in a child process, where a crash costs one call.
        let spawn = if self.config.get("isolation").and_then(Json::as_str) == Some("process") {
            isolated::spawn
        } else {
            native::spawn
        };
        spawn(
            &self.path,
            &self.cache_dir,
            self.config,
            self.limits,
            shared,
        )
        .map(Started::queued)
    }
}

fn fingerprint(text: &str, config: &Json, limits: &Limits) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    config.to_string().hash(&mut h);
    format!("{limits:?}").hash(&mut h);
    h.finish()
}

/// The built-in scripts, replaced or joined by the folder's `*.lua` files, by file name. A
/// folder file that cannot be read is an error, and takes its built-in out too.
pub(super) fn lua_files(
    settings: &PluginSettings,
    errors: &mut Vec<PluginLoadError>,
) -> Vec<LuaFile> {
    let mut files: BTreeMap<String, (String, String)> = builtin::FILES
        .iter()
        .map(|(name, text)| (name.to_string(), ("builtin".to_string(), text.to_string())))
        .collect();
    match read_dir_matching(&settings.dir, |name| name.ends_with(".lua")) {
        Ok(found) => {
            for (name, path) in found {
                match read_plugin_file(&path) {
                    Ok(text) => {
                        files.insert(name, (path.display().to_string(), text));
                    }
                    Err(error) => {
                        files.remove(&name);
                        errors.push(PluginLoadError {
                            file: path.display().to_string(),
                            error,
                        });
                    }
                }
            }
        }
        Err(e) => errors.push(PluginLoadError {
            file: settings.dir.display().to_string(),
            error: e,
        }),
    }
    files
        .into_iter()
        .map(|(file, (origin, text))| LuaFile::new(file, origin, text, settings))
        .collect()
}

/// The folder's native libraries, by file name (a folder that cannot be read is reported
/// with the Lua files).
pub(super) fn native_files(settings: &PluginSettings) -> Vec<NativeFile> {
    read_dir_matching(&settings.dir, native::is_native_file)
        .unwrap_or_default()
        .into_iter()
        .map(|(file, path)| NativeFile::new(file, path, settings))
        .collect()
}

/// The plugin folder's files whose names `wanted` accepts (a missing folder has none).
fn read_dir_matching(
    dir: &Path,
    wanted: impl Fn(&str) -> bool,
) -> Result<Vec<(String, PathBuf)>, String> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("cannot read the plugin folder: {e}")),
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        // Editors' temporary and backup files are not plugins.
        if !wanted(&name) || name.starts_with('.') || name.starts_with('#') {
            continue;
        }
        found.push((name, entry.path()));
    }
    found.sort();
    Ok(found)
}

/// A Lua plugin file's text, refused past [`MAX_PLUGIN_FILE`].
pub(super) fn read_plugin_file(path: &Path) -> Result<String, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("cannot read: {e}"))?;
    if meta.len() > MAX_PLUGIN_FILE {
        return Err(format!(
            "{} bytes; a plugin file may have at most {MAX_PLUGIN_FILE}",
            meta.len()
        ));
    }
    std::fs::read_to_string(path).map_err(|e| format!("cannot read: {e}"))
}
