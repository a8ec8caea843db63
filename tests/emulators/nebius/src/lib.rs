//! A Nebius API emulator for the Nebius provider: gRPC over cleartext HTTP/2
//! (prior knowledge) on 127.0.0.1, serving the real services, methods and
//! messages the plugin calls: nebius.compute.v1 InstanceService, DiskService
//! and PlatformService, nebius.common.v1 OperationService and
//! nebius.iam.v1 TokenExchangeService.
//!
//! What it enforces, as Nebius does: a bearer token it issued, itself only
//! for a JWT signed by the service account's key; unique names per project;
//! a boot disk that exists and is not attached elsewhere; a known platform
//! and preset, preemptibles only where allowed, cloud-init at most 32 KiB;
//! X-Idempotency-Key (a repeated mutation returns the first operation);
//! per-platform quotas (refused at once with `quota_failure`) and capacity
//! (the operation fails with `not_enough_resources`); one-shot injected
//! errors. Mutations are long-running operations that finish after
//! `op_duration`, polled or not (OperationService.Get shows them).
//!
//! An instance that finishes creating plays its VM's kubelet: it registers
//! the Node its cloud-init describes in the API server its bootstrap
//! kubeconfig names (kwok keeps it Ready); deleting the instance deletes it.

pub mod iam;
pub mod kubelet;
pub mod wire;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::{Request, StatusCode};
use karpenter_plugin_nebius::bootstrap;
use karpenter_plugin_nebius::grpc::code;
use karpenter_plugin_nebius::proto::{self, paths, state};
pub use kubelet::Kube;
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use wire::{Reply, decode, error, ok, status};

#[derive(Clone, Debug)]
pub struct Options {
    pub service_account: iam::ServiceAccount,
    /// How long a mutation's operation runs (0: done when created). It
    /// finishes in the background whether or not anyone polls it.
    pub op_duration: Duration,
    /// Items per page of a List.
    pub page_size: usize,
    pub token_ttl_seconds: i64,
    pub platforms: Vec<proto::Platform>,
    pub quota: Quota,
    pub injections: Vec<Injection>,
    pub kube: Option<Kube>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            service_account: iam::ServiceAccount::test(),
            op_duration: Duration::from_millis(200),
            page_size: 100,
            token_ttl_seconds: 3600,
            platforms: default_platforms(),
            quota: Quota::default(),
            injections: Vec::new(),
            kube: None,
        }
    }
}

/// Limits per platform: vCPUs (CPU platforms) or GPUs (GPU platforms) in
/// use, refused at Create; `capacity` is how many more instances the region
/// can place before operations fail with not_enough_resources.
#[derive(Clone, Debug, Default)]
pub struct Quota {
    pub platform_units: BTreeMap<String, u64>,
    pub capacity: BTreeMap<String, u64>,
}

/// Fail the next `count` calls of `method` (e.g. "InstanceService/Create")
/// whose platform matches (empty: any) with a gRPC code and, optionally, a
/// ServiceError detail ("quota_failure", "not_enough_resources").
#[derive(Clone, Debug)]
pub struct Injection {
    pub method: String,
    pub platform: String,
    pub code: i32,
    pub detail: String,
    pub count: u32,
}

pub fn platform(
    name: &str,
    presets: &[(&str, i32, i32, i32)],
    preemptible: bool,
) -> proto::Platform {
    proto::Platform {
        metadata: Some(proto::ResourceMetadata {
            id: format!("computeplatform-{name}"),
            name: name.into(),
            ..Default::default()
        }),
        spec: Some(proto::PlatformSpec {
            presets: presets
                .iter()
                .map(|(n, c, m, g)| proto::Preset {
                    name: n.to_string(),
                    resources: Some(proto::PresetResources {
                        vcpu_count: *c,
                        memory_gibibytes: *m,
                        gpu_count: *g,
                    }),
                })
                .collect(),
            human_readable_name: name.into(),
        }),
        status: Some(proto::PlatformStatus {
            allowed_for_preemptibles: preemptible,
        }),
    }
}

