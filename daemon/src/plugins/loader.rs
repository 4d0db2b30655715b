//! Keep-last-good: turns one plugin file, of whatever kind, into a running [`Plugin`] for the
//! new set, reusing the previous set's plugin when nothing it is built from changed, and
//! keeping the previous one running (with the error beside it) when the new version fails.
//!
//! Written once for every kind, so that Lua and native plugins cannot drift apart on what a
//! reload keeps; a kind says only how to name, fingerprint and start its files
//! ([`PluginFile`]).

use std::sync::{Arc, Mutex};

use dstream_sdk::protocol::PluginLoadError;

use super::contract::{Limits, PluginError, Shared, Started};
use super::handle::Plugin;

/// One plugin file of some kind, found for the new set.
pub(super) trait PluginFile {
    /// `lua` or `native`, as `plugins` shows it.
    const KIND: &'static str;
    /// The file name (`claude-code.lua`): what a previous version is found by.
    fn file(&self) -> &str;
    /// The name `disabled` lists it by (`claude-code`).
    fn stem(&self) -> &str;
    /// `builtin`, or the path it comes from: what the plugin and its errors are shown as.
    fn origin(&self) -> String;
    /// Changes whenever anything the plugin is built from changes (its code, its config,
    /// the limits); or why the file cannot be read.
    fn fingerprint(&self) -> Result<u64, String>;
    /// Starts the plugin on its own thread: what it declares and the queue of its calls.
    fn start(self, shared: Arc<Shared>) -> Result<Started, PluginError>;
}

/// A set being built: its plugins so far, and the errors to show beside them.
pub(super) struct Loading<'a> {
    pub plugins: Vec<Arc<Plugin>>,
    pub errors: Vec<PluginLoadError>,
    /// The plugins of the set being replaced.
    previous: &'a [Arc<Plugin>],
    disabled: &'a [String],
    limits: Limits,
    max_consecutive_errors: u32,
}

