//! Flags of `kascade cpid-webhook`.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;

use crate::app::CpidWebhookConfig;

fn defaults() -> CpidWebhookConfig {
    CpidWebhookConfig::default()
}

#[derive(Args, Debug)]
pub struct CpidWebhookArgs {
    /// Address of the webhook (`POST /mutate`, `/healthz`, `/metrics`).
    #[arg(long, default_value_t = defaults().listen, env = "KASCADE_CPID_WEBHOOK_LISTEN")]
    pub listen: SocketAddr,
    /// PEM certificate chain (the apiserver calls webhooks over HTTPS only).
    #[arg(long, env = "KASCADE_TLS_CERT_FILE")]
    pub tls_cert_file: PathBuf,
    /// Its private key.
    #[arg(long, env = "KASCADE_TLS_KEY_FILE")]
    pub tls_key_file: PathBuf,
    /// Users whose writes are never stamped: regexes matched against the whole user name (repeat the flag or separate with commas).
    #[arg(long, value_delimiter = ',', default_values_t = defaults().skip_users, env = "KASCADE_SKIP_USERS")]
    pub skip_users: Vec<String>,
    /// Groups whose members' writes are never stamped.
    #[arg(long, value_delimiter = ',', default_values_t = defaults().skip_groups, env = "KASCADE_SKIP_GROUPS")]
    pub skip_groups: Vec<String>,
    /// Largest AdmissionReview body accepted.
    #[arg(long, default_value_t = defaults().max_body_bytes, env = "KASCADE_MAX_BODY_BYTES")]
    pub max_body_bytes: usize,
}

impl From<CpidWebhookArgs> for CpidWebhookConfig {
    fn from(a: CpidWebhookArgs) -> Self {
        CpidWebhookConfig {
            listen: a.listen,
            tls_cert_file: Some(a.tls_cert_file),
            tls_key_file: Some(a.tls_key_file),
            skip_users: a.skip_users,
            skip_groups: a.skip_groups,
            max_body_bytes: a.max_body_bytes,
            ..CpidWebhookConfig::default()
        }
    }
}
