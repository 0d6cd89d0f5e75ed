//! Asking a scorer with reuse: a scorer of the `node` scope
//! (`tessera:policy/reuse`, since 0.2.1) is asked only about the
//! candidates whose record changed since it last answered for a pod of the
//! same class; the rest come from its [`AnswerCache`]
//! ([`tessera_core::reuse::answer`]). One of the `zone` scope (since
//! 0.2.2) is asked about one candidate per zone, its answer copied to the
//! zone's others. Every
//! [`AnswerCache::AUDIT_EVERY`]-th such call it is asked about every
//! candidate and the answers compared: a difference breaks its promise
//! for good (the version is asked afresh from then on) and is reported as
//! `PLUGIN-REUSE-BROKEN`; the decision takes the fresh answers. A scorer
//! of the `fresh` scope is asked about every candidate, as before.

use std::sync::{Arc, Mutex, RwLock};

use tessera_core::reuse::{AnswerCache, Kind};
use tessera_core::{NodeId, Pod};

use crate::bindings::types as wit;
use crate::error::{CallError, CallFault};
use crate::feed::NodeFeed;
use crate::plugin::PluginVersion;

/// A plugin's answers for every candidate.
pub(crate) struct Answer {
    /// Filter verdicts (as `i64`) or scores, one per candidate.
    pub values: Vec<i64>,
    /// GPU hints: empty or one per candidate.
    pub hints: Vec<u8>,
    /// Answers taken from the cache rather than asked.
    pub reused: usize,
    /// The promise found broken on this call (the answers are fresh).
    pub broken: Option<CallError>,
}

fn fresh(
    v: &PluginVersion,
    feed: &RwLock<NodeFeed>,
    kind: Kind,
    pod: &wit::Pod,
    ids: &[NodeId],
) -> Result<(Vec<i64>, Vec<u8>), CallError> {
    match kind {
        Kind::Verdict => v.filter(feed, pod, ids).map(|x| (x.into_iter().map(i64::from).collect(), Vec::new())),
        Kind::Score => v.score(feed, pod, ids).map(|s| (s.values, s.gpu_hints)),
    }
}

/// `kind` answers of `v` for `pod` on `ids`, reusing what it promised may
/// be reused (`cache` is this plugin's, in this policy).
pub(crate) fn ask(
    v: &Arc<PluginVersion>,
    cache: Option<&Mutex<AnswerCache>>,
    feed: &RwLock<NodeFeed>,
    kind: Kind,
    pod: &Pod,
    wit_pod: &wit::Pod,
    ids: &[NodeId],
) -> Result<Answer, CallError> {
    let Some((cache, scope)) = cache.zip(v.reuse_scope()) else {
        let (values, hints) = fresh(v, feed, kind, wit_pod, ids)?;
        return Ok(Answer { values, hints, reused: 0, broken: None });
    };
    let mut cache = cache.lock().unwrap_or_else(|p| p.into_inner());
    cache.owned_by(v.uid, scope);
    // Read before asking: an answer given after a later change is stamped
    // older than that change, so it is only ever asked again too soon,
    // never reused too long.
    let changes = feed.read().unwrap_or_else(|p| p.into_inner()).changes();
    let a = tessera_core::reuse::answer(&mut cache, &changes, kind, pod, ids, |asked| {
        fresh(v, feed, kind, wit_pod, asked)
    })?;
    let broken = a.broken.map(|(k, reused, fresh)| {
        v.break_promise();
        let e = CallError {
            plugin: v.name.clone(),
            version: v.version.clone(),
            call: if kind == Kind::Verdict { "filter" } else { "score" },
            kind: CallFault::BrokenPromise {
                scope: crate::contract::scope_name(Some(scope)),
                node: ids[k],
                reused,
                fresh,
            },
        };
        tracing::error!(plugin = %v.name, version = %v.version, "{e}");
        e
    });
    Ok(Answer { values: a.values, hints: a.hints, reused: a.reused, broken })
}