impl<'a> Loading<'a> {
    pub fn new(
        previous: &'a [Arc<Plugin>],
        disabled: &'a [String],
        limits: Limits,
        max_consecutive_errors: u32,
    ) -> Loading<'a> {
        Loading {
            plugins: Vec::new(),
            errors: Vec::new(),
            previous,
            disabled,
            limits,
            max_consecutive_errors,
        }
    }

    /// Adds `file` to the set, unless it is disabled: its previous plugin when unchanged and
    /// healthy, else a fresh start; when that fails, the error, and the previous plugin (if
    /// any) keeps running. A file that cannot be read is an error, and leaves the set.
    pub fn add<F: PluginFile>(&mut self, file: F) {
        if self.disabled.iter().any(|d| d == file.stem()) {
            return;
        }
        let fingerprint = match file.fingerprint() {
            Ok(f) => f,
            Err(error) => {
                self.errors.push(PluginLoadError {
                    file: file.origin(),
                    error,
                });
                return;
            }
        };
        let name = file.file().to_string();
        let previous = self.previous.iter().find(|p| p.file == name).cloned();
        if let Some(old) = &previous
            && old.fingerprint == fingerprint
            && old.disabled().is_none()
            && old.shared.max_consecutive_errors == self.max_consecutive_errors.max(1)
        {
            *old.newer_failed.lock().unwrap() = None;
            self.plugins.push(old.clone());
            return;
        }
        let origin = file.origin();
        let shared = Shared::new(self.max_consecutive_errors);
        match file.start(shared.clone()) {
            Ok(Started { meta, tx, inline }) => {
                *shared.name.lock().unwrap() = meta.name.clone();
                self.plugins.push(Arc::new(Plugin {
                    meta,
                    kind: F::KIND,
                    file: name,
                    origin,
                    fingerprint,
                    tx,
                    inline,
                    limits: self.limits,
                    shared,
                    newer_failed: Mutex::new(None),
                }));
            }
            Err(e) => {
                tracing::error!(file = %origin, kind = F::KIND, error = %e, "plugin failed to load");
                self.errors.push(PluginLoadError {
                    file: origin,
                    error: e.to_string(),
                });
                if let Some(old) = previous {
                    *old.newer_failed.lock().unwrap() = Some(e.to_string());
                    self.plugins.push(old);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::contract::{Hooks, PluginMeta};
    use std::sync::mpsc;
    use std::time::Duration;

    /// A plugin file that starts, or fails to, as told.
    struct Fake {
        version: Result<u64, String>,
        starts: bool,
    }

    impl PluginFile for Fake {
        const KIND: &'static str = "fake";
        fn file(&self) -> &str {
            "f.lua"
        }
        fn stem(&self) -> &str {
            "f"
        }
        fn origin(&self) -> String {
            "/plugins/f.lua".into()
        }
        fn fingerprint(&self) -> Result<u64, String> {
            self.version.clone()
        }
        fn start(self, _: Arc<Shared>) -> Result<Started, PluginError> {
            if !self.starts {
                return Err(PluginError::Load("syntax error".into()));
            }
            let meta = PluginMeta {
                name: "f".into(),
                sources: vec![],
                priority: 100,
                hooks: Hooks::PROCESS,
                process_if_contains: None,
            };
            Ok(Started::queued((meta, mpsc::sync_channel(1).0)))
        }
    }

    fn limits() -> Limits {
        Limits {
            call_timeout: Duration::from_millis(100),
            instructions: 1000,
            memory_bytes: 1 << 20,
            output_bytes: 1 << 20,
        }
    }

    /// Loads one version of `f.lua` over `previous`: the new set's plugins and errors.
    fn reload(
        previous: &[Arc<Plugin>],
        version: Result<u64, String>,
        starts: bool,
    ) -> (Vec<Arc<Plugin>>, Vec<PluginLoadError>) {
        let mut loading = Loading::new(previous, &[], limits(), 3);
        loading.add(Fake { version, starts });
        (loading.plugins, loading.errors)
    }

    #[test]
    fn a_failed_reload_keeps_the_last_good_version() {
        // No previous version: the error, and nothing runs.
        let (none, errors) = reload(&[], Ok(1), false);
        assert!(none.is_empty());
        assert_eq!(errors[0].file, "/plugins/f.lua");
        assert_eq!(errors[0].error, "cannot load: syntax error");

        let (v1, errors) = reload(&[], Ok(1), true);
        assert!(errors.is_empty());
        assert_eq!(
            (v1[0].kind, v1[0].origin.as_str()),
            ("fake", "/plugins/f.lua")
        );

        // Unchanged: the same plugin, state and all.
        let (same, _) = reload(&v1, Ok(1), true);
        assert!(Arc::ptr_eq(&same[0], &v1[0]));

        // Changed and broken: the old one keeps running, and says why it was not replaced.
        let (kept, errors) = reload(&v1, Ok(2), false);
        assert!(Arc::ptr_eq(&kept[0], &v1[0]));
        assert_eq!(errors.len(), 1);
        let shown = kept[0].info().error.unwrap();
        assert!(
            shown.contains("a newer version failed to load: cannot load: syntax error"),
            "{shown}"
        );

        // Back to the good text: kept, and the old error is gone.
        let (back, errors) = reload(&kept, Ok(1), true);
        assert!(Arc::ptr_eq(&back[0], &v1[0]) && errors.is_empty());
        assert_eq!(back[0].info().error, None);

        // Changed and good: a new plugin.
        let (v2, _) = reload(&back, Ok(2), true);
        assert!(!Arc::ptr_eq(&v2[0], &v1[0]));

        // A disabled plugin is started afresh even when unchanged.
        v2[0]
            .shared
            .record(Some(&PluginError::Call("x".into())), 0, true);
        let (fresh, _) = reload(&v2, Ok(2), true);
        assert!(!Arc::ptr_eq(&fresh[0], &v2[0]) && fresh[0].disabled().is_none());

        // Unreadable: an error, and the file leaves the set (nothing is kept).
        let (gone, errors) = reload(&fresh, Err("cannot read: gone".into()), true);
        assert!(gone.is_empty());
        assert_eq!(errors[0].error, "cannot read: gone");

        // Disabled by name: neither loaded nor reported.
        let disabled = ["f".to_string()];
        let mut loading = Loading::new(&fresh, &disabled, limits(), 3);
        loading.add(Fake {
            version: Ok(2),
            starts: true,
        });
        assert!(loading.plugins.is_empty() && loading.errors.is_empty());
    }
}
