//! The report from what was collected: findings ranked, each with its chain
//! from the object asked about, the trigger of its cascade, the cascades as
//! timelines, and the scope's objects as a tree.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, SystemTime};

use super::collect::{Idx, Row, State};
use super::findings::{Raw, raw_findings, rfc3339};
use super::rank::{Ranked, rank};
use super::report::*;
use super::sink::ExplainCollector;
use crate::analysis::cascade::{self, Completion, format_duration};
use crate::flow::{Cause, ChangeRecord, ChangeSource, Readiness, SpanRef};
use crate::model::ObjectRef;

/// Cascade timelines in a report at most, and entries per timeline.
const MAX_TIMELINES: usize = 5;
const MAX_TIMELINE_ENTRIES: usize = 300;
/// Objects shown in the tree at most.
const MAX_TREE: usize = 400;
/// Steps of a chain at most (a loop of relations ends it).
const MAX_CHAIN: usize = 12;

fn object_name(o: &ObjectRef) -> ObjectName {
    ObjectName {
        cluster: o.cluster.clone(),
        group: o.group.clone(),
        resource: o.resource.clone(),
        namespace: o.namespace.clone(),
        name: o.name.clone(),
        display: cascade::object_name(o),
    }
}

struct Builder<'a> {
    st: &'a State,
    members: &'a HashSet<usize>,
    /// The scope's named object, where chains start.
    anchor: Option<Idx>,
}

