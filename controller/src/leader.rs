//! Leader election on a coordination.k8s.io Lease, so that of several
//! replicas exactly one acts. Expiry is judged by this replica's own clock
//! (how long the record has gone unchanged since it saw it), never by
//! comparing timestamps written by another machine. Every write carries
//! the resourceVersion it read, so two candidates cannot both win.

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};
use std::time::Duration;
use tokio::time::Instant;

#[derive(Debug, Clone)]
pub struct Election {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    /// How long a lease holds without renewal.
    pub lease_duration: Duration,
    /// The leader gives up if it cannot renew within this long.
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

pub struct Elector {
    api: Api<Lease>,
    election: Election,
    /// The record last seen and when this replica saw it change.
    observed: Option<(LeaseSpec, Instant)>,
}

impl Elector {
    pub fn new(client: Client, election: Election) -> Self {
        Elector {
            api: Api::namespaced(client, &election.namespace),
            election,
            observed: None,
        }
    }

    /// Returns once this replica holds the lease.
    pub async fn acquire(&mut self) {
        loop {
            match self.try_acquire_or_renew().await {
                Ok(true) => return,
                Ok(false) => {}
                Err(e) => tracing::debug!(error = %e, "leader election"),
            }
            tokio::time::sleep(self.election.retry_period).await;
        }
    }

    /// Renews until no renewal has succeeded for the renew deadline; then
    /// the lease is lost and the caller must stop acting. The deadline runs
    /// from when the last successful renewal was sent, and a renewal that
    /// hangs is abandoned when it expires: another replica can take the
    /// lease only a lease duration after it saw that renewal, which is
    /// later still.
    pub async fn hold(&mut self) {
        let mut renewed_at = Instant::now();
        loop {
            tokio::time::sleep(self.election.retry_period).await;
            let sent = Instant::now();
            let deadline = renewed_at + self.election.renew_deadline;
            match tokio::time::timeout_at(deadline, self.try_acquire_or_renew()).await {
                Ok(Ok(true)) => renewed_at = sent,
                Ok(Ok(false)) => return,
                Ok(Err(e)) => tracing::warn!(error = %e, "renewing the leader lease"),
                Err(_) => {
                    tracing::warn!("renewing the leader lease: no answer by the renew deadline")
                }
            }
            if Instant::now() >= deadline && renewed_at != sent {
                tracing::error!(
                    deadline = ?self.election.renew_deadline,
                    "the leader lease was not renewed in time; stopping"
                );
                return;
            }
        }
    }

    /// Gives the lease up, as client-go's ReleaseOnCancel does: an empty
    /// holder, which any candidate may take at once, instead of the standby
    /// waiting out the lease duration.
    pub async fn release(&mut self) {
        let e = &self.election;
        let lease = match self.api.get_opt(&e.name).await {
            Ok(Some(lease)) => lease,
            Ok(None) => return,
            Err(err) => {
                tracing::warn!(error = %err, "releasing the leader lease");
                return;
            }
        };
        let mut spec = lease.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(e.identity.as_str()) {
            return;
        }
        spec.holder_identity = Some(String::new());
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(jiff::Timestamp::now()));
        let mut released = lease;
        released.spec = Some(spec);
        match self
            .api
            .replace(&e.name, &PostParams::default(), &released)
            .await
        {
            Ok(_) => tracing::info!(identity = %e.identity, "released the leader lease"),
            Err(err) => tracing::warn!(error = %err, "releasing the leader lease"),
        }
    }

    async fn try_acquire_or_renew(&mut self) -> Result<bool, kube::Error> {
        let e = &self.election;
        let now = MicroTime(jiff::Timestamp::now());
        let Some(lease) = self.api.get_opt(&e.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(e.name.clone()),
                    namespace: Some(e.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(self.spec(now.clone(), now, 0)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(a)) if a.code == 409 => Ok(false),
                Err(err) => Err(err),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let held_by_me = spec.holder_identity.as_deref() == Some(e.identity.as_str());
        let local_now = Instant::now();
        match &self.observed {
            Some((seen, _)) if *seen == spec => {}
            _ => self.observed = Some((spec.clone(), local_now)),
        }
        let duration = spec
            .lease_duration_seconds
            .map(|s| Duration::from_secs(s.max(0) as u64))
            .unwrap_or(e.lease_duration);
        let expired = spec
            .holder_identity
            .as_deref()
            .unwrap_or_default()
            .is_empty()
            || self
                .observed
                .as_ref()
                .is_some_and(|(_, at)| local_now.duration_since(*at) >= duration);
        if !held_by_me && !expired {
            return Ok(false);
        }
        let (acquired, transitions) = if held_by_me {
            (
                spec.acquire_time.clone().unwrap_or(now.clone()),
                spec.lease_transitions.unwrap_or(0),
            )
        } else {
            (now.clone(), spec.lease_transitions.unwrap_or(0) + 1)
        };
        let mut updated = lease.clone();
        updated.spec = Some(self.spec(acquired, now, transitions));
        match self
            .api
            .replace(&e.name, &PostParams::default(), &updated)
            .await
        {
            Ok(l) => {
                self.observed = l.spec.map(|s| (s, Instant::now()));
                if !held_by_me {
                    tracing::info!(identity = %e.identity, "became leader");
                }
                Ok(true)
            }
            Err(kube::Error::Api(a)) if a.code == 409 => Ok(false),
            Err(err) => Err(err),
        }
    }

    fn spec(&self, acquired: MicroTime, renewed: MicroTime, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.election.identity.clone()),
            lease_duration_seconds: Some(self.election.lease_duration.as_secs() as i32),
            acquire_time: Some(acquired),
            renew_time: Some(renewed),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }
}
