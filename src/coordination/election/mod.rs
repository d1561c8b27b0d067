//! Which replica holds a role, such as watching one cluster: N `kascade
//! collect` replicas watch each cluster once, and another takes over when
//! the holder goes away.
//!
//! A watcher asks a [`RoleElection`] for a [`Campaign`] and follows its
//! [`Leadership`]. Without shared state ([`SingleReplica`]) every replica
//! holds every role; with etcd ([`EtcdElection`]) one replica at a time does.

mod etcd;

use std::sync::Arc;

use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use etcd::EtcdElection;

/// Whether this replica holds a role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leadership {
    /// Not known yet (the first answer has not come): keep the current state.
    Unknown,
    /// This replica holds the role.
    Leader,
    /// Another replica holds it.
    Follower,
}

/// A replica's campaign for one role, for as long as the campaign is kept:
/// dropping it stops campaigning (a held role then passes on once its
/// lease expires).
pub struct Campaign {
    state: watch::Receiver<Leadership>,
    task: Option<JoinHandle<()>>,
}

impl Campaign {
    /// A campaign whose state is set by `task` through the sender of `state`.
    pub(crate) fn new(state: watch::Receiver<Leadership>, task: Option<JoinHandle<()>>) -> Self {
        Self { state, task }
    }

    /// The current state.
    pub fn leadership(&self) -> Leadership {
        *self.state.borrow()
    }

    /// Waits until the state changes, and returns it. Never returns for a
    /// state that cannot change (a single replica always leads).
    pub async fn changed(&mut self) -> Leadership {
        if self.state.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
        *self.state.borrow_and_update()
    }
}

impl Drop for Campaign {
    fn drop(&mut self) {
        if let Some(t) = &self.task {
            t.abort();
        }
    }
}

/// Elects one holder per role among the replicas.
pub trait RoleElection: Send + Sync {
    /// Starts campaigning for `role` (inside a Tokio runtime).
    fn campaign(&self, role: &str) -> Campaign;
}

/// One replica alone: it holds every role.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct SingleReplica;

impl RoleElection for SingleReplica {
    fn campaign(&self, _role: &str) -> Campaign {
        let (_, state) = watch::channel(Leadership::Leader);
        Campaign::new(state, None)
    }
}

impl SingleReplica {
    /// As the shared trait object the watchers take.
    pub(crate) fn shared() -> Arc<dyn RoleElection> {
        Arc::new(SingleReplica)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_single_replica_leads_and_never_changes() {
        let mut c = SingleReplica.campaign("watch/east");
        assert_eq!(c.leadership(), Leadership::Leader);
        let waited = tokio::time::timeout(std::time::Duration::from_millis(10), c.changed()).await;
        assert!(waited.is_err(), "a single replica's leadership changed");
        assert_eq!(c.leadership(), Leadership::Leader);
    }
}
