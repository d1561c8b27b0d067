//! What can go wrong talking to etcd, classified by what to do about it.

use crate::metrics::EtcdErrorReason;
use std::time::Duration;

use tonic::Code;

/// A setting that cannot work; found before the first request.
#[derive(Debug, thiserror::Error)]
pub enum EtcdConfigError {
    #[error("no etcd endpoint")]
    NoEndpoint,
    #[error("etcd endpoint {endpoint:?}: {reason}")]
    BadEndpoint { endpoint: String, reason: String },
    #[error("an https:// etcd endpoint needs --etcd-ca-file")]
    HttpsWithoutCa,
    #[error("etcd TLS: {0}")]
    Tls(String),
}

/// A request to etcd that failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum EtcdError {
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("cannot reach etcd: {0}")]
    Connect(String),
    #[error("etcd answered {code:?}: {message}")]
    Status { code: Code, message: String },
    #[error("unexpected answer from etcd: {0}")]
    Decode(String),
    /// etcd ended a watch for another reason than compaction (e.g.
    /// "permission denied").
    #[error("etcd cancelled the watch: {0}")]
    WatchCancelled(String),
}

impl EtcdError {
    /// A status etcd sent, or the client's own failure to reach it: tonic
    /// gives a status with a source (the transport error) only for the latter.
    pub(crate) fn from_status(status: tonic::Status) -> Self {
        if let Some(source) = std::error::Error::source(&status) {
            let mut s = status.message().to_string();
            let mut src = Some(source);
            while let Some(c) = src {
                s.push_str(": ");
                s.push_str(&c.to_string());
                src = c.source();
            }
            return EtcdError::Connect(s);
        }
        EtcdError::Status {
            code: status.code(),
            message: status.message().to_string(),
        }
    }

    /// The `reason` label of `kascade_span_cache_etcd_errors_total`.
    pub fn reason(&self) -> EtcdErrorReason {
        match self {
            EtcdError::Timeout(_) => EtcdErrorReason::Timeout,
            EtcdError::Connect(_) => EtcdErrorReason::Connect,
            EtcdError::Status { .. } => EtcdErrorReason::Status,
            EtcdError::Decode(_) => EtcdErrorReason::Decode,
            EtcdError::WatchCancelled(_) => EtcdErrorReason::WatchCancelled,
        }
    }

    /// Worth trying another endpoint: this one is away or cut off from the
    /// cluster (no leader: Unavailable; a member too slow: DeadlineExceeded).
    pub fn try_elsewhere(&self) -> bool {
        match self {
            EtcdError::Timeout(_) | EtcdError::Connect(_) => true,
            EtcdError::Status { code, .. } => {
                matches!(code, Code::Unavailable | Code::DeadlineExceeded)
            }
            EtcdError::Decode(_) | EtcdError::WatchCancelled(_) => false,
        }
    }

    /// Worth sending again: the endpoints were away, slow, overloaded
    /// (ResourceExhausted: "too many requests") or between leaders. After a
    /// timeout the outcome is unknown, so only an idempotent request may be
    /// retried (a reservation carries its value).
    pub fn transient(&self) -> bool {
        self.try_elsewhere()
            || matches!(
                self,
                EtcdError::Status {
                    code: Code::ResourceExhausted,
                    ..
                }
            )
    }

    /// etcd does not know the lease (it expired, was revoked, or etcd's data
    /// was wiped): the only NotFound a transaction or keep-alive answers.
    pub fn lease_not_found(&self) -> bool {
        matches!(
            self,
            EtcdError::Status {
                code: Code::NotFound,
                ..
            }
        )
    }

    /// The auth token expired or belongs to another member: authenticate again.
    pub fn auth_invalid(&self) -> bool {
        matches!(
            self,
            EtcdError::Status {
                code: Code::Unauthenticated,
                ..
            }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: Code, message: &str) -> EtcdError {
        EtcdError::Status {
            code,
            message: message.into(),
        }
    }

    #[test]
    fn errors_are_classified() {
        let unavailable = status(Code::Unavailable, "etcdserver: no leader");
        assert!(unavailable.try_elsewhere());
        let lease = status(Code::NotFound, "etcdserver: requested lease not found");
        assert!(lease.lease_not_found() && !lease.try_elsewhere());
        let auth = status(Code::Unauthenticated, "etcdserver: invalid auth token");
        assert!(auth.auth_invalid());
        assert!(EtcdError::Timeout(Duration::from_millis(1)).try_elsewhere());
        assert_eq!(
            EtcdError::Connect("refused".into()).reason(),
            EtcdErrorReason::Connect
        );
    }

    #[test]
    fn only_what_a_retry_can_fix_is_retried() {
        let transient = [
            EtcdError::Timeout(Duration::from_millis(1)),
            EtcdError::Connect("refused".into()),
            status(Code::Unavailable, "etcdserver: leader changed"),
            status(Code::ResourceExhausted, "etcdserver: too many requests"),
        ];
        assert!(transient.iter().all(EtcdError::transient));
        let permanent = [
            status(
                Code::InvalidArgument,
                "etcdserver: authentication failed, invalid user ID or password",
            ),
            EtcdError::Decode("garbage".into()),
        ];
        assert!(!permanent.iter().any(EtcdError::transient));
    }

    #[test]
    fn a_status_the_client_made_up_is_a_connection_failure() {
        let refused = tonic::Status::from_error(Box::new(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "connection refused",
        )));
        assert_eq!(
            EtcdError::from_status(refused).reason(),
            EtcdErrorReason::Connect
        );
        let sent = tonic::Status::unavailable("etcdserver: no leader");
        assert!(matches!(
            EtcdError::from_status(sent),
            EtcdError::Status {
                code: Code::Unavailable,
                ..
            }
        ));
    }
}
