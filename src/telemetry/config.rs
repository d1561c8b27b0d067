//! What self-tracing is asked to do, read from the `OTEL_*` environment
//! variables and checked, so a bad value fails at startup naming it.

use super::Role;
use crate::export::config::{OtlpConfig, OtlpFlags, resolve};

/// Self-tracing as asked for by the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelfTraceConfig {
    pub service_name: String,
    /// Where and how: the `OTEL_EXPORTER_OTLP_*` variables.
    pub otlp: OtlpConfig,
}

#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("{var}={value:?}: {problem}")]
    BadVariable {
        var: &'static str,
        value: String,
        problem: String,
    },
    #[error(
        "{source_var} gives self-tracing the service name {name:?}, which is the service of kascade's object spans ({flag}); self-traces need a name of their own"
    )]
    SameServiceAsObjects {
        source_var: &'static str,
        name: String,
        flag: &'static str,
    },
    #[error("self-tracing (OTEL_TRACES_EXPORTER=otlp): {0}")]
    Exporter(String),
}

fn bad(var: &'static str, value: &str, problem: impl Into<String>) -> TelemetryError {
    TelemetryError::BadVariable {
        var,
        value: value.to_string(),
        problem: problem.into(),
    }
}

/// A variable, trimmed; empty counts as unset (as the OpenTelemetry
/// specification says).
fn var(env: &dyn Fn(&str) -> Option<String>, name: &str) -> Option<String> {
    env(name)
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

const SAMPLERS: [&str; 6] = [
    "always_on",
    "always_off",
    "traceidratio",
    "parentbased_always_on",
    "parentbased_always_off",
    "parentbased_traceidratio",
];

fn check_sampler(env: &dyn Fn(&str) -> Option<String>) -> Result<(), TelemetryError> {
    let Some(sampler) = var(env, "OTEL_TRACES_SAMPLER") else {
        return Ok(());
    };
    if !SAMPLERS.contains(&sampler.as_str()) {
        return Err(bad(
            "OTEL_TRACES_SAMPLER",
            &sampler,
            format!("expected one of {}", SAMPLERS.join(", ")),
        ));
    }
    if sampler.ends_with("traceidratio")
        && let Some(arg) = var(env, "OTEL_TRACES_SAMPLER_ARG")
        && !arg.parse::<f64>().is_ok_and(|r| (0.0..=1.0).contains(&r))
    {
        return Err(bad(
            "OTEL_TRACES_SAMPLER_ARG",
            &arg,
            format!("{sampler} needs a ratio between 0 and 1"),
        ));
    }
    Ok(())
}

/// `service.name` in `OTEL_RESOURCE_ATTRIBUTES` (`k=v,k=v`, values
/// percent-encoded).
fn service_in_resource_attributes(attrs: &str) -> Option<String> {
    attrs.split(',').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k.trim() == "service.name").then(|| {
            percent_encoding::percent_decode_str(v.trim())
                .decode_utf8_lossy()
                .into_owned()
        })
    })
}

