//! The crate's internals that its own tests, benches and fuzz targets
//! use, under the paths they have inside the crate (`kascade::aggregate::X`
//! is `kascade::test_support::aggregate::X` here). Built only with the
//! `test-support` feature, which the crate's dev-dependency on itself and
//! the fuzz crate turn on: none of this is the library's API.

pub use crate::return_freed_pages_after;
pub mod aggregate {
    pub use crate::aggregate::{LookAhead, Processor, ProcessorConfig};
    pub mod diff {
        pub use crate::aggregate::diff::{diff, is_noise, parse_object, walk_leaves};
    }
    pub mod redact {
        pub use crate::aggregate::redact::{
            DEFAULT_REDACT_PATHS, MARKER_PREFIX, PathPattern, Redactor,
        };
    }
    pub mod rules {
        pub use crate::aggregate::rules::RuleSet;
    }
    pub mod span_cache {
        pub use crate::aggregate::span_cache::{
            EtcdConfig, EtcdSpanCache, EtcdTls, LocalSpanCache, Slot, SpanCache, etcd_key,
        };
    }
}
pub mod analysis {
    pub mod cascade {
        pub use crate::analysis::cascade::{
            Cascade, Completion, build, change_name, format_duration, render_text,
        };
    }
    pub mod explain {
        pub use crate::analysis::explain::{
            ExplainCollector, Finding, FindingKind, Report, Scope, Severity, parse_selector,
            render_markdown, render_text,
        };
        pub mod html {
            pub use crate::analysis::explain::html::render_html;
        }
    }
    pub mod foreground {
        pub use crate::analysis::foreground::{ForegroundScope, ForegroundSink};
    }
    pub mod report {
        pub use crate::analysis::report::Report;
    }
    pub mod stats {
        pub use crate::analysis::stats::PropagationStats;
    }
}
pub mod cli {
    pub use crate::cli::{Cli, Command};
}
pub mod client_tls {
    pub use crate::client_tls::ClientTls;
}
pub mod coordination {
    pub mod election {
        pub use crate::coordination::election::{Campaign, EtcdElection, Leadership, RoleElection};
    }
    pub mod etcd {
        pub use crate::coordination::etcd::{EtcdClient, proto};
    }
}
pub mod export {
    pub use crate::export::{OutputSpec, resource, to_otlp_json};
    pub mod config {
        pub use crate::export::config::ExportSettings;
    }
}
pub mod frontend {
    pub use crate::frontend::{
        AssembledTrace, CPID_TAG, Frontend, FrontendConfig, FrontendError, SEARCH_TAGS,
        SearchQuery, proto,
    };
    pub mod assemble {
        pub use crate::frontend::assemble::{Assembler, Assembly, Clip, Limits, Scope};
    }
    pub mod assembled {
        pub use crate::frontend::assembled::{chunks, encoded_chunks, trace_bytes};
    }
    pub mod cache_weight {
        pub use crate::frontend::cache_weight::history_bytes;
    }
    pub mod components {
        pub use crate::frontend::components::{
            APISERVER_SERVICE, AUDIT_ID_TAG, KUBELET_SERVICE, MAX_SYNCS_PER_POD, POD_UID_TAG,
            parts, spans_from_otlp_json_lines,
        };
    }
    pub mod display {
        pub use crate::frontend::display::{Mode, render};
        pub mod cascade {
            pub use crate::frontend::display::cascade::CRITICAL_MARK;
        }
    }
    pub mod explain {
        pub use crate::frontend::explain::ExplainQuery;
    }
    pub mod http {
        pub use crate::frontend::http::{RedirectState, router};
    }
    pub mod offline {
        pub use crate::frontend::offline::store_from_audit_lines;
    }
    pub mod raw {
        pub use crate::frontend::raw::{
            JaegerGrpc, JaegerHttp, JaegerStore, MemoryStore, RawError, RawStore, RelationCounts,
            TimeRange, TraceIdBytes, decode_v3_trace, find_all, from_nanos, hex_trace_id, nanos,
            parse_hex_trace_id, spans_of, string_attr,
        };
    }
    pub mod service {
        pub use crate::frontend::service::{JaegerStorage, parse_query};
    }
    pub mod text {
        pub use crate::frontend::text::render_text;
    }
    pub mod trace_id {
        pub use crate::frontend::trace_id::AssembledId;
    }
}
pub mod json {
    pub use crate::json::{JsonValueTrait, Value, parse, utf8};
    pub mod depth {
        pub use crate::json::depth::{cap, exceeds};
    }
}
pub mod messages {
    pub use crate::messages::MAX_MESSAGE_BYTES;
}
pub mod metrics {
    pub use crate::metrics::{
        AssemblyLimit, AssemblyLimitLabel, Cache, CacheEvictionLabel, EtcdErrorReason, EtcdOp,
        EvictionCause, FrontendMetrics, Metrics, Rpc,
    };
}
pub mod model {
    pub use crate::model::{ObjectRef, ObjectWindow, Windowing};
}
pub mod flow {
    pub use crate::flow::{
        CascadeRole, ChangeRecord, ChangeSink, ChangeSource, CpidOrigin, FilterReason, Intake,
        K8sEvent, RequestAnnotations, SENT_LINKS_FILE, SentLinks, WatchChange, WatchKind, Work,
    };
}
pub mod self_trace {
    pub use crate::self_trace::grpc_request_span;
}
pub mod source {
    pub use crate::source::accept;
    pub mod audit {
        pub use crate::source::audit::{AuditFilter, decode_event_list, parse_event};
    }
    pub mod mergelog {
        pub use crate::source::mergelog::{
            MAX_MERGELOGS_PER_REQUEST, MAX_SOURCES, decode_mergelogs,
        };
    }
    pub mod replay {
        pub use crate::source::replay::replay_files;
    }
    pub mod admission {
        #[cfg(fuzzing)]
        pub mod fuzzing {
            pub use crate::source::admission::fuzzing::review;
        }
    }
    pub mod server {
        pub use crate::source::server::ConnectionLimits;
    }
    pub mod spool {
        pub use crate::source::spool::{Spool, SpoolConfig};
    }
    pub mod watch {
        pub use crate::source::watch::{WatchConfig, start};
        #[cfg(fuzzing)]
        pub mod fuzzing {
            pub use crate::source::watch::fuzzing::decode;
        }
    }
    pub mod webhook {
        #[cfg(fuzzing)]
        pub mod fuzzing {
            pub use crate::source::webhook::fuzzing::{audit_batch, otlp_logs};
        }
    }
}
pub mod span_model {
    pub use crate::span_model::{
        DEFAULT_MAX_VALUE_BYTES, Span, attr, merge_spans, set_max_value_bytes,
    };
}
pub mod telemetry {
    pub use crate::telemetry::{
        Role, SelfTraceConfig, config_from_env, self_tracing_layer, tracer_provider,
    };
}
pub mod offline {
    pub use crate::offline::{changes_from_audit_lines, spans_from_audit_lines};
}
