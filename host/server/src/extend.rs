//! Decisions for a scheduler extender: kube-scheduler keeps scheduling and
//! asks Tessera, over HTTP, to filter and score the nodes it found and to
//! bind. The HTTP layer and its JSON (the extender API's types) live with
//! the Kubernetes backend; this is the service's side: the calls go to the
//! loop between two passes and are answered from its model and its Wasm
//! policy, so the extender and the loop never disagree about a node.
//! These are the calls and answers; [`crate::control::ExtenderHandle`]
//! carries them.

use tessera_core::model::Pod;

/// kube-scheduler's highest extender score.
pub const MAX_SCORE: i64 = 10;

/// What the extender asks the loop.
#[derive(Debug, Clone)]
pub enum ExtenderCall {
    /// Which of `nodes` can take `pod`, and why not.
    Filter {
        /// The pod.
        pod: Pod,
        /// Node names.
        nodes: Vec<String>,
    },
    /// Scores of `nodes` for `pod`, 0..=[`MAX_SCORE`].
    Prioritize {
        /// The pod.
        pod: Pod,
        /// Node names.
        nodes: Vec<String>,
    },
    /// Bind `namespace/name` (`uid`) to `node`, on the GPUs the model
    /// chooses for `pod` there.
    Bind {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// UID.
        uid: String,
        /// Node name.
        node: String,
        /// The pod, if the extender saw it (for its GPUs).
        pod: Option<Pod>,
    },
    /// The pods with these API uids, as the loop models them.
    Pods {
        /// UIDs.
        uids: Vec<String>,
    },
}

/// One node's filter verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeVerdict {
    /// Node name.
    pub node: String,
    /// Why it cannot take the pod (none: it can).
    pub failure: Option<String>,
    /// Preempting pods there would not help (unknown or unready node,
    /// wrong GPU model, a plugin's rejection).
    pub unresolvable: bool,
}

/// The loop's answer.
#[derive(Debug, Clone)]
pub enum ExtenderAnswer {
    /// Per node, in the order asked.
    Filtered(Vec<NodeVerdict>),
    /// Per node, in the order asked.
    Scored(Vec<(String, i64)>),
    /// Bound, or why not.
    Bound(Result<(), String>),
    /// Per uid, in the order asked.
    Pods(Vec<Option<Pod>>),
}
