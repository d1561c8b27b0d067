//! One reconcile's decision: inherit the one change it acted on, or merge
//! several into a new CPID (reported to kascade), unless an ancestor list
//! shows that one observed CPID already descends from all the others.

use std::sync::Arc;
use std::time::SystemTime;

use kube_core::{ObjectMeta, Resource};

use crate::client::{Config, Counters, MergelogSender};
use crate::context::ChangeContext;
use crate::{Cpid, Mergelog, Stats};

/// What a controller keeps for its lifetime: its configuration, the
/// background mergelog sender and the counters.
#[derive(Clone)]
pub struct Tracer {
    config: Arc<Config>,
    counters: Arc<Counters>,
    sender: Option<MergelogSender>,
}

impl Tracer {
    /// Starts the mergelog sender when `config` names an endpoint; must be
    /// called inside a tokio runtime in that case.
    pub fn new(config: Config) -> Self {
        let counters = Arc::new(Counters::default());
        let sender = config
            .endpoint
            .is_some()
            .then(|| MergelogSender::spawn(&config, counters.clone()));
        Tracer {
            config: Arc::new(config),
            counters,
            sender,
        }
    }

    /// A fresh decision for one reconcile.
    pub fn propagation(&self) -> Propagation<'_> {
        Propagation {
            tracer: self,
            seen: Vec::new(),
        }
    }

    /// Counters since start (decisions, malformed annotations, mergelogs).
    pub fn stats(&self) -> Stats {
        self.counters.snapshot()
    }

    /// Waits until every mergelog handed over so far was delivered or
    /// dropped (e.g. before a controller exits).
    pub async fn flush(&self) {
        if let Some(s) = &self.sender {
            s.flush().await;
        }
    }
}

/// Collects the change contexts of the objects a reconcile read.
pub struct Propagation<'t> {
    tracer: &'t Tracer,
    seen: Vec<ChangeContext>,
}

impl Propagation<'_> {
    /// Observes an object the reconcile read (include the object it is about
    /// to write, when it exists: its current state is one of the changes).
    pub fn observe<K: Resource>(&mut self, object: &K) -> &mut Self {
        self.observe_meta(object.meta())
    }

    /// [`Propagation::observe`] for bare metadata.
    pub fn observe_meta(&mut self, meta: &ObjectMeta) -> &mut Self {
        let read = ChangeContext::read_meta(meta);
        for problem in &read.problems {
            self.tracer.counters.malformed.inc();
            tracing::warn!(
                namespace = meta.namespace.as_deref().unwrap_or(""),
                name = meta.name.as_deref().unwrap_or(""),
                %problem,
                "ignored a malformed change-propagation annotation"
            );
        }
        if let Some(c) = read.context {
            self.seen.push(c);
        }
        self
    }

    /// Observes a context known otherwise (e.g. from a cache).
    pub fn observe_context(&mut self, context: ChangeContext) -> &mut Self {
        self.seen.push(context);
        self
    }

    /// Decides, counts, and hands a merge's mergelog to the background
    /// sender (never waits for it).
    pub fn decide(self) -> Decision {
        let config = &self.tracer.config;
        let d = decide(&self.seen, config.max_ancestors, &config.controller);
        let c = &self.tracer.counters;
        match d.outcome {
            Outcome::NoChange => c.no_change.inc(),
            Outcome::Inherited => c.inherited.inc(),
            Outcome::Covered => c.covered.inc(),
            Outcome::Merged => c.merged.inc(),
        }
        if let Some(m) = &d.mergelog {
            match &self.tracer.sender {
                Some(s) => s.send(m.clone()),
                None => c.dropped_no_endpoint.inc(),
            }
        }
        d
    }
}

/// How the CPID to write was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// No observed object carried a CPID: nothing to stamp.
    NoChange,
    /// One CPID was observed and is passed on.
    Inherited,
    /// Several were observed, one already descends from all the others
    /// (its ancestor list says so): it is passed on, no merge needed.
    Covered,
    /// Several independent changes: a new CPID and a mergelog.
    Merged,
}

/// The outcome of one reconcile's propagation.
#[derive(Debug, Clone)]
pub struct Decision {
    pub outcome: Outcome,
    /// The context to stamp on what the reconcile writes.
    pub context: Option<ChangeContext>,
    /// Set for [`Outcome::Merged`].
    pub mergelog: Option<Mergelog>,
    max_ancestors: usize,
}

impl Decision {
    /// The CPID to write, if any.
    pub fn cpid(&self) -> Option<Cpid> {
        self.context.as_ref().map(|c| c.cpid)
    }

    /// Writes the decided CPID and ancestors onto an object about to be
    /// written; leaves it untouched when no change was observed.
    pub fn stamp(&self, meta: &mut ObjectMeta) {
        if let Some(c) = &self.context {
            c.stamp(meta, self.max_ancestors);
        }
    }
}

/// The decision itself, without side effects.
pub fn decide(seen: &[ChangeContext], max_ancestors: usize, controller: &str) -> Decision {
    // Distinct CPIDs in observation order; of repeated ones the longest
    // ancestor list is kept.
    let mut distinct: Vec<ChangeContext> = Vec::new();
    for c in seen {
        match distinct.iter_mut().find(|d| d.cpid == c.cpid) {
            Some(d) if c.ancestors.len() > d.ancestors.len() => d.ancestors = c.ancestors.clone(),
            Some(_) => {}
            None => distinct.push(c.clone()),
        }
    }
    let decision = |outcome, context, mergelog| Decision {
        outcome,
        context,
        mergelog,
        max_ancestors,
    };
    match distinct.len() {
        0 => return decision(Outcome::NoChange, None, None),
        1 => return decision(Outcome::Inherited, distinct.pop(), None),
        _ => {}
    }
    if let Some(heir) = distinct
        .iter()
        .find(|c| distinct.iter().all(|o| c.covers(o.cpid)))
    {
        let mut context = heir.clone();
        context.from_traceparent = false;
        return decision(Outcome::Covered, Some(context), None);
    }
    let cpid = Cpid::new_random();
    // Nearest first: the sources, then each source's first ancestor, then
    // each one's second, … (temporal locality: recent merges are what the
    // next decision most likely needs).
    let mut ancestors: Vec<Cpid> = Vec::new();
    let depth = distinct
        .iter()
        .map(|c| c.ancestors.len())
        .max()
        .unwrap_or(0);
    let levels = std::iter::once(distinct.iter().map(|c| c.cpid).collect::<Vec<_>>()).chain(
        (0..depth).map(|k| {
            distinct
                .iter()
                .filter_map(|c| c.ancestors.get(k).copied())
                .collect()
        }),
    );
    'fill: for level in levels {
        for a in level {
            if ancestors.len() >= max_ancestors {
                break 'fill;
            }
            if !ancestors.contains(&a) {
                ancestors.push(a);
            }
        }
    }
    let mergelog = Mergelog {
        cpid,
        sources: distinct.iter().map(|c| c.cpid).collect(),
        time: SystemTime::now(),
        controller: controller.to_string(),
    };
    let context = ChangeContext {
        cpid,
        ancestors,
        from_traceparent: false,
    };
    decision(Outcome::Merged, Some(context), Some(mergelog))
}

#[cfg(test)]
mod tests;