/// A region's platforms, shaped like Nebius's public catalog.
pub fn default_platforms() -> Vec<proto::Platform> {
    vec![
        platform(
            "cpu-d3",
            &[
                ("4vcpu-16gb", 4, 16, 0),
                ("8vcpu-32gb", 8, 32, 0),
                ("16vcpu-64gb", 16, 64, 0),
                ("32vcpu-128gb", 32, 128, 0),
                ("48vcpu-192gb", 48, 192, 0),
                ("64vcpu-256gb", 64, 256, 0),
                ("96vcpu-384gb", 96, 384, 0),
                ("128vcpu-512gb", 128, 512, 0),
            ],
            true,
        ),
        platform(
            "cpu-e2",
            &[
                ("2vcpu-8gb", 2, 8, 0),
                ("4vcpu-16gb", 4, 16, 0),
                ("8vcpu-32gb", 8, 32, 0),
                ("16vcpu-64gb", 16, 64, 0),
                ("32vcpu-128gb", 32, 128, 0),
                ("48vcpu-192gb", 48, 192, 0),
                ("64vcpu-256gb", 64, 256, 0),
                ("80vcpu-320gb", 80, 320, 0),
            ],
            false,
        ),
        platform(
            "gpu-h100-sxm",
            &[
                ("1gpu-16vcpu-200gb", 16, 200, 1),
                ("8gpu-128vcpu-1600gb", 128, 1600, 8),
            ],
            true,
        ),
        platform(
            "gpu-h200-sxm",
            &[
                ("1gpu-16vcpu-200gb", 16, 200, 1),
                ("8gpu-128vcpu-1600gb", 128, 1600, 8),
            ],
            true,
        ),
        platform(
            "gpu-l40s-a",
            &[
                ("1gpu-8vcpu-32gb", 8, 32, 1),
                ("1gpu-16vcpu-64gb", 16, 64, 1),
                ("1gpu-24vcpu-96gb", 24, 96, 1),
                ("1gpu-32vcpu-128gb", 32, 128, 1),
                ("1gpu-40vcpu-160gb", 40, 160, 1),
            ],
            false,
        ),
    ]
}

/// What an operation does when it finishes.
#[derive(Clone, Debug)]
enum Done {
    DiskReady,
    DiskDeleted(String),
    InstanceRunning(String),
    InstanceDeleted(String),
    Fail(proto::Status),
}

struct Op {
    op: proto::Operation,
    due: Instant,
    done: Done,
}

struct Vm {
    instance: proto::Instance,
    private_ip: String,
}

#[derive(Default)]
struct State {
    instances: BTreeMap<String, Vm>,
    disks: BTreeMap<String, proto::Disk>,
    operations: HashMap<String, Op>,
    idempotency: HashMap<(String, String), String>,
    tokens: HashMap<String, u64>,
    quota: Quota,
    injections: Vec<Injection>,
    requests: Vec<String>,
    exchanges: u64,
    next_id: u64,
    next_ip: u32,
    /// Time spent inside the handlers, for the plugin's own overhead.
    busy: Duration,
}