impl Builder<'_> {
    fn name(&self, i: Idx) -> ObjectName {
        object_name(&self.st.objects[i as usize].object)
    }

    fn status(&self, i: Idx) -> (String, String) {
        let o = &self.st.objects[i as usize];
        if o.gone {
            return ("Deleted".into(), String::new());
        }
        let (s, m) = o.last_status;
        (
            self.st.strings.get(s).to_string(),
            self.st.strings.get(m).to_string(),
        )
    }

    /// From the topmost object above `obj` (or the scope's object) down to it.
    fn chain(&self, obj: Idx) -> Vec<ChainStep> {
        let mut up: Vec<(Idx, u32)> = vec![(obj, 0)];
        let mut seen = HashSet::from([obj]);
        let mut cur = obj;
        while up.len() < MAX_CHAIN && Some(cur) != self.anchor {
            let Some(&(p, class)) = self.st.objects[cur as usize]
                .parents
                .iter()
                .find(|(p, _)| !seen.contains(p))
            else {
                break;
            };
            up.last_mut().expect("not empty").1 = class;
            seen.insert(p);
            up.push((p, 0));
            cur = p;
        }
        up.reverse();
        // Each entry carries the class of its link to the step above.
        let mut steps = Vec::with_capacity(up.len());
        for (i, class) in up {
            let (status, status_message) = self.status(i);
            steps.push(ChainStep {
                object: self.name(i),
                via: self.st.strings.get(class).to_string(),
                status,
                status_message,
            });
        }
        steps
    }

    fn trigger(&self, root: Option<SpanRef>) -> Option<Trigger> {
        let info = self.st.roots.get(&root?)?;
        Some(Trigger {
            write: info.name.clone(),
            time: rfc3339(info.received),
            changes: info.changes.clone(),
        })
    }

    fn symptom(&self, r: &Raw) -> Symptom {
        Symptom {
            kind: r.kind,
            object: self.name(r.obj),
            title: r.title.clone(),
            first: rfc3339(r.first),
        }
    }

    fn finding(&self, n: usize, ranked: &Ranked) -> Finding {
        let r = &ranked.finding;
        let chain = self.chain(r.obj);
        let mut headline = format!(
            "{} — on {}",
            r.title,
            cascade::object_name(&self.st.objects[r.obj as usize].object)
        );
        if chain.len() > 1 {
            headline.push_str(&format!(", under {}", chain[0].object.display));
        }
        Finding {
            id: format!("F{}", n + 1),
            severity: r.severity,
            kind: r.kind,
            title: r.title.clone(),
            headline,
            object: self.name(r.obj),
            chain,
            first: rfc3339(r.first),
            last: rfc3339(r.last),
            count: r.count,
            also: r.also.iter().map(|&o| self.name(o)).collect(),
            also_total: r.also_total,
            evidence: r.evidence.iter().map(|(_, e)| e.clone()).collect(),
            trigger: self
                .trigger(r.root)
                .or_else(|| ranked.symptoms.iter().find_map(|s| self.trigger(s.root))),
            symptoms: ranked.symptoms.iter().map(|s| self.symptom(s)).collect(),
            background: ranked.background,
        }
    }

    fn record_of(&self, row: &Row, by_span: &HashMap<SpanRef, &Row>) -> ChangeRecord {
        let strings = &self.st.strings;
        let cause = row.cause.map(|span| {
            let completed = by_span.get(&span).map(|c| c.completed);
            Cause {
                span,
                object: by_span
                    .get(&span)
                    .map(|c| self.st.objects[c.obj as usize].object.clone())
                    .unwrap_or_else(|| ObjectRef::new("", "", "", "", "")),
                // Only its writer matters here (a writer's own write is no
                // new cause of its retries).
                name: by_span
                    .get(&span)
                    .map(|c| format!("{} {}", strings.get(c.user), strings.get(c.verb)))
                    .unwrap_or_default(),
                edge: strings.get(row.edge).to_string(),
                rule: String::new(),
                hop: completed
                    .and_then(|c| row.received.duration_since(c).ok())
                    .unwrap_or(Duration::ZERO),
            }
        });
        ChangeRecord {
            annotations: Default::default(),
            object: self.st.objects[row.obj as usize].object.clone(),
            uid: String::new(),
            source: if row.user == 0 {
                ChangeSource::Watch
            } else {
                ChangeSource::Audit
            },
            user: strings.get(row.user).to_string(),
            verb: strings.get(row.verb).to_string(),
            subresource: strings.get(row.subresource).to_string(),
            code: row.code,
            received: row.received,
            completed: row.completed,
            span: row.span,
            cause_logged_after: false,
            version: (row.version != 0).then_some(row.version),
            readiness: (row.status != 0).then(|| Readiness {
                status: strings.get(row.status).to_string(),
                message: strings.get(row.message).to_string(),
            }),
            deleted: row.deleted,
            role: row.role,
            cause,
            root: row.span,
            timer: None,
            depth: row.depth,
            cpid: None,
            failure: None,
            audit_id: String::new(),
            old: None,
            new: None,
            related: Vec::new(),
        }
    }

    fn timeline(&self, root: SpanRef, findings: Vec<String>) -> Option<CascadeTimeline> {
        let rows: Vec<&Row> = self
            .st
            .rows_by_root
            .get(&root)?
            .iter()
            .map(|&i| &self.st.rows[i as usize])
            .collect();
        let by_span: HashMap<SpanRef, &Row> = rows.iter().map(|r| (r.span, *r)).collect();
        let records: Vec<ChangeRecord> = rows.iter().map(|r| self.record_of(r, &by_span)).collect();
        let cascades = cascade::build(records);
        let c = cascades.into_iter().find(|c| c.root().span == root)?;
        let start = c.root().received;
        let ms = |t: SystemTime| t.duration_since(start).unwrap_or_default().as_secs_f64() * 1000.0;
        let order = c.walk();
        let shown: Vec<(usize, usize)> = order.iter().copied().take(MAX_TIMELINE_ENTRIES).collect();
        let position: HashMap<usize, usize> = shown
            .iter()
            .enumerate()
            .map(|(p, (i, _))| (*i, p))
            .collect();
        let entries = shown
            .iter()
            .map(|&(i, depth)| {
                let ch = &c.changes[i];
                let (attempt, backoff_ms) = match c.attempts[i] {
                    cascade::Attempt::Retry {
                        attempt, backoff, ..
                    } => (attempt, Some(backoff.as_secs_f64() * 1000.0)),
                    cascade::Attempt::First => (1, None),
                };
                TimelineEntry {
                    write: cascade::change_name(ch),
                    object: object_name(&ch.object),
                    // A retry starts at its own request: the wait before it
                    // is back-off.
                    start_ms: match c.parent[i] {
                        Some(p) if backoff_ms.is_none() => {
                            ms(c.changes[p].completed).min(ms(ch.received))
                        }
                        _ => ms(ch.received),
                    },
                    attempt,
                    backoff_ms,
                    end_ms: ms(ch.completed),
                    cause: c.parent[i].and_then(|p| position.get(&p).copied()),
                    depth: depth as u32,
                    code: ch.code,
                    status: ch
                        .readiness
                        .as_ref()
                        .map(|r| r.status.clone())
                        .unwrap_or_default(),
                    critical: c.is_critical(i),
                }
            })
            .collect();
        let outcome = match &c.completion {
            Completion::Complete { at } => format!(
                "complete after {}",
                format_duration(at.duration_since(start).unwrap_or_default())
            ),
            Completion::Waiting(w) => {
                let names: Vec<String> = w.iter().take(3).map(|w| w.to_string()).collect();
                let more = if w.len() > 3 {
                    format!(" and {} more", w.len() - 3)
                } else {
                    String::new()
                };
                format!("not complete: waiting for {}{more}", names.join("; "))
            }
            Completion::NotKnown(w) => cascade::not_known_text(w),
        };
        Some(CascadeTimeline {
            root: cascade::change_name(c.root()),
            start: rfc3339(start),
            outcome,
            findings,
            entries,
            omitted: order.len().saturating_sub(MAX_TIMELINE_ENTRIES) as u64,
        })
    }

    fn tree(&self, findings: &[Finding], on: &HashMap<Idx, Vec<String>>) -> (Vec<TreeNode>, u64) {
        let all = self.members.len();
        // Small scopes show everything; large ones the findings' chains.
        let shown: HashSet<usize> = if all <= MAX_TREE {
            self.members.clone()
        } else {
            let mut s = HashSet::new();
            for f in findings {
                for step in &f.chain {
                    if let Some(&i) = self.st.index.get(&to_ref(&step.object)) {
                        s.insert(i as usize);
                    }
                }
            }
            s
        };
        let mut tops: Vec<usize> = shown
            .iter()
            .copied()
            .filter(|&i| {
                !self.st.objects[i]
                    .parents
                    .iter()
                    .any(|(p, _)| shown.contains(&(*p as usize)))
            })
            .collect();
        tops.sort_by_key(|&i| &self.st.objects[i].object);
        let mut placed = HashSet::new();
        let nodes: Vec<TreeNode> = tops
            .into_iter()
            .filter_map(|i| self.node(i as Idx, 0, &shown, on, &mut placed))
            .collect();
        (nodes, (all.saturating_sub(placed.len())) as u64)
    }

    fn node(
        &self,
        i: Idx,
        via: u32,
        shown: &HashSet<usize>,
        on: &HashMap<Idx, Vec<String>>,
        placed: &mut HashSet<Idx>,
    ) -> Option<TreeNode> {
        if placed.len() >= MAX_TREE || !placed.insert(i) {
            return None;
        }
        let mut kids: Vec<(Idx, u32)> = self.st.objects[i as usize]
            .children
            .iter()
            .copied()
            .filter(|(c, _)| shown.contains(&(*c as usize)))
            .collect();
        kids.sort_by_key(|(c, _)| &self.st.objects[*c as usize].object);
        let (status, status_message) = self.status(i);
        Some(TreeNode {
            object: self.name(i),
            via: self.st.strings.get(via).to_string(),
            status,
            status_message,
            findings: on.get(&i).cloned().unwrap_or_default(),
            children: kids
                .into_iter()
                .filter_map(|(c, class)| self.node(c, class, shown, on, placed))
                .collect(),
        })
    }
}

