//! Replacing what the pipeline runs under: a reload (the plugin folder or the file changed, or
//! a client asked) or a new configuration rebuilds the plugin set, the policy and the
//! redactor, one rebuild at a time, keeping what did not change.

use std::sync::Arc;

use super::handle::Pipeline;
use super::settings::PipelineSettings;
use crate::config::Config;
use crate::plugins::PluginSet;

impl Pipeline {
    /// Reads the configuration file again (if there is one: a changed one is published to
    /// every component) and rebuilds the plugin set: changed plugins are reloaded, disabled
    /// ones get another chance, a broken file keeps its last good version. Blocking: loading
    /// runs each plugin's top level.
    pub fn reload(&self) -> Arc<PluginSet> {
        let _ = self.feed.reload();
        let _one = self.reloading.lock().unwrap();
        let settings = PipelineSettings::from_config(&self.feed.current());
        self.rebuild(settings)
    }

    /// A new configuration is in force: the plugin set, the policy and the redactor are
    /// rebuilt if what they are made from changed.
    pub fn apply(&self, config: &Config) {
        let _one = self.reloading.lock().unwrap();
        let settings = PipelineSettings::from_config(config);
        if settings != self.settings() {
            self.rebuild(settings);
        }
    }

    /// Builds the plugin set under `settings` and puts it (and them) in force; the caller
    /// holds `reloading`.
    fn rebuild(&self, settings: PipelineSettings) -> Arc<PluginSet> {
        if let Err(e) = std::fs::create_dir_all(&settings.plugins.dir) {
            tracing::warn!(dir = %settings.plugins.dir.display(), error = %e, "cannot create the plugin folder");
        }
        let old = self.plugins();
        let mut set = PluginSet::load(&settings.plugins, Some(&old));
        set.errors.extend(
            self.feed
                .last_error()
                .map(|e| dstream_sdk::protocol::PluginLoadError {
                    file: e.file.display().to_string(),
                    error: e.error,
                }),
        );
        let set = Arc::new(set);
        tracing::info!(
            plugins = %set.plugins.iter().map(|p| p.name()).collect::<Vec<_>>().join(", "),
            errors = set.errors.len(),
            "plugins reloaded"
        );
        if settings.redact != self.settings().redact {
            // Checked when the file was read; a failure here keeps the one in force.
            match crate::redact::Redactor::new(&settings.redact) {
                Ok(r) => self.redact.set(r),
                Err(e) => tracing::error!(error = %e, "redaction settings not reloaded"),
            }
        }
        *self.settings.lock().unwrap() = settings;
        self.plugins.send_replace(set.clone());
        set
    }
}