/// Self-tracing as `env` asks for it: `None` when off.
pub fn config_from_env(
    env: &dyn Fn(&str) -> Option<String>,
    role: Role<'_>,
) -> Result<Option<SelfTraceConfig>, TelemetryError> {
    if let Some(v) = var(env, "OTEL_SDK_DISABLED") {
        match v.to_ascii_lowercase().as_str() {
            "true" => return Ok(None),
            "false" => {}
            _ => return Err(bad("OTEL_SDK_DISABLED", &v, "expected true or false")),
        }
    }
    match var(env, "OTEL_TRACES_EXPORTER").as_deref() {
        None | Some("none") => return Ok(None),
        Some("otlp") => {}
        Some(other) => {
            return Err(bad(
                "OTEL_TRACES_EXPORTER",
                other,
                "kascade traces itself only over OTLP: expected otlp or none",
            ));
        }
    }
    check_sampler(env)?;
    let (service_name, source_var) = match var(env, "OTEL_SERVICE_NAME") {
        Some(name) => (name, "OTEL_SERVICE_NAME"),
        None => match var(env, "OTEL_RESOURCE_ATTRIBUTES")
            .as_deref()
            .and_then(service_in_resource_attributes)
        {
            Some(name) => (name, "OTEL_RESOURCE_ATTRIBUTES"),
            None => (format!("kascade-{}", role.component), "the default"),
        },
    };
    if let Some((objects, flag)) = role.object_service
        && objects == service_name
    {
        return Err(TelemetryError::SameServiceAsObjects {
            source_var,
            name: service_name,
            flag,
        });
    }
    let otlp = resolve(&OtlpFlags::default(), env)
        .map_err(|e| TelemetryError::Exporter(format!("{e:#}")))?;
    Ok(Some(SelfTraceConfig { service_name, otlp }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::OtlpProtocol;

    const COLLECT: Role<'static> = Role {
        component: "collect",
        object_service: Some(("kascade", "--service-name")),
    };

    fn config(vars: &[(&str, &str)]) -> Result<Option<SelfTraceConfig>, TelemetryError> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        config_from_env(
            &move |k| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()),
            COLLECT,
        )
    }

    fn error(vars: &[(&str, &str)]) -> String {
        config(vars).unwrap_err().to_string()
    }

    #[test]
    fn off_unless_the_traces_exporter_is_otlp() {
        assert_eq!(config(&[]).unwrap(), None);
        // The endpoint alone configures the object export, not self-tracing.
        assert_eq!(
            config(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://jaeger:4317")]).unwrap(),
            None
        );
        assert_eq!(config(&[("OTEL_TRACES_EXPORTER", "none")]).unwrap(), None);
        let on = config(&[
            ("OTEL_TRACES_EXPORTER", "otlp"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://jaeger:4318"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
        ])
        .unwrap()
        .expect("on");
        assert_eq!(on.service_name, "kascade-collect");
        assert_eq!(on.otlp.protocol, OtlpProtocol::Http);
        assert_eq!(on.otlp.endpoint, "http://jaeger:4318/v1/traces");
        // kascade's default transport, as for the object export.
        let grpc = config(&[("OTEL_TRACES_EXPORTER", "otlp")])
            .unwrap()
            .unwrap();
        assert_eq!(grpc.otlp.protocol, OtlpProtocol::Grpc);
        assert_eq!(grpc.otlp.endpoint, "http://127.0.0.1:4317");
    }

    #[test]
    fn sdk_disabled_wins() {
        assert_eq!(
            config(&[
                ("OTEL_TRACES_EXPORTER", "otlp"),
                ("OTEL_SDK_DISABLED", "TRUE"),
                // Not even looked at.
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "carrier-pigeon"),
            ])
            .unwrap(),
            None
        );
        assert!(
            config(&[
                ("OTEL_TRACES_EXPORTER", "otlp"),
                ("OTEL_SDK_DISABLED", "false")
            ])
            .unwrap()
            .is_some()
        );
        let e = error(&[("OTEL_SDK_DISABLED", "yes")]);
        assert!(
            e.contains("OTEL_SDK_DISABLED") && e.contains("true or false"),
            "{e}"
        );
    }

    #[test]
    fn bad_values_are_named_in_the_error() {
        let on = ("OTEL_TRACES_EXPORTER", "otlp");
        let e = error(&[on, ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")]);
        assert!(
            e.contains("OTEL_EXPORTER_OTLP_PROTOCOL") && e.contains("http/json"),
            "{e}"
        );
        let e = error(&[on, ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "jaeger:4317")]);
        assert!(e.contains("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"), "{e}");
        let e = error(&[("OTEL_TRACES_EXPORTER", "zipkin")]);
        assert!(
            e.contains("OTEL_TRACES_EXPORTER") && e.contains("zipkin"),
            "{e}"
        );
        let e = error(&[on, ("OTEL_TRACES_SAMPLER", "sometimes")]);
        assert!(
            e.contains("OTEL_TRACES_SAMPLER") && e.contains("always_on"),
            "{e}"
        );
        let e = error(&[
            on,
            ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "1.5"),
        ]);
        assert!(
            e.contains("OTEL_TRACES_SAMPLER_ARG") && e.contains("1.5"),
            "{e}"
        );
        assert!(
            config(&[
                on,
                ("OTEL_TRACES_SAMPLER", "traceidratio"),
                ("OTEL_TRACES_SAMPLER_ARG", "0.25"),
            ])
            .unwrap()
            .is_some()
        );
    }

    #[test]
    fn the_service_name_is_never_that_of_the_object_spans() {
        let on = ("OTEL_TRACES_EXPORTER", "otlp");
        let named = config(&[on, ("OTEL_SERVICE_NAME", "kascade-self")])
            .unwrap()
            .unwrap();
        assert_eq!(named.service_name, "kascade-self");
        let from_attrs = config(&[
            on,
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "team=k8s,service.name=kascade%2Dme",
            ),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(from_attrs.service_name, "kascade-me");
        let e = error(&[on, ("OTEL_SERVICE_NAME", "kascade")]);
        assert!(
            e.contains("OTEL_SERVICE_NAME") && e.contains("--service-name"),
            "{e}"
        );
        let e = error(&[on, ("OTEL_RESOURCE_ATTRIBUTES", "service.name=kascade")]);
        assert!(e.contains("OTEL_RESOURCE_ATTRIBUTES"), "{e}");
    }
}