fn to_ref(o: &ObjectName) -> ObjectRef {
    ObjectRef::new(
        &o.cluster,
        &o.group,
        &o.resource,
        &o.namespace,
        o.name.clone(),
    )
}

/// The report over everything `collector` saw; `inputs` says what was read.
pub(crate) fn report(collector: ExplainCollector, mut inputs: Inputs) -> Report {
    let mut st = collector.into_state();
    let members = {
        let objects = st.objects.iter().map(|o| (&o.object, o.labels.as_ref()));
        let children = |i: usize| -> Vec<usize> {
            st.objects[i]
                .children
                .iter()
                .map(|(c, _)| *c as usize)
                .collect()
        };
        st.scope.members(objects, children)
    };
    // Chains start at the object the user named.
    let anchor = st
        .scope
        .object
        .as_ref()
        .and_then(|_| {
            members
                .iter()
                .copied()
                .filter(|&i| {
                    st.scope
                        .names(&st.objects[i].object, st.objects[i].labels.as_ref())
                })
                .min()
        })
        .map(|i| i as Idx);
    let raw = raw_findings(&mut st, &members);
    let ranked = rank(raw, &st);
    let b = Builder {
        st: &st,
        members: &members,
        anchor,
    };
    let findings: Vec<Finding> = ranked
        .iter()
        .enumerate()
        .map(|(n, r)| b.finding(n, r))
        .collect();
    // The cascades the top findings happened in, in finding order.
    let mut roots: Vec<(SpanRef, Vec<String>)> = Vec::new();
    for (r, f) in ranked.iter().zip(&findings).filter(|(r, _)| !r.background) {
        let Some(root) = r
            .finding
            .root
            .or_else(|| r.symptoms.iter().find_map(|s| s.root))
        else {
            continue;
        };
        if let Some((_, ids)) = roots.iter_mut().find(|(s, _)| *s == root) {
            ids.push(f.id.clone());
        } else if roots.len() < MAX_TIMELINES {
            roots.push((root, vec![f.id.clone()]));
        }
    }
    let cascades = roots
        .into_iter()
        .filter_map(|(root, ids)| b.timeline(root, ids))
        .collect();
    let mut on: HashMap<Idx, Vec<String>> = HashMap::new();
    for (r, f) in ranked.iter().zip(&findings) {
        on.entry(r.finding.obj).or_default().push(f.id.clone());
        for s in &r.symptoms {
            on.entry(s.obj).or_default().push(f.id.clone());
        }
    }
    let (tree, tree_omitted) = b.tree(&findings, &on);
    let mut totals = Totals::default();
    for f in &findings {
        if f.background {
            totals.background += 1;
            continue;
        }
        match f.severity {
            Severity::Error => totals.error += 1,
            Severity::Warning => totals.warning += 1,
            Severity::Info => totals.info += 1,
        }
    }
    if st.uid_conflicts > 0 {
        inputs.notes.push(format!(
            "{} changes name an object under another uid than the one that exists ({}): \
             the input seems to mix several clusters' logs; explain each cluster's logs on their own",
            st.uid_conflicts,
            st.uid_conflict_example.clone().unwrap_or_default()
        ));
    }
    if st.out_of_order > 0 {
        inputs.notes.push(format!(
            "{} changes were logged out of time order, up to {} before a change logged ahead of them \
             (several apiservers' logs interleaved, or files given out of order): causes are inferred \
             from what was logged before each change, so some of theirs may be missing",
            st.out_of_order,
            humantime::format_duration(std::time::Duration::from_secs(st.out_of_order_by.as_secs().max(1)))
        ));
    }
    if st.causes_logged_after > 0 {
        inputs.notes.push(format!(
            "{} controller writes were logged before any change they react to ({}): the clocks \
             of the apiservers that logged them seem to disagree, or the logs are out of order; \
             they are shown without a cause rather than given a guessed one",
            st.causes_logged_after,
            st.cause_logged_after_example.clone().unwrap_or_default()
        ));
    }
    if let Some(comps) = &st.components {
        let t = st.traced_writes;
        let not_read = comps.not_read as u64;
        inputs.notes.push(format!(
            "kube-apiserver's traces: {} of {} writes traced{}{}",
            t.traced,
            t.looked_up,
            if not_read > 0 {
                format!(
                    "; only the {} longest were looked up (a report reads at most that many writes' traces)",
                    t.looked_up.saturating_sub(not_read)
                )
            } else {
                String::new()
            },
            if t.traced + not_read < t.looked_up {
                "; a write without a trace (sampled out, or made before the apiserver's exporter \
                 reached its collector) is never called slow"
            } else {
                ""
            }
        ));
    }
    if st.request_notes_dropped > 0 {
        inputs.notes.push(format!(
            "{} traced writes that were slow or admitted past a failing webhook were not kept (bound reached)",
            st.request_notes_dropped
        ));
    }
    if st.rows_dropped > 0 {
        inputs.notes.push(format!(
            "{} changes were left out of the cascade timelines (bound reached)",
            st.rows_dropped
        ));
    }
    if st.failed_dropped > 0 {
        inputs.notes.push(format!(
            "{} refused writes were not kept (bound reached)",
            st.failed_dropped
        ));
    }
    for (dropped, what) in [
        (
            st.fields_dropped,
            "spec field changes were not followed for writers fighting",
        ),
        (
            st.retries.forgotten,
            "refused writes were forgotten before their retries: those retries count as first attempts",
        ),
        (
            st.root_writers_dropped,
            "cascade roots' writers were not kept: their problems are not judged background",
        ),
    ] {
        if dropped > 0 {
            inputs
                .notes
                .push(format!("{dropped} {what} (bound reached)"));
        }
    }
    inputs.events_in_scope = st.in_scope;
    inputs.objects_in_scope = members.len() as u64;
    inputs.from = st.first.map(rfc3339).unwrap_or_default();
    inputs.to = st.last.map(rfc3339).unwrap_or_default();
    Report {
        schema_version: SCHEMA_VERSION,
        generator: format!("kascade {}", env!("CARGO_PKG_VERSION")),
        scope: ScopeSummary {
            description: st.scope.describe(),
        },
        inputs,
        totals,
        findings,
        cascades,
        tree,
        tree_omitted,
    }
}