pub struct Emulator {
    options: Options,
    /// Random faults on compute calls; none unless a rate is set.
    pub chaos: emulator_chaos::Chaos,
    state: Mutex<State>,
    http: reqwest::Client,
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn timestamp() -> proto::Timestamp {
    proto::Timestamp {
        seconds: now() as i64,
        nanos: 0,
    }
}

fn not_found(what: &str, id: &str) -> proto::Status {
    status(
        code::NOT_FOUND,
        &format!("{what} {id} not found"),
        Some(proto::ServiceError {
            service: "compute".into(),
            code: "NotFound".into(),
            resource_not_found: Some(proto::ResourceNotFound {
                resource_id: id.into(),
            }),
            ..Default::default()
        }),
    )
}

fn invalid(message: &str) -> proto::Status {
    status(code::INVALID_ARGUMENT, message, None)
}

fn detail_status(c: i32, kind: &str, message: &str, subject: &str) -> proto::Status {
    let mut d = proto::ServiceError {
        service: "compute".into(),
        code: kind.into(),
        ..Default::default()
    };
    match kind {
        "quota_failure" => {
            d.code = "QuotaFailure".into();
            d.quota_failure = Some(proto::QuotaFailure {
                violations: vec![proto::QuotaViolation {
                    quota: format!("compute.instance.{subject}"),
                    message: message.into(),
                    limit: String::new(),
                    requested: "1".into(),
                }],
            });
        }
        "not_enough_resources" => {
            d.code = "NotEnoughResources".into();
            d.not_enough_resources = Some(proto::NotEnoughResources {
                violations: vec![proto::ResourceViolation {
                    resource_type: subject.into(),
                    message: message.into(),
                    requested: "1".into(),
                }],
            });
        }
        _ => {}
    }
    status(c, message, Some(d))
}

impl Emulator {
    pub fn new(options: Options) -> anyhow::Result<Arc<Emulator>> {
        let mut builder = reqwest::Client::builder();
        if let Some(k) = &options.kube {
            builder = builder.add_root_certificate(reqwest::Certificate::from_pem(&k.ca_pem)?);
        }
        let state = State {
            quota: options.quota.clone(),
            injections: options.injections.clone(),
            ..State::default()
        };
        Ok(Arc::new(Emulator {
            options,
            chaos: emulator_chaos::Chaos::default(),
            state: Mutex::new(state),
            http: builder.build()?,
        }))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Serves h2c on 127.0.0.1:`port` (0: any) until the task is dropped.
    pub async fn serve(
        self: Arc<Self>,
        port: u16,
    ) -> anyhow::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
        let addr = listener.local_addr()?;
        // Operations run in the background, as the cloud's do.
        let ticker = Arc::downgrade(&self);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(50)).await;
                let Some(me) = ticker.upgrade() else { return };
                for e in me.sweep() {
                    me.apply(e).await;
                }
            }
        });
        let handle = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let me = self.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let me = me.clone();
                        async move { Ok::<_, std::convert::Infallible>(me.handle(req).await) }
                    });
                    let _ = hyper::server::conn::http2::Builder::new(
                        hyper_util::rt::TokioExecutor::new(),
                    )
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
                });
            }
        });
        Ok((addr, handle))
    }

    pub fn instances(&self) -> Vec<String> {
        self.lock()
            .instances
            .values()
            .filter_map(|v| v.instance.metadata.as_ref().map(|m| m.name.clone()))
            .collect()
    }

    pub fn instance_labels(&self) -> Vec<HashMap<String, String>> {
        self.lock()
            .instances
            .values()
            .filter_map(|v| v.instance.metadata.as_ref().map(|m| m.labels.clone()))
            .collect()
    }

    /// Instance ids, which are also their Nodes' names.
    pub fn instance_ids(&self) -> Vec<String> {
        self.lock().instances.keys().cloned().collect()
    }

    /// The name of the instance whose WireGuard address label is `address`.
    pub fn name_with_address(&self, address: &str) -> Option<String> {
        self.lock()
            .instances
            .values()
            .filter_map(|v| v.instance.metadata.as_ref())
            .find(|m| m.labels.get("wireguard-address").map(String::as_str) == Some(address))
            .map(|m| m.name.clone())
    }

    /// The cloud-init of the instance named `name`.
    pub fn user_data(&self, name: &str) -> Option<String> {
        self.lock()
            .instances
            .values()
            .find(|v| v.instance.metadata.as_ref().is_some_and(|m| m.name == name))
            .and_then(|v| v.instance.spec.as_ref())
            .map(|s| s.cloud_init_user_data.clone())
    }

    pub fn disks(&self) -> Vec<String> {
        self.lock()
            .disks
            .values()
            .filter_map(|d| d.metadata.as_ref().map(|m| m.name.clone()))
            .collect()
    }

    /// Every call as `<Service>/<Method>`, in order.
    pub fn requests(&self) -> Vec<String> {
        self.lock().requests.clone()
    }

    pub fn exchanges(&self) -> u64 {
        self.lock().exchanges
    }

    /// Time spent inside request handlers so far.
    pub fn busy(&self) -> Duration {
        self.lock().busy
    }

    pub fn inject(&self, i: Injection) {
        self.lock().injections.push(i);
    }

    pub fn set_quota(&self, q: Quota) {
        self.lock().quota = q;
    }

    /// Forget every issued token (as if they were revoked).
    pub fn revoke_tokens(&self) {
        self.lock().tokens.clear();
    }

    async fn handle(&self, req: Request<Incoming>) -> Reply {
        for e in self.sweep() {
            self.apply(e).await;
        }
        let started = Instant::now();
        let path = req.uri().path().to_string();
        let header = |k: &str| {
            req.headers()
                .get(k)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let bearer =
            header("authorization").and_then(|a| a.strip_prefix("Bearer ").map(str::to_string));
        let idempotency = header("x-idempotency-key");
        let grpc = header("content-type").is_some_and(|c| c.starts_with("application/grpc"));
        let body: Bytes = match req.into_body().collect().await {
            Ok(b) => b.to_bytes(),
            Err(_) => return wire::plain(StatusCode::BAD_REQUEST),
        };
        if !grpc {
            return wire::plain(StatusCode::UNSUPPORTED_MEDIA_TYPE);
        }
        let method = path.rsplit('/').take(2).collect::<Vec<_>>();
        let short = format!(
            "{}/{}",
            method
                .get(1)
                .and_then(|s| s.rsplit('.').next())
                .unwrap_or(""),
            method.first().unwrap_or(&"")
        );
        self.lock().requests.push(short.clone());
        let (reply, effects) = if path == paths::TOKEN_EXCHANGE {
            (self.exchange(&body), Vec::new())
        } else if bearer
            .as_deref()
            .is_none_or(|t| self.lock().tokens.get(t).is_none_or(|exp| *exp <= now()))
        {
            (
                error(&status(
                    code::UNAUTHENTICATED,
                    "missing or unknown bearer token",
                    None,
                )),
                Vec::new(),
            )
        } else {
            match self.chaos.roll(short == "InstanceService/Create") {
                None => self.route(&path, &short, &body, idempotency.as_deref()),
                Some(kind) => {
                    self.chaotic(kind, &path, &short, &body, idempotency.as_deref())
                        .await
                }
            }
        };
        self.lock().busy += started.elapsed();
        // The kubelet's side effects happen outside the handler's time: a
        // real VM boots while the API answers.
        for e in effects {
            self.apply(e).await;
        }
        reply
    }

    /// A compute call the chaos fails: as Nebius answers under load.
    async fn chaotic(
        &self,
        kind: emulator_chaos::Kind,
        path: &str,
        short: &str,
        body: &[u8],
        idempotency: Option<&str>,
    ) -> (Reply, Vec<Done>) {
        use emulator_chaos::Kind;
        let failed = |s: proto::Status| (error(&s), Vec::new());
        match kind {
            Kind::Throttled => failed(status(
                code::RESOURCE_EXHAUSTED,
                "too many requests",
                Some(proto::ServiceError {
                    service: "compute".into(),
                    code: "TooManyRequests".into(),
                    too_many_requests: Some(proto::TooManyRequests {
                        violation: format!("{short} requests per second"),
                    }),
                    ..Default::default()
                }),
            )),
            Kind::Internal => failed(status(code::INTERNAL, "internal error", None)),
            Kind::Unavailable => failed(status(code::UNAVAILABLE, "service unavailable", None)),
            Kind::Capacity => failed(detail_status(
                code::RESOURCE_EXHAUSTED,
                "not_enough_resources",
                "not enough capacity in the region (chaos)",
                "compute",
            )),
            // Carried out, its answer lost: the effects happen all the same.
            Kind::Timeout => {
                let (_lost, effects) = self.route(path, short, body, idempotency);
                tokio::time::sleep(emulator_chaos::TIMEOUT_DELAY).await;
                (
                    error(&status(code::DEADLINE_EXCEEDED, "deadline exceeded", None)),
                    effects,
                )
            }
        }
    }

    fn exchange(&self, body: &[u8]) -> Reply {
        let r: proto::ExchangeTokenRequest = match decode(body) {
            Ok(r) => r,
            Err(reply) => return *reply,
        };
        if r.grant_type != karpenter_plugin_nebius::auth::GRANT_TYPE
            || r.subject_token_type != karpenter_plugin_nebius::auth::SUBJECT_TOKEN_TYPE
        {
            return error(&invalid("unsupported grant_type or subject_token_type"));
        }
        if let Err(why) = iam::verify(&r.subject_token, &self.options.service_account, now()) {
            return error(&status(code::UNAUTHENTICATED, &why, None));
        }
        let mut st = self.lock();
        st.exchanges += 1;
        st.next_id += 1;
        let token = format!("v1.emulator-token-{}", st.next_id);
        st.tokens.insert(
            token.clone(),
            now() + self.options.token_ttl_seconds.max(0) as u64,
        );
        ok(&proto::CreateTokenResponse {
            access_token: token,
            issued_token_type: karpenter_plugin_nebius::auth::ACCESS_TOKEN_TYPE.into(),
            token_type: "Bearer".into(),
            expires_in: self.options.token_ttl_seconds,
        })
    }

    /// The reply, and finished operations whose effects reach outside.
    fn route(
        &self,
        path: &str,
        short: &str,
        body: &[u8],
        idempotency: Option<&str>,
    ) -> (Reply, Vec<Done>) {
        let mut st = self.lock();
        macro_rules! req {
            ($t:ty) => {
                match decode::<$t>(body) {
                    Ok(r) => r,
                    Err(reply) => return (*reply, Vec::new()),
                }
            };
        }
        if let Some(i) = take_injection(&mut st, short, body) {
            return (error(&i), Vec::new());
        }
        // A repeated mutation with the same key returns its first operation.
        if let Some(key) = idempotency
            && let Some(op_id) = st.idempotency.get(&(path.to_string(), key.to_string()))
            && let Some(op) = st.operations.get(op_id)
        {
            return (ok(&op.op), Vec::new());
        }
        let result: Result<proto::Operation, proto::Status> = match path {
            paths::PLATFORM_LIST => {
                let r = req!(proto::ListPlatformsRequest);
                if r.parent_id.is_empty() {
                    return (error(&invalid("parent_id is required")), Vec::new());
                }
                let (items, next) = page(
                    &self.options.platforms,
                    &r.page_token,
                    self.page(r.page_size),
                );
                return (
                    ok(&proto::ListPlatformsResponse {
                        items,
                        next_page_token: next,
                    }),
                    Vec::new(),
                );
            }
            paths::OPERATION_GET => {
                let r = req!(proto::GetOperationRequest);
                return match self.poll(&mut st, &r.id) {
                    Ok((op, done)) => (ok(&op), done.into_iter().collect()),
                    Err(s) => (error(&s), Vec::new()),
                };
            }
            paths::INSTANCE_GET => {
                let r = req!(proto::GetInstanceRequest);
                return match st.instances.get(&r.id) {
                    Some(v) => (ok(&v.instance), Vec::new()),
                    None => (error(&not_found("instance", &r.id)), Vec::new()),
                };
            }
            paths::INSTANCE_GET_BY_NAME => {
                let r = req!(proto::GetByNameRequest);
                return match st
                    .instances
                    .values()
                    .find(|v| named(&v.instance.metadata, &r))
                {
                    Some(v) => (ok(&v.instance), Vec::new()),
                    None => (error(&not_found("instance", &r.name)), Vec::new()),
                };
            }
            paths::INSTANCE_LIST => {
                let r = req!(proto::ListInstancesRequest);
                let all: Vec<proto::Instance> = st
                    .instances
                    .values()
                    .filter(|v| {
                        v.instance
                            .metadata
                            .as_ref()
                            .is_some_and(|m| m.parent_id == r.parent_id)
                    })
                    .map(|v| v.instance.clone())
                    .collect();
                let (items, next) = page(&all, &r.page_token, self.page(r.page_size));
                return (
                    ok(&proto::ListInstancesResponse {
                        items,
                        next_page_token: next,
                    }),
                    Vec::new(),
                );
            }
            paths::DISK_LIST => {
                let r = req!(proto::ListDisksRequest);
                let all: Vec<proto::Disk> = st
                    .disks
                    .values()
                    .filter(|d| {
                        d.metadata
                            .as_ref()
                            .is_some_and(|m| m.parent_id == r.parent_id)
                    })
                    .cloned()
                    .collect();
                let (items, next) = page(&all, &r.page_token, self.page(r.page_size));
                return (
                    ok(&proto::ListDisksResponse {
                        items,
                        next_page_token: next,
                    }),
                    Vec::new(),
                );
            }
            paths::DISK_GET_BY_NAME => {
                let r = req!(proto::GetByNameRequest);
                return match st.disks.values().find(|d| named(&d.metadata, &r)) {
                    Some(d) => (ok(d), Vec::new()),
                    None => (error(&not_found("disk", &r.name)), Vec::new()),
                };
            }
            paths::DISK_CREATE => self.create_disk(&mut st, req!(proto::CreateDiskRequest)),
            paths::DISK_DELETE => self.delete_disk(&mut st, req!(proto::DeleteDiskRequest)),
            paths::INSTANCE_CREATE => {
                self.create_instance(&mut st, req!(proto::CreateInstanceRequest))
            }
            paths::INSTANCE_DELETE => {
                self.delete_instance(&mut st, req!(proto::DeleteInstanceRequest))
            }
            _ => {
                return (
                    error(&status(
                        code::UNIMPLEMENTED,
                        &format!("{path} is not served"),
                        None,
                    )),
                    Vec::new(),
                );
            }
        };
        match result {
            Ok(op) => {
                if let Some(key) = idempotency {
                    st.idempotency
                        .insert((path.to_string(), key.to_string()), op.id.clone());
                }
                // With no duration configured, the operation is done at once.
                let mut effects = Vec::new();
                let op = if self.options.op_duration.is_zero() {
                    match self.poll(&mut st, &op.id) {
                        Ok((op, done)) => {
                            effects.extend(done);
                            op
                        }
                        Err(s) => return (error(&s), effects),
                    }
                } else {
                    op
                };
                (ok(&op), effects)
            }
            Err(s) => (error(&s), Vec::new()),
        }
    }

    /// Finishes every operation whose time has come; returns what their
    /// finish does outside the state.
    fn sweep(&self) -> Vec<Done> {
        let mut st = self.lock();
        let now = Instant::now();
        let due: Vec<String> = st
            .operations
            .iter()
            .filter(|(_, op)| op.op.status.is_none() && op.due <= now)
            .map(|(id, _)| id.clone())
            .collect();
        due.iter()
            .filter_map(|id| self.poll(&mut st, id).ok().and_then(|(_, d)| d))
            .collect()
    }

    fn page(&self, asked: i64) -> usize {
        if asked > 0 {
            (asked as usize).min(self.options.page_size.max(1))
        } else {
            self.options.page_size.max(1)
        }
    }

    fn id(st: &mut State, kind: &str) -> String {
        st.next_id += 1;
        format!("{kind}-e00emu{:012}", st.next_id)
    }

    fn start(&self, st: &mut State, resource_id: &str, what: &str, done: Done) -> proto::Operation {
        let op = proto::Operation {
            id: Self::id(st, "operation"),
            description: what.into(),
            created_at: Some(timestamp()),
            finished_at: None,
            resource_id: resource_id.into(),
            status: None,
        };
        st.operations.insert(
            op.id.clone(),
            Op {
                op: op.clone(),
                due: Instant::now() + self.options.op_duration,
                done,
            },
        );
        op
    }

    /// One poll: the operation as it stands, finishing it when its time has
    /// come; returns what the finish does outside the state.
    fn poll(
        &self,
        st: &mut State,
        id: &str,
    ) -> Result<(proto::Operation, Option<Done>), proto::Status> {
        let op = st
            .operations
            .get_mut(id)
            .ok_or_else(|| not_found("operation", id))?;
        if op.op.status.is_some() {
            return Ok((op.op.clone(), None));
        }
        if Instant::now() < op.due {
            return Ok((op.op.clone(), None));
        }
        let done = op.done.clone();
        op.op.finished_at = Some(timestamp());
        op.op.status = Some(match &done {
            Done::Fail(s) => s.clone(),
            _ => proto::Status::default(),
        });
        let finished = op.op.clone();
        let external = match &done {
            Done::DiskReady | Done::DiskDeleted(_) | Done::Fail(_) => None,
            _ => Some(done.clone()),
        };
        match done {
            Done::DiskReady => {}
            Done::DiskDeleted(d) => {
                st.disks.remove(&d);
            }
            Done::InstanceRunning(i) => {
                if let Some(v) = st.instances.get_mut(&i)
                    && let Some(s) = v.instance.status.as_mut()
                {
                    s.state = state::RUNNING;
                }
            }
            Done::InstanceDeleted(i) => {
                st.instances.remove(&i);
            }
            Done::Fail(_) => {}
        }
        Ok((finished, external))
    }

    fn create_disk(
        &self,
        st: &mut State,
        r: proto::CreateDiskRequest,
    ) -> Result<proto::Operation, proto::Status> {
        let meta = r.metadata.ok_or_else(|| invalid("metadata is required"))?;
        let spec = r.spec.ok_or_else(|| invalid("spec is required"))?;
        if meta.parent_id.is_empty() || meta.name.is_empty() {
            return Err(invalid("metadata.parent_id and metadata.name are required"));
        }
        if spec.size_gibibytes.unwrap_or(0) <= 0 {
            return Err(invalid("spec.size_gibibytes must be positive"));
        }
        if spec
            .source_image_family
            .as_ref()
            .is_none_or(|f| f.image_family.is_empty())
        {
            return Err(invalid("spec.source_image_family.image_family is required"));
        }
        if let Some(d) = st.disks.values().find(|d| {
            d.metadata
                .as_ref()
                .is_some_and(|m| m.parent_id == meta.parent_id && m.name == meta.name)
        }) {
            return Err(already_exists(
                d.metadata.as_ref().map(|m| m.id.as_str()).unwrap_or(""),
            ));
        }
        let id = Self::id(st, "computedisk");
        st.disks.insert(
            id.clone(),
            proto::Disk {
                metadata: Some(proto::ResourceMetadata {
                    id: id.clone(),
                    created_at: Some(timestamp()),
                    resource_version: 1,
                    ..meta
                }),
                spec: Some(spec),
            },
        );
        Ok(self.start(st, &id, "create disk", Done::DiskReady))
    }

    fn delete_disk(
        &self,
        st: &mut State,
        r: proto::DeleteDiskRequest,
    ) -> Result<proto::Operation, proto::Status> {
        if !st.disks.contains_key(&r.id) {
            return Err(not_found("disk", &r.id));
        }
        let attached = st.instances.values().any(|v| {
            v.instance
                .spec
                .as_ref()
                .and_then(|s| s.boot_disk.as_ref())
                .and_then(|b| b.existing_disk.as_ref())
                .is_some_and(|d| d.id == r.id)
        });
        if attached {
            return Err(status(
                code::FAILED_PRECONDITION,
                &format!("disk {} is attached to an instance", r.id),
                None,
            ));
        }
        Ok(self.start(st, &r.id, "delete disk", Done::DiskDeleted(r.id.clone())))
    }

    fn create_instance(
        &self,
        st: &mut State,
        r: proto::CreateInstanceRequest,
    ) -> Result<proto::Operation, proto::Status> {
        let meta = r.metadata.ok_or_else(|| invalid("metadata is required"))?;
        let spec = r.spec.ok_or_else(|| invalid("spec is required"))?;
        if meta.parent_id.is_empty() || meta.name.is_empty() {
            return Err(invalid("metadata.parent_id and metadata.name are required"));
        }
        if let Some(v) = st.instances.values().find(|v| {
            v.instance
                .metadata
                .as_ref()
                .is_some_and(|m| m.parent_id == meta.parent_id && m.name == meta.name)
        }) {
            return Err(already_exists(
                v.instance
                    .metadata
                    .as_ref()
                    .map(|m| m.id.as_str())
                    .unwrap_or(""),
            ));
        }
        let res = spec
            .resources
            .clone()
            .ok_or_else(|| invalid("spec.resources is required"))?;
        let preset_name = res.preset.clone().unwrap_or_default();
        let platform = self
            .options
            .platforms
            .iter()
            .find(|p| p.metadata.as_ref().is_some_and(|m| m.name == res.platform))
            .ok_or_else(|| invalid(&format!("unknown platform {}", res.platform)))?;
        let preset = platform
            .spec
            .iter()
            .flat_map(|s| &s.presets)
            .find(|p| p.name == preset_name)
            .and_then(|p| p.resources.clone())
            .ok_or_else(|| invalid(&format!("unknown preset {preset_name} of {}", res.platform)))?;
        if spec.preemptible.is_some()
            && !platform
                .status
                .as_ref()
                .is_some_and(|s| s.allowed_for_preemptibles)
        {
            return Err(invalid(&format!(
                "platform {} does not allow preemptible instances",
                res.platform
            )));
        }
        if spec.network_interfaces.is_empty()
            || spec
                .network_interfaces
                .iter()
                .any(|n| n.subnet_id.is_empty())
        {
            return Err(invalid("spec.network_interfaces needs a subnet_id"));
        }
        if spec.cloud_init_user_data.len() > bootstrap::MAX_USER_DATA {
            return Err(invalid("spec.cloud_init_user_data is over 32768 bytes"));
        }
        let disk_id = spec
            .boot_disk
            .as_ref()
            .and_then(|b| b.existing_disk.as_ref())
            .map(|d| d.id.clone())
            .ok_or_else(|| invalid("spec.boot_disk.existing_disk is required"))?;
        if !st.disks.contains_key(&disk_id) {
            return Err(not_found("disk", &disk_id));
        }
        if st.instances.values().any(|v| {
            v.instance
                .spec
                .as_ref()
                .and_then(|s| s.boot_disk.as_ref())
                .and_then(|b| b.existing_disk.as_ref())
                .is_some_and(|d| d.id == disk_id)
        }) {
            return Err(status(
                code::FAILED_PRECONDITION,
                &format!("disk {disk_id} is already attached"),
                None,
            ));
        }
        // Quota: refused at once, as Nebius does.
        let gpu = preset.gpu_count > 0;
        let units = |p: &proto::PresetResources| {
            if gpu {
                p.gpu_count.max(0) as u64
            } else {
                p.vcpu_count.max(0) as u64
            }
        };
        if let Some(limit) = st.quota.platform_units.get(&res.platform).copied() {
            let used: u64 = st
                .instances
                .values()
                .filter_map(|v| v.instance.spec.as_ref()?.resources.as_ref())
                .filter(|r| r.platform == res.platform)
                .filter_map(|r| self.preset(&r.platform, r.preset.as_deref().unwrap_or("")))
                .map(|p| units(&p))
                .sum();
            if used + units(&preset) > limit {
                return Err(detail_status(
                    code::RESOURCE_EXHAUSTED,
                    "quota_failure",
                    &format!(
                        "{} quota of {} exceeded: {used} in use, {} requested",
                        if gpu { "GPU" } else { "vCPU" },
                        res.platform,
                        units(&preset)
                    ),
                    &res.platform,
                ));
            }
        }
        let id = Self::id(st, "computeinstance");
        // Capacity: the operation fails, as a placement failure does.
        let capacity_left = st.quota.capacity.get_mut(&res.platform);
        let fails = match capacity_left {
            Some(0) => true,
            Some(n) => {
                *n -= 1;
                false
            }
            None => false,
        };
        if fails {
            return Ok(self.start(
                st,
                &id,
                "create instance",
                Done::Fail(detail_status(
                    code::RESOURCE_EXHAUSTED,
                    "not_enough_resources",
                    &format!("not enough {} capacity in the region", res.platform),
                    &res.platform,
                )),
            ));
        }
        st.next_ip += 1;
        let private_ip = format!("10.0.{}.{}", st.next_ip / 250, st.next_ip % 250 + 4);
        let instance = proto::Instance {
            metadata: Some(proto::ResourceMetadata {
                id: id.clone(),
                created_at: Some(timestamp()),
                resource_version: 1,
                ..meta
            }),
            status: Some(proto::InstanceStatus {
                state: state::CREATING,
                network_interfaces: vec![proto::NetworkInterfaceStatus {
                    index: 0,
                    name: "eth0".into(),
                    ip_address: Some(proto::IpAddressStatus {
                        address: format!("{private_ip}/32"),
                        allocation_id: String::new(),
                    }),
                    public_ip_address: None,
                }],
            }),
            spec: Some(spec),
        };
        st.instances.insert(
            id.clone(),
            Vm {
                instance,
                private_ip,
            },
        );
        Ok(self.start(
            st,
            &id,
            "create instance",
            Done::InstanceRunning(id.clone()),
        ))
    }

    fn preset(&self, platform: &str, preset: &str) -> Option<proto::PresetResources> {
        self.options
            .platforms
            .iter()
            .find(|p| p.metadata.as_ref().is_some_and(|m| m.name == platform))?
            .spec
            .as_ref()?
            .presets
            .iter()
            .find(|p| p.name == preset)?
            .resources
            .clone()
    }

    fn delete_instance(
        &self,
        st: &mut State,
        r: proto::DeleteInstanceRequest,
    ) -> Result<proto::Operation, proto::Status> {
        let v = st
            .instances
            .get_mut(&r.id)
            .ok_or_else(|| not_found("instance", &r.id))?;
        if let Some(s) = v.instance.status.as_mut() {
            s.state = state::DELETING;
        }
        Ok(self.start(
            st,
            &r.id,
            "delete instance",
            Done::InstanceDeleted(r.id.clone()),
        ))
    }

    /// What a finished operation does outside: the kubelet registers or the
    /// Node goes.
    async fn apply(&self, done: Done) {
        let Some(k) = self.options.kube.clone() else {
            return;
        };
        match done {
            Done::InstanceRunning(id) => {
                let node = {
                    let st = self.lock();
                    let Some(v) = st.instances.get(&id) else {
                        return;
                    };
                    let spec = v.instance.spec.clone().unwrap_or_default();
                    let res = spec.resources.clone().unwrap_or_default();
                    let disk_gb = spec
                        .boot_disk
                        .as_ref()
                        .and_then(|b| b.existing_disk.as_ref())
                        .and_then(|d| st.disks.get(&d.id))
                        .and_then(|d| d.spec.as_ref()?.size_gibibytes)
                        .unwrap_or(128);
                    // A kubelet only reaches the API server its bootstrap
                    // kubeconfig names, with the CA it trusts.
                    match bootstrap::cluster_of(&spec.cloud_init_user_data) {
                        Some((server, ca))
                            if server.trim_end_matches('/') == k.endpoint.trim_end_matches('/')
                                && ca.trim() == String::from_utf8_lossy(&k.ca_pem).trim() => {}
                        other => {
                            eprintln!(
                                "nebius-emulator: {id}: cloud-init does not join {} ({:?}); no Node",
                                k.endpoint,
                                other.map(|(s, _)| s)
                            );
                            return;
                        }
                    }
                    self.preset(&res.platform, res.preset.as_deref().unwrap_or(""))
                        .and_then(|p| {
                            kubelet::node(
                                &id,
                                &spec.cloud_init_user_data,
                                &p,
                                disk_gb,
                                &v.private_ip,
                            )
                        })
                };
                match node {
                    Some(n) => {
                        if let Err(e) = self.kube(&k, "POST", "/api/v1/nodes", Some(&n)).await {
                            eprintln!("nebius-emulator: registering the Node of {id}: {e:#}");
                        }
                    }
                    None => eprintln!("nebius-emulator: {id}: cloud-init describes no kubelet"),
                }
            }
            Done::InstanceDeleted(id) => {
                let path = format!("/api/v1/nodes/{}", kubelet::node_name(&id));
                if let Err(e) = self.kube(&k, "DELETE", &path, None).await {
                    eprintln!("nebius-emulator: deleting the Node of {id}: {e:#}");
                }
            }
            _ => {}
        }
    }

    async fn kube(
        &self,
        k: &Kube,
        method: &str,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> anyhow::Result<()> {
        let url = format!("{}{path}", k.endpoint.trim_end_matches('/'));
        let mut req = self
            .http
            .request(method.parse()?, url)
            .bearer_auth(&k.token);
        if let Some(b) = body {
            req = req.json(b);
        }
        let r = req.send().await?;
        let s = r.status();
        if !s.is_success() && s.as_u16() != 404 && s.as_u16() != 409 {
            anyhow::bail!(
                "{method} {path}: {s}: {}",
                r.text().await.unwrap_or_default()
            );
        }
        Ok(())
    }
}

fn named(meta: &Option<proto::ResourceMetadata>, r: &proto::GetByNameRequest) -> bool {
    meta.as_ref()
        .is_some_and(|m| m.parent_id == r.parent_id && m.name == r.name)
}

fn already_exists(id: &str) -> proto::Status {
    status(
        code::ALREADY_EXISTS,
        &format!("resource {id} with this name already exists"),
        Some(proto::ServiceError {
            service: "compute".into(),
            code: "AlreadyExists".into(),
            resource_already_exists: Some(proto::ResourceAlreadyExists {
                resource_id: id.into(),
            }),
            ..Default::default()
        }),
    )
}

/// One page from `offset` (the page token); the next token or "".
fn page<T: Clone>(all: &[T], token: &str, size: usize) -> (Vec<T>, String) {
    let start: usize = token.parse().unwrap_or(0).min(all.len());
    let end = (start + size).min(all.len());
    let next = if end < all.len() {
        end.to_string()
    } else {
        String::new()
    };
    (all[start..end].to_vec(), next)
}

/// The first matching injection, used up by one.
fn take_injection(st: &mut State, short: &str, body: &[u8]) -> Option<proto::Status> {
    let platform = decode::<proto::CreateInstanceRequest>(body)
        .ok()
        .and_then(|r| r.spec?.resources)
        .map(|r| r.platform)
        .unwrap_or_default();
    let i = st.injections.iter_mut().find(|i| {
        i.count > 0 && i.method == short && (i.platform.is_empty() || i.platform == platform)
    })?;
    i.count -= 1;
    let s = detail_status(
        i.code,
        &i.detail,
        &format!("injected {} on {short}", i.detail),
        if platform.is_empty() {
            "compute"
        } else {
            &platform
        },
    );
    st.injections.retain(|i| i.count > 0);
    Some(s)
}
