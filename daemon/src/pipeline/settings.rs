//! What the pipeline runs under, read from the configuration: the plugin settings, whether
//! raw events are kept, the checkpoint policy and the redaction settings. A value compared
//! on every configuration change to tell whether anything must be rebuilt (see `reload`).

use std::sync::Arc;

use crate::checkpoint::policy::Policy;
use crate::config::Config;
use crate::plugins::PluginSettings;

#[derive(Debug, Clone, PartialEq)]
pub struct PipelineSettings {
    pub plugins: PluginSettings,
    pub keep_raw: bool,
    /// `[checkpoints]`: the rules the decide step applies.
    pub policy: Arc<Policy>,
    /// `[redact]`.
    pub redact: crate::redact::RedactConfig,
}

impl PipelineSettings {
    pub fn from_config(config: &Config) -> PipelineSettings {
        PipelineSettings {
            plugins: PluginSettings::from_config(config),
            keep_raw: config.plugins.keep_raw,
            policy: Arc::new(Policy::new(&config.checkpoints)),
            redact: config.redact.clone(),
        }
    }
}
