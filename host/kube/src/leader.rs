//! Leader election on a `coordination.k8s.io/v1` Lease, after client-go's
//! leaderelection: a candidate takes the lease when it is free or its
//! record has not changed for `lease_duration` (measured on the
//! candidate's own clock, so clock skew between replicas does not
//! matter); the leader renews it every `retry_period` with optimistic
//! concurrency (a 409 means someone else wrote it) and steps down when it
//! could not renew for `renew_deadline`; on stop it releases the lease so
//! a standby takes over at once. Only the leader binds and moves.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Api;
use kube::api::PostParams;
use kube::runtime::WatchStreamExt;

/// Timing and identity of an election.
#[derive(Debug, Clone)]
pub struct ElectionConfig {
    /// The Lease's name.
    pub name: String,
    /// This candidate.
    pub identity: String,
    /// How long a lease lasts unrenewed.
    pub lease_duration: Duration,
    /// How long the leader tries to renew before stepping down.
    pub renew_deadline: Duration,
    /// Between attempts.
    pub retry_period: Duration,
}

/// What the candidate last saw of the lease.
#[derive(Debug, Clone, PartialEq)]
struct Observed {
    holder: Option<String>,
    renew: Option<String>,
    transitions: i32,
}

/// One candidate.
pub struct Elector {
    api: Api<Lease>,
    cfg: ElectionConfig,
    leading: Arc<AtomicBool>,
    observed: Option<(Observed, Instant)>,
    last_renewed: Option<Instant>,
}

/// Whether this replica leads, shared with whoever acts.
#[derive(Debug, Clone, Default)]
pub struct Leadership(Arc<AtomicBool>);

impl Leadership {
    /// A flag that always leads (no election).
    pub fn always() -> Self {
        Self(Arc::new(AtomicBool::new(true)))
    }

    /// Leads now.
    pub fn is_leader(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

fn now_micro() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

impl Elector {
    /// A candidate for the lease `cfg.name` in `api`'s namespace.
    pub fn new(api: Api<Lease>, cfg: ElectionConfig) -> (Self, Leadership) {
        let leading = Arc::new(AtomicBool::new(false));
        let me = Self { api, cfg, leading: leading.clone(), observed: None, last_renewed: None };
        (me, Leadership(leading))
    }

    /// Tries to acquire or renew once; whether it leads now.
    pub async fn step(&mut self) -> bool {
        let attempt = tokio::time::timeout(self.cfg.retry_period, self.try_acquire_or_renew()).await;
        let attempt = attempt.unwrap_or_else(|_| Err(kube::Error::Service("the lease update timed out".into())));
        let leads = match attempt {
            Ok(true) => {
                self.last_renewed = Some(Instant::now());
                true
            }
            Ok(false) => false,
            Err(e) => {
                // Keep leading through short API trouble, not past the
                // renew deadline.
                let keep = self.leading.load(Ordering::SeqCst)
                    && self.last_renewed.is_some_and(|t| t.elapsed() < self.cfg.renew_deadline);
                tracing::warn!(lease = %self.cfg.name, "lease update failed: {e}{}", if keep { "" } else { "; not leading" });
                keep
            }
        };
        let was = self.leading.swap(leads, Ordering::SeqCst);
        if was != leads {
            tracing::info!(lease = %self.cfg.name, identity = %self.cfg.identity, "{}", if leads { "leading" } else { "stopped leading" });
        }
        leads
    }

    /// Steps every `retry_period`, and at once when a reflector on the
    /// Lease sees it released, until `stop` resolves; then releases the
    /// lease if it leads.
    pub async fn run(mut self, stop: impl std::future::Future<Output = ()>) {
        tokio::pin!(stop);
        let (_store, writer) = kube::runtime::reflector::store::<Lease>();
        let fields = format!("metadata.name={}", self.cfg.name);
        let watch = kube::runtime::watcher(self.api.clone(), kube::runtime::watcher::Config::default().fields(&fields));
        let mut seen = kube::runtime::reflector(writer, watch).applied_objects().boxed();
        loop {
            self.step().await;
            loop {
                tokio::select! {
                    () = &mut stop => {
                        self.release().await;
                        return;
                    }
                    () = tokio::time::sleep(self.cfg.retry_period) => break,
                    Some(Ok(lease)) = seen.next() => {
                        let free = lease.metadata.name.as_deref() == Some(self.cfg.name.as_str())
                            && lease.spec.as_ref().and_then(|s| s.holder_identity.as_deref()).is_none_or(str::is_empty);
                        if free {
                            break;
                        }
                    }
                }
            }
        }
    }

    /// Gives the lease up (a standby may take it at once).
    pub async fn release(&mut self) {
        if !self.leading.swap(false, Ordering::SeqCst) {
            return;
        }
        if let Ok(Some(mut lease)) = self.api.get_opt(&self.cfg.name).await
            && let Some(spec) = lease.spec.as_mut()
            && spec.holder_identity.as_deref() == Some(self.cfg.identity.as_str())
        {
            spec.holder_identity = None;
            spec.renew_time = Some(now_micro());
            spec.lease_duration_seconds = Some(1);
            if let Err(e) = self.api.replace(&self.cfg.name, &PostParams::default(), &lease).await {
                tracing::warn!(lease = %self.cfg.name, "cannot release the lease: {e}");
            }
        }
    }

    fn spec(&self, acquire: MicroTime, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.cfg.identity.clone()),
            lease_duration_seconds: Some(self.cfg.lease_duration.as_secs().max(1) as i32),
            acquire_time: Some(acquire),
            renew_time: Some(now_micro()),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }

    async fn try_acquire_or_renew(&mut self) -> Result<bool, kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.cfg.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta { name: Some(self.cfg.name.clone()), ..ObjectMeta::default() },
                spec: Some(self.spec(now_micro(), 0)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let seen = Observed {
            holder: spec.holder_identity.clone().filter(|h| !h.is_empty()),
            renew: spec.renew_time.as_ref().map(|t| t.0.to_string()),
            transitions: spec.lease_transitions.unwrap_or(0),
        };
        if self.observed.as_ref().is_none_or(|(o, _)| *o != seen) {
            self.observed = Some((seen.clone(), Instant::now()));
        }
        let mine = seen.holder.as_deref() == Some(self.cfg.identity.as_str());
        let duration = Duration::from_secs(spec.lease_duration_seconds.unwrap_or(15).max(1) as u64);
        let expired = self.observed.as_ref().is_some_and(|(_, at)| at.elapsed() > duration);
        if !mine && seen.holder.is_some() && !expired {
            return Ok(false);
        }
        let (acquire, transitions) = if mine {
            (spec.acquire_time.clone().unwrap_or_else(now_micro), seen.transitions)
        } else {
            (now_micro(), seen.transitions + 1)
        };
        lease.spec = Some(self.spec(acquire, transitions));
        // The resourceVersion read above: a 409 means another candidate
        // wrote the lease in between, and it wins.
        match self.api.replace(&self.cfg.name, &PostParams::default(), &lease).await {
            Ok(l) => {
                let s = l.spec.unwrap_or_default();
                let o = Observed {
                    holder: s.holder_identity,
                    renew: s.renew_time.map(|t| t.0.to_string()),
                    transitions: s.lease_transitions.unwrap_or(0),
                };
                self.observed = Some((o, Instant::now()));
                Ok(true)
            }
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }
}
