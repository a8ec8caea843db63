//! An ARM emulator for the Azure provider: enough of Microsoft.Compute and
//! Microsoft.Network (NICs, VMs, VM lists with nextLink, Resource SKUs, usages,
//! async operations), the Retail Prices API and the workload-identity token
//! exchange, with the real paths, api-versions and error bodies. Quotas,
//! capacity failures and one-shot error injections are set on the command
//! line or through `/admin/*`.
//!
//! Capacity reservation groups are served (`reservations`), and a spot VM
//! can be evicted on demand with Azure's notice (`eviction`).
//!
//! A VM that finishes creating plays its own kubelet: it decodes the
//! customData the plugin wrote and registers the Node it describes in the
//! Kubernetes API server (kwok keeps it Ready); deleting the VM deletes it.
//!
//! With `tls` it serves HTTPS with a CA of its own (`ca_pem`); 429 and 5xx
//! answers with Retry-After are injected with `Fault`s. It also plays the
//! node's cilium agent: once the controller has registered the Node, the
//! `node.cilium.io/agent-not-ready` startup taint is removed.
//!
//! Architecture Invariant: the SKU table and the kubelet-flag parser are the
//! plugin's own (`karpenter_plugin_azure::{catalog, bootstrap}`), so the
//! emulator and the plugin cannot disagree on sizes.

use bytes::Bytes;
use emulator_chaos::Kind;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use karpenter_plugin_azure::catalog::{self, Prices, Sku};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};

pub mod errors;
mod eviction;
mod faults;
pub mod reservations;
mod tls;
pub use faults::Fault;

pub const COMPUTE_API: &str = "2024-07-01";
pub const NETWORK_API: &str = "2024-05-01";
pub const SKUS_API: &str = "2021-07-01";

/// Where Nodes are registered.
#[derive(Clone, Debug)]
pub struct Kube {
    pub endpoint: String,
    pub ca_pem: Vec<u8>,
    pub token: String,
}

#[derive(Clone, Debug, Default)]
pub struct Options {
    pub location: String,
    /// Require `Authorization: Bearer <a token this emulator issued>`.
    pub require_auth: bool,
    /// Polls of an async operation answered InProgress before it completes.
    pub op_polls: u32,
    pub page_size: usize,
    pub kube: Option<Kube>,
    pub quota: Quota,
    pub injections: Vec<Injection>,
    /// Serve HTTPS with a CA made at start (see `Emulator::ca_pem`).
    pub tls: bool,
    /// Share of ARM calls failed at random (see `emulator_chaos`), and the
    /// seed of the draw.
    pub chaos_rate: f64,
    pub chaos_seed: u64,
}

#[derive(Clone, Debug, Default)]
pub struct Quota {
    pub regional_cores: Option<u64>,
    pub low_priority_cores: Option<u64>,
    /// ARM family ("standardDSv5Family") -> cores.
    pub family_cores: BTreeMap<String, u64>,
}

/// Fail the next `count` creates that match with `code`: a VM's (in its
/// async operation, as Azure reports allocation failures, or refused at
/// once with `status`) or a NIC's (refused at once). A code ARM is known to
/// answer a create with (`errors::known`) gets ARM's message, status and
/// resource unless the injection names its own.
#[derive(Clone, Debug, Default)]
pub struct Injection {
    pub code: String,
    pub message: Option<String>,
    /// Zone number ("1"); None matches any, "" matches regional only. A
    /// NIC has no zone: NIC injections match any.
    pub zone: Option<String>,
    pub vm_size: Option<String>,
    pub resource: Option<errors::Resource>,
    pub status: Option<u16>,
    pub count: u32,
}

impl Injection {
    /// `CODE[:ZONE[:SIZE]]`, e.g. `ZonalAllocationFailed:1`.
    pub fn parse(s: &str) -> Option<Injection> {
        let mut p = s.split(':');
        let code = p.next().filter(|c| !c.is_empty())?.to_string();
        let zone = p.next().filter(|z| !z.is_empty()).map(str::to_string);
        let vm_size = p.next().filter(|z| !z.is_empty()).map(str::to_string);
        Some(Injection {
            code,
            zone,
            vm_size,
            count: 1,
            ..Injection::default()
        })
    }

    fn target(&self) -> errors::Resource {
        let empty = errors::Context {
            location: "",
            vm_size: "",
            id: "",
            image: "",
            subnet: "",
        };
        self.resource
            .or(errors::known(&self.code, &empty).map(|k| k.resource))
            .unwrap_or(errors::Resource::Vm)
    }

    /// How this injection answers, in ARM's words where it knows the code.
    fn answer(&self, c: &errors::Context) -> (Option<u16>, String) {
        let known = errors::known(&self.code, c);
        let status = self.status.or(known.as_ref().and_then(|k| k.status));
        let message = self
            .message
            .clone()
            .or(known.map(|k| k.message))
            .unwrap_or_else(|| format!("Injected {} by the emulator.", self.code));
        (status, message)
    }
}

/// An async operation. It finishes after `op_polls` polls or, polled or
/// not, once `due` passes (a VM boots whether or not anyone watches), and is
/// still answered afterwards, as ARM keeps finished operations.
struct Operation {
    polls_left: u32,
    due: std::time::Instant,
    error: Option<Value>,
    on_done: Done,
    /// The final answer, once finished.
    result: Option<Value>,
}

/// How long an operation runs when nobody polls it.
/// The limit the usages API lists for a quota the emulator does not enforce.
const UNSET_LIMIT: u64 = 10_000;
const OPERATION_TIME: std::time::Duration = std::time::Duration::from_secs(2);

/// What a finished operation does outside ARM.
enum Effect {
    None,
    Register(Value),
    Deregister(String),
}

enum Done {
    Nothing,
    VmCreated(String),
    VmDeleted(String, Option<String>),
    NicDeleted(String),
}

#[derive(Default)]
struct State {
    vms: BTreeMap<String, Value>,
    nics: BTreeMap<String, Value>,
    ops: BTreeMap<String, Operation>,
    tokens: Vec<String>,
    next_id: u64,
    quota: Quota,
    injections: Vec<Injection>,
    faults: Vec<Fault>,
    /// Requests seen, "METHOD path", for tests.
    log: Vec<String>,
    /// VM creates refused for quota.
    quota_refusals: u64,
    groups: reservations::Groups,
    evictions: Vec<eviction::Eviction>,
    /// Spot VMs evicted so far.
    evicted: u64,
}

pub struct Emulator {
    options: Options,
    /// Random faults on ARM calls; none unless a rate is set.
    pub chaos: emulator_chaos::Chaos,
    state: Mutex<State>,
    skus: Vec<Sku>,
    http: reqwest::Client,
    /// The CA's PEM once serving HTTPS.
    ca_pem: OnceLock<String>,
}

type Reply = Response<Full<Bytes>>;

fn reply(status: StatusCode, body: Value) -> Reply {
    let mut r = Response::new(Full::new(Bytes::from(body.to_string())));
    *r.status_mut() = status;
    r.headers_mut().insert(
        "content-type",
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}

fn arm_error(status: StatusCode, code: &str, message: &str) -> Reply {
    reply(status, json!({"error": {"code": code, "message": message}}))
}

/// An injected error refusing a PUT at once.
fn refusal(status: u16, code: &str, message: &str) -> Reply {
    reply(
        StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST),
        errors::body(code, message),
    )
}

/// The first injection for a create of `resource` in `zone` of `size`,
/// counted down.
fn take_injection(
    st: &mut State,
    resource: errors::Resource,
    zone: &str,
    size: &str,
) -> Option<Injection> {
    let pos = st.injections.iter().position(|i| {
        i.count > 0
            && i.target() == resource
            && (resource == errors::Resource::Nic
                || (i.zone.as_deref().is_none_or(|z| z == zone)
                    && i.vm_size
                        .as_deref()
                        .is_none_or(|s| s.eq_ignore_ascii_case(size))))
    })?;
    let inj = &mut st.injections[pos];
    inj.count -= 1;
    let taken = inj.clone();
    if inj.count == 0 {
        st.injections.remove(pos);
    }
    Some(taken)
}

fn query(uri: &hyper::Uri, key: &str) -> Option<String> {
    uri.query()?.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == key).then(|| decode(v))
    })
}

fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                match hex {
                    Some(v) => {
                        out.push(v);
                        i += 3;
                        continue;
                    }
                    None => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl Emulator {
    pub fn new(options: Options) -> anyhow::Result<Arc<Emulator>> {
        let mut builder = reqwest::Client::builder();
        if let Some(k) = &options.kube {
            builder = builder.add_root_certificate(reqwest::Certificate::from_pem(&k.ca_pem)?);
        }
        let skus = catalog::embedded_skus(&options.location);
        let state = State {
            quota: options.quota.clone(),
            injections: options.injections.clone(),
            ..State::default()
        };
        Ok(Arc::new(Emulator {
            chaos: emulator_chaos::Chaos::new(options.chaos_rate, options.chaos_seed),
            options,
            state: Mutex::new(state),
            skus,
            http: builder.build()?,
            ca_pem: OnceLock::new(),
        }))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Serves on 127.0.0.1:`port` (0: any) until the task is dropped.
    pub async fn serve(
        self: Arc<Self>,
        port: u16,
    ) -> anyhow::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
        let addr = listener.local_addr()?;
        let acceptor = if self.options.tls {
            let (acceptor, ca) = tls::acceptor()?;
            let _ = self.ca_pem.set(ca);
            Some(acceptor)
        } else {
            None
        };
        let ticker = Arc::downgrade(&self);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(std::time::Duration::from_millis(250)).await;
                match ticker.upgrade() {
                    Some(e) => e.sweep().await,
                    None => break,
                }
            }
        });
        let handle = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let me = self.clone();
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let me = me.clone();
                        async move { Ok::<_, std::convert::Infallible>(me.handle(req).await) }
                    });
                    let http = hyper::server::conn::http1::Builder::new();
                    let _ = match acceptor {
                        Some(a) => match a.accept(stream).await {
                            Ok(tls) => {
                                http.serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                                    .await
                            }
                            Err(_) => return,
                        },
                        None => {
                            http.serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                                .await
                        }
                    };
                });
            }
        });
        Ok((addr, handle))
    }

    /// The PEM of the CA clients must trust, when serving HTTPS.
    pub fn ca_pem(&self) -> Option<&str> {
        self.ca_pem.get().map(String::as_str)
    }

    /// `https` or `http`, for the URLs the emulator hands out.
    fn scheme(&self) -> &'static str {
        if self.options.tls { "https" } else { "http" }
    }

    /// ARM answers the next matching requests with this fault.
    pub fn fault(&self, f: Fault) {
        self.lock().faults.push(f);
    }

    /// Clears every pending fault.
    pub fn clear_faults(&self) {
        self.lock().faults.clear();
    }

    /// Names of the VMs and NICs, lower-case `rg/name`.
    pub fn vms(&self) -> Vec<String> {
        self.lock().vms.keys().cloned().collect()
    }

    pub fn nics(&self) -> Vec<String> {
        self.lock().nics.keys().cloned().collect()
    }

    pub fn requests(&self) -> Vec<String> {
        self.lock().log.clone()
    }

    pub fn inject(&self, i: Injection) {
        self.lock().injections.push(i);
    }

    pub fn set_quota(&self, q: Quota) {
        self.lock().quota = q;
    }

    /// Starts the eviction of spot VM `vm` (its name): the Node hears of it
    /// at once, the VM goes `notice_seconds` later.
    pub fn evict(&self, vm: &str, notice_seconds: i64) -> Result<(), String> {
        let mut st = self.lock();
        let Some((key, v)) = st
            .vms
            .iter()
            .find(|(_, v)| v.get("name").and_then(Value::as_str) == Some(vm))
        else {
            return Err(format!("no VM {vm}"));
        };
        if v.pointer("/properties/priority").and_then(Value::as_str) != Some("Spot") {
            return Err(format!("VM {vm} is not a spot VM"));
        }
        let not_before = jiff::Timestamp::now()
            .checked_add(jiff::SignedDuration::from_secs(notice_seconds.max(0)))
            .map_err(|e| e.to_string())?;
        let e = eviction::Eviction {
            vm_key: key.clone(),
            node: vm.to_string(),
            not_before,
            event_id: format!("00000000-0000-0000-0002-{:012}", st.next_id),
            announced: false,
        };
        st.next_id += 1;
        st.evictions.push(e);
        Ok(())
    }

    /// Announces evictions and carries out those whose time has come.
    async fn sweep_evictions(&self) {
        let (announce, due): (Vec<eviction::Eviction>, Vec<String>) = {
            let mut st = self.lock();
            let now = jiff::Timestamp::now();
            let mut announce = Vec::new();
            for e in st.evictions.iter_mut().filter(|e| !e.announced) {
                e.announced = true;
                announce.push(e.clone());
            }
            let (due, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut st.evictions)
                .into_iter()
                .partition(|e| e.not_before <= now);
            st.evictions = waiting;
            let mut gone = Vec::new();
            for e in due {
                if let Some(vm) = st.vms.remove(&e.vm_key) {
                    st.evicted += 1;
                    if let Some(nic) = vm
                        .pointer("/properties/networkProfile/networkInterfaces/0/id")
                        .and_then(Value::as_str)
                    {
                        let nic = nic_key(nic);
                        st.nics.remove(&nic);
                    }
                    gone.push(e.node);
                }
            }
            (announce, gone)
        };
        if let Some(kube) = &self.options.kube {
            for e in &announce {
                if let Err(err) = eviction::announce(&self.http, kube, e).await {
                    eprintln!("azure-emulator: eviction notice for {}: {err:#}", e.node);
                }
            }
        }
        for node in due {
            self.apply(Effect::Deregister(node)).await;
        }
    }

    /// Adds (or replaces) a capacity reservation group.
    pub fn set_group(&self, g: reservations::Group) {
        self.lock().groups.insert(g.id.to_ascii_lowercase(), g);
    }

    async fn handle(&self, req: Request<Incoming>) -> Reply {
        let (parts, body) = req.into_parts();
        let body = match body.collect().await {
            Ok(b) => b.to_bytes(),
            Err(e) => return arm_error(StatusCode::BAD_REQUEST, "InvalidRequest", &e.to_string()),
        };
        let path = parts.uri.path().to_string();
        let host = parts
            .headers
            .get("host")
            .and_then(|h| h.to_str().ok())
            .unwrap_or("127.0.0.1")
            .to_string();
        self.lock().log.push(format!("{} {path}", parts.method));
        let segs: Vec<&str> = path.trim_matches('/').split('/').collect();

        // Token exchange: POST /<tenant>/oauth2/v2.0/token
        if parts.method == Method::POST
            && segs.len() == 4
            && segs[1] == "oauth2"
            && segs[3] == "token"
        {
            let form = String::from_utf8_lossy(&body).to_string();
            if !form.contains("client_assertion=")
                && !form.contains("grant_type=client_credentials")
            {
                return reply(
                    StatusCode::BAD_REQUEST,
                    json!({"error": "invalid_request", "error_description": "client_assertion missing"}),
                );
            }
            let mut st = self.lock();
            st.next_id += 1;
            let token = format!("emulator-token-{}", st.next_id);
            st.tokens.push(token.clone());
            return reply(
                StatusCode::OK,
                json!({"access_token": token, "expires_in": 3599, "ext_expires_in": 3599, "token_type": "Bearer"}),
            );
        }
        if segs.first() == Some(&"admin") {
            return self.admin(&parts.method, &segs, &body);
        }
        if segs.first() == Some(&"api") && segs.get(1) == Some(&"retail") {
            return self.prices(&parts.uri);
        }
        if let Some(f) = self.take_fault(parts.method.as_str(), &path) {
            let mut r = reply(
                StatusCode::from_u16(f.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                f.body(),
            );
            if let Some(secs) = f.retry_after
                && let Ok(v) = hyper::header::HeaderValue::from_str(&secs.to_string())
            {
                r.headers_mut().insert("retry-after", v);
            }
            return r;
        }
        let create =
            parts.method == Method::PUT && path.to_ascii_lowercase().contains("/virtualmachines/");
        match self.chaos.roll(create) {
            None => self.arm(&parts, &body, &path, &host).await,
            Some(Kind::Capacity) => {
                // The create is accepted; its operation fails as a placement does.
                self.inject(Injection {
                    code: "ZonalAllocationFailed".into(),
                    message: Some("Allocation failed. We do not have sufficient capacity for the requested VM size in this region. (injected by the emulator's chaos)".into()),
                    resource: Some(errors::Resource::Vm),
                    count: 1,
                    ..Injection::default()
                });
                self.arm(&parts, &body, &path, &host).await
            }
            Some(Kind::Timeout) => {
                let _lost = self.arm(&parts, &body, &path, &host).await;
                tokio::time::sleep(emulator_chaos::TIMEOUT_DELAY).await;
                arm_error(
                    StatusCode::GATEWAY_TIMEOUT,
                    "GatewayTimeout",
                    "The gateway did not receive a response from 'Microsoft.Compute' within the specified time period.",
                )
            }
            Some(kind) => {
                let status = match kind {
                    Kind::Throttled => 429,
                    Kind::Internal => 500,
                    _ => 503,
                };
                let f = Fault {
                    status,
                    retry_after: Some(1),
                    method: None,
                    path: None,
                    count: 1,
                };
                let mut r = reply(
                    StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                    f.body(),
                );
                r.headers_mut()
                    .insert("retry-after", hyper::header::HeaderValue::from_static("1"));
                r
            }
        }
    }

    /// ARM itself: authentication, then the resource the path names.
    async fn arm(
        &self,
        parts: &hyper::http::request::Parts,
        body: &Bytes,
        path: &str,
        host: &str,
    ) -> Reply {
        let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
        if self.options.require_auth {
            let auth = parts
                .headers
                .get("authorization")
                .and_then(|h| h.to_str().ok())
                .unwrap_or_default();
            let ok = auth
                .strip_prefix("Bearer ")
                .is_some_and(|t| self.lock().tokens.iter().any(|x| x == t));
            if !ok {
                return arm_error(
                    StatusCode::UNAUTHORIZED,
                    "AuthenticationFailed",
                    "Authentication failed. The 'Authorization' header is missing or invalid.",
                );
            }
        }
        let api = query(&parts.uri, "api-version").unwrap_or_default();
        let lower: Vec<String> = segs.iter().map(|s| s.to_ascii_lowercase()).collect();
        let l: Vec<&str> = lower.iter().map(String::as_str).collect();
        match l.as_slice() {
            ["subscriptions", _, "providers", "microsoft.compute", "skus"] => {
                if api != SKUS_API {
                    return bad_api(&api);
                }
                self.skus_page()
            }
            [
                "subscriptions",
                _,
                "providers",
                "microsoft.compute",
                "locations",
                location,
                "usages",
            ] => {
                if api != COMPUTE_API {
                    return bad_api(&api);
                }
                self.usages(location)
            }
            [
                "subscriptions",
                _,
                "providers",
                "microsoft.compute",
                "locations",
                _,
                "operations",
                id,
            ] => self.operation(id).await,
            [
                "subscriptions",
                _,
                "resourcegroups",
                rg,
                "providers",
                "microsoft.compute",
                "virtualmachines",
            ] => {
                if api != COMPUTE_API {
                    return bad_api(&api);
                }
                let skip = query(&parts.uri, "$skiptoken")
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0);
                self.list(host, path, rg, skip, true)
            }
            [
                "subscriptions",
                sub,
                "resourcegroups",
                rg,
                "providers",
                "microsoft.compute",
                "virtualmachines",
                name,
            ] => {
                if api != COMPUTE_API {
                    return bad_api(&api);
                }
                let key = format!("{rg}/{name}");
                let id = format!(
                    "/subscriptions/{}/resourceGroups/{}/providers/Microsoft.Compute/virtualMachines/{}",
                    segs[1], segs[3], segs[7]
                );
                match parts.method {
                    Method::GET => self.get(&key, true),
                    Method::PUT => self.put_vm(host, sub, &key, &id, segs[7], body),
                    Method::DELETE => self.delete_vm(host, sub, &key),
                    _ => arm_error(
                        StatusCode::METHOD_NOT_ALLOWED,
                        "MethodNotAllowed",
                        "method not allowed",
                    ),
                }
            }
            [
                "subscriptions",
                _,
                "resourcegroups",
                rg,
                "providers",
                "microsoft.compute",
                "capacityreservationgroups",
                name,
                rest @ ..,
            ] if rest.len() <= 1 && parts.method == Method::GET => {
                if api != COMPUTE_API {
                    return bad_api(&api);
                }
                let id = reservations::group_id(segs[1], segs[3], segs[7]).to_ascii_lowercase();
                let st = self.lock();
                let Some(group) = st.groups.get(&id) else {
                    return arm_error(
                        StatusCode::NOT_FOUND,
                        "ResourceNotFound",
                        &format!(
                            "The Resource 'Microsoft.Compute/capacityReservationGroups/{name}' under resource group '{rg}' was not found."
                        ),
                    );
                };
                match rest {
                    [] => {
                        let expand = query(&parts.uri, "$expand")
                            .is_some_and(|e| e.eq_ignore_ascii_case("instanceView"));
                        reply(StatusCode::OK, group.to_json(st.vms.values(), expand))
                    }
                    ["capacityreservations"] => reply(StatusCode::OK, group.members_json()),
                    _ => arm_error(
                        StatusCode::NOT_FOUND,
                        "InvalidResourceType",
                        &format!("The resource type could not be found: {path}"),
                    ),
                }
            }
            [
                "subscriptions",
                _,
                "resourcegroups",
                rg,
                "providers",
                "microsoft.network",
                "networkinterfaces",
            ] => {
                if api != NETWORK_API {
                    return bad_api(&api);
                }
                let skip = query(&parts.uri, "$skiptoken")
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0);
                self.list(host, path, rg, skip, false)
            }
            [
                "subscriptions",
                sub,
                "resourcegroups",
                rg,
                "providers",
                "microsoft.network",
                "networkinterfaces",
                name,
            ] => {
                if api != NETWORK_API {
                    return bad_api(&api);
                }
                let key = format!("{rg}/{name}");
                let id = format!(
                    "/subscriptions/{}/resourceGroups/{}/providers/Microsoft.Network/networkInterfaces/{}",
                    segs[1], segs[3], segs[7]
                );
                match parts.method {
                    Method::GET => self.get(&key, false),
                    Method::PUT => self.put_nic(host, sub, &key, &id, segs[7], body),
                    Method::DELETE => self.delete_nic(host, sub, &key),
                    _ => arm_error(
                        StatusCode::METHOD_NOT_ALLOWED,
                        "MethodNotAllowed",
                        "method not allowed",
                    ),
                }
            }
            _ => arm_error(
                StatusCode::NOT_FOUND,
                "InvalidResourceType",
                &format!("The resource type could not be found: {path}"),
            ),
        }
    }

    /// The first pending fault for this request, counted down.
    fn take_fault(&self, method: &str, path: &str) -> Option<Fault> {
        let mut st = self.lock();
        let pos = st.faults.iter().position(|f| f.matches(method, path))?;
        let f = &mut st.faults[pos];
        if f.count != u32::MAX {
            f.count -= 1;
        }
        let out = f.clone();
        if f.count == 0 {
            st.faults.remove(pos);
        }
        Some(out)
    }

    fn admin(&self, method: &Method, segs: &[&str], body: &[u8]) -> Reply {
        let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        match (method, segs.get(1).copied()) {
            (&Method::POST, Some("inject")) => {
                let Some(code) = v.get("code").and_then(Value::as_str) else {
                    return arm_error(
                        StatusCode::BAD_REQUEST,
                        "InvalidRequest",
                        "code is required",
                    );
                };
                let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
                let resource = match s("resource").as_deref().map(errors::Resource::parse) {
                    Some(None) => {
                        return arm_error(
                            StatusCode::BAD_REQUEST,
                            "InvalidRequest",
                            "resource is vm or nic",
                        );
                    }
                    Some(r) => r,
                    None => None,
                };
                self.inject(Injection {
                    code: code.to_string(),
                    message: s("message"),
                    zone: s("zone"),
                    vm_size: s("vmSize"),
                    resource,
                    status: v
                        .get("status")
                        .and_then(Value::as_u64)
                        .and_then(|n| u16::try_from(n).ok()),
                    count: v.get("count").and_then(Value::as_u64).unwrap_or(1) as u32,
                });
                reply(StatusCode::OK, json!({}))
            }
            (&Method::POST, Some("fault")) => match Fault::from_json(&v) {
                Some(f) => {
                    self.fault(f);
                    reply(StatusCode::OK, json!({}))
                }
                None => arm_error(
                    StatusCode::BAD_REQUEST,
                    "InvalidRequest",
                    "status is required",
                ),
            },
            (&Method::DELETE, Some("fault")) => {
                self.clear_faults();
                reply(StatusCode::OK, json!({}))
            }
            (&Method::POST, Some("quota")) => {
                let n = |k: &str| v.get(k).and_then(Value::as_u64);
                let family_cores = v
                    .get("familyCores")
                    .and_then(Value::as_object)
                    .map(|m| {
                        m.iter()
                            .filter_map(|(k, x)| Some((k.clone(), x.as_u64()?)))
                            .collect()
                    })
                    .unwrap_or_default();
                self.set_quota(Quota {
                    regional_cores: n("regionalCores"),
                    low_priority_cores: n("lowPriorityCores"),
                    family_cores,
                });
                reply(StatusCode::OK, json!({}))
            }
            (&Method::POST, Some("evict")) => {
                let Some(vm) = v.get("vm").and_then(Value::as_str) else {
                    return arm_error(StatusCode::BAD_REQUEST, "InvalidRequest", "vm is required");
                };
                let notice = v.get("noticeSeconds").and_then(Value::as_i64).unwrap_or(30);
                match self.evict(vm, notice) {
                    Ok(()) => reply(StatusCode::OK, json!({})),
                    Err(why) => arm_error(StatusCode::BAD_REQUEST, "InvalidRequest", &why),
                }
            }
            (&Method::POST, Some("reservations")) => {
                match reservations::from_admin(&v, &self.options.location) {
                    Some(g) => {
                        self.set_group(g);
                        reply(StatusCode::OK, json!({}))
                    }
                    None => arm_error(
                        StatusCode::BAD_REQUEST,
                        "InvalidRequest",
                        "resourceGroup, name and reservations [{name, vmSize, zone, capacity}] are required",
                    ),
                }
            }
            (&Method::POST, Some("chaos")) => {
                self.chaos
                    .set_rate(v.get("rate").and_then(Value::as_f64).unwrap_or(0.0));
                reply(StatusCode::OK, json!({}))
            }
            (&Method::GET, Some("state")) => {
                let (injected, calls) = self.chaos.report();
                let st = self.lock();
                let details: Vec<Value> = st
                    .vms
                    .iter()
                    .map(|(k, v)| {
                        json!({
                            "key": k,
                            "size": v.pointer("/properties/hardwareProfile/vmSize"),
                            "zone": v.pointer("/zones/0"),
                            "priority": v.pointer("/properties/priority"),
                            "provisioningState": v.pointer("/properties/provisioningState"),
                            "capacityReservationGroup": reservations::named_by(v),
                        })
                    })
                    .collect();
                reply(
                    StatusCode::OK,
                    json!({"vms": st.vms.keys().collect::<Vec<_>>(), "nics": st.nics.keys().collect::<Vec<_>>(),
                           "vmDetails": details, "injections": st.injections.len(), "faults": st.faults.len(), "requests": st.log,
                           "quotaRefusals": st.quota_refusals, "evicted": st.evicted,
                           "chaos": {"injected": injected, "calls": calls}}),
                )
            }
            _ => arm_error(
                StatusCode::NOT_FOUND,
                "NotFound",
                "admin: inject, fault, chaos, quota, reservations, evict, state",
            ),
        }
    }

    /// The Compute usages API: vCPUs in use and the limit per VM family,
    /// the regional total and spot, one page. A quota not set is listed at
    /// [`UNSET_LIMIT`], as ARM lists every family with its default.
    fn usages(&self, location: &str) -> Reply {
        if !location.eq_ignore_ascii_case(&self.options.location) {
            return reply(StatusCode::OK, json!({"value": []}));
        }
        let st = self.lock();
        let spot =
            |v: &Value| v.pointer("/properties/priority").and_then(Value::as_str) == Some("Spot");
        let usage = |name: &str, localized: &str, used: u64, limit: Option<u64>| {
            json!({
                "unit": "Count",
                "currentValue": used,
                "limit": limit.unwrap_or(UNSET_LIMIT),
                "name": {"value": name, "localizedValue": localized},
            })
        };
        let mut value = vec![
            usage(
                "cores",
                "Total Regional vCPUs",
                self.cores_in_use(&st, |v, _| !spot(v)),
                st.quota.regional_cores,
            ),
            usage(
                "lowPriorityCores",
                "Total Regional Low-priority vCPUs",
                self.cores_in_use(&st, |v, _| spot(v)),
                st.quota.low_priority_cores,
            ),
        ];
        let families: std::collections::BTreeSet<&str> =
            self.skus.iter().map(|s| s.arm_family.as_str()).collect();
        for family in families {
            value.push(usage(
                family,
                &format!("{family} vCPUs"),
                self.cores_in_use(&st, |v, s| s.arm_family == family && !spot(v)),
                st.quota.family_cores.get(family).copied(),
            ));
        }
        reply(StatusCode::OK, json!({ "value": value }))
    }

    fn skus_page(&self) -> Reply {
        let value: Vec<Value> = self
            .skus
            .iter()
            .map(|s| {
                let b = |x: bool| if x { "True" } else { "False" };
                json!({
                    "resourceType": "virtualMachines",
                    "name": s.name,
                    "tier": "Standard",
                    "size": s.name.trim_start_matches("Standard_"),
                    "family": s.arm_family,
                    "locations": [self.options.location],
                    "locationInfo": [{"location": self.options.location, "zones": s.zones}],
                    "capabilities": [
                        {"name": "vCPUs", "value": s.vcpu.to_string()},
                        {"name": "MemoryGB", "value": s.memory_gib.to_string()},
                        {"name": "GPUs", "value": s.gpu_count.to_string()},
                        {"name": "LowPriorityCapable", "value": b(s.low_priority)},
                        {"name": "PremiumIO", "value": b(s.premium_io)},
                        {"name": "AcceleratedNetworkingEnabled", "value": b(s.accelerated_networking)},
                        {"name": "CachedDiskBytes", "value": (s.ephemeral_os_max_gb * 1_000_000_000).to_string()},
                        {"name": "CpuArchitectureType", "value": "x64"},
                        {"name": "HyperVGenerations", "value": "V1,V2"}
                    ],
                    "restrictions": []
                })
            })
            .collect();
        reply(StatusCode::OK, json!({"value": value}))
    }

    fn prices(&self, uri: &hyper::Uri) -> Reply {
        let filter = query(uri, "$filter").unwrap_or_default();
        let region = filter
            .split("armRegionName eq '")
            .nth(1)
            .and_then(|r| r.split('\'').next())
            .unwrap_or(&self.options.location)
            .to_string();
        let p = Prices::embedded(&region);
        let items: Vec<Value> = p
            .on_demand
            .iter()
            .map(|(name, price)| {
                let meter = name.trim_start_matches("Standard_").replace('_', " ");
                json!({"armSkuName": name, "armRegionName": region, "retailPrice": price, "unitPrice": price, "meterName": meter,
                       "productName": "Virtual Machines Series", "serviceName": "Virtual Machines", "type": "Consumption", "currencyCode": "USD"})
            })
            .collect();
        reply(
            StatusCode::OK,
            json!({"BillingCurrency": "USD", "Items": items, "NextPageLink": null, "Count": p.on_demand.len()}),
        )
    }

    fn get(&self, key: &str, vm: bool) -> Reply {
        let st = self.lock();
        let found = if vm {
            st.vms.get(key)
        } else {
            st.nics.get(key)
        };
        match found {
            Some(v) => reply(StatusCode::OK, public(v)),
            None => {
                let what = if vm {
                    "Microsoft.Compute/virtualMachines"
                } else {
                    "Microsoft.Network/networkInterfaces"
                };
                arm_error(
                    StatusCode::NOT_FOUND,
                    "ResourceNotFound",
                    &format!(
                        "The Resource '{what}/{}' was not found.",
                        key.rsplit('/').next().unwrap_or(key)
                    ),
                )
            }
        }
    }

    /// One page of a resource group's VMs (or NICs), with a nextLink.
    fn list(&self, host: &str, path: &str, rg: &str, skip: usize, vms: bool) -> Reply {
        let st = self.lock();
        let page_size = self.options.page_size.max(1);
        let (items, api) = if vms {
            (&st.vms, COMPUTE_API)
        } else {
            (&st.nics, NETWORK_API)
        };
        let all: Vec<&Value> = items
            .iter()
            .filter(|(k, _)| k.starts_with(&format!("{rg}/")))
            .map(|(_, v)| v)
            .collect();
        let page: Vec<Value> = all
            .iter()
            .skip(skip)
            .take(page_size)
            .map(|v| public(v))
            .collect();
        let mut body = json!({"value": page});
        if skip + page_size < all.len() {
            body["nextLink"] = json!(format!(
                "{}://{host}{path}?api-version={api}&$skiptoken={}",
                self.scheme(),
                skip + page_size
            ));
        }
        reply(StatusCode::OK, body)
    }

    fn start_op(
        &self,
        st: &mut State,
        host: &str,
        sub: &str,
        error: Option<Value>,
        on_done: Done,
    ) -> String {
        st.next_id += 1;
        let id = format!("op-{}", st.next_id);
        st.ops.insert(
            id.clone(),
            Operation {
                polls_left: self.options.op_polls,
                due: std::time::Instant::now() + OPERATION_TIME,
                error,
                on_done,
                result: None,
            },
        );
        format!(
            "{}://{host}/subscriptions/{sub}/providers/Microsoft.Compute/locations/{}/operations/{id}?api-version={COMPUTE_API}",
            self.scheme(),
            self.options.location
        )
    }

    fn accepted(status: StatusCode, body: Value, op_url: &str) -> Reply {
        let mut r = reply(status, body);
        let h = r.headers_mut();
        if let Ok(v) = hyper::header::HeaderValue::from_str(op_url) {
            h.insert("azure-asyncoperation", v);
        }
        h.insert("retry-after", hyper::header::HeaderValue::from_static("0"));
        r
    }

    fn put_nic(
        &self,
        host: &str,
        sub: &str,
        key: &str,
        id: &str,
        name: &str,
        body: &[u8],
    ) -> Reply {
        let Ok(mut v) = serde_json::from_slice::<Value>(body) else {
            return arm_error(
                StatusCode::BAD_REQUEST,
                "InvalidRequestFormat",
                "Cannot parse the request.",
            );
        };
        let subnet = v
            .pointer("/properties/ipConfigurations/0/properties/subnet/id")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if subnet.is_empty() {
            return arm_error(
                StatusCode::BAD_REQUEST,
                "InvalidRequestFormat",
                "ipConfigurations[0].subnet.id is required.",
            );
        }
        let mut st = self.lock();
        if !st.nics.contains_key(key)
            && let Some(inj) = take_injection(&mut st, errors::Resource::Nic, "", "")
        {
            let (status, message) = inj.answer(&errors::Context {
                location: &self.options.location,
                vm_size: "",
                id,
                image: "",
                subnet,
            });
            return refusal(status.unwrap_or(400), &inj.code, &message);
        }
        let existed = st.nics.contains_key(key);
        let ip = format!(
            "10.224.{}.{}",
            (st.nics.len() / 250) % 250,
            st.nics.len() % 250 + 4
        );
        v["id"] = json!(id);
        v["name"] = json!(name);
        v["type"] = json!("Microsoft.Network/networkInterfaces");
        v["properties"]["provisioningState"] = json!("Succeeded");
        v["properties"]["ipConfigurations"][0]["properties"]["privateIPAddress"] = json!(ip);
        st.nics.insert(key.to_string(), v.clone());
        let op = self.start_op(&mut st, host, sub, None, Done::Nothing);
        Self::accepted(
            if existed {
                StatusCode::OK
            } else {
                StatusCode::CREATED
            },
            v,
            &op,
        )
    }

    fn delete_nic(&self, host: &str, sub: &str, key: &str) -> Reply {
        let mut st = self.lock();
        if !st.nics.contains_key(key) {
            return Response::builder()
                .status(StatusCode::NO_CONTENT)
                .body(Full::new(Bytes::new()))
                .unwrap_or_else(|_| reply(StatusCode::NO_CONTENT, json!({})));
        }
        let nic_id = st
            .nics
            .get(key)
            .and_then(|n| n.get("id"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_ascii_lowercase();
        let in_use = st.vms.values().any(|vm| {
            vm.pointer("/properties/networkProfile/networkInterfaces/0/id")
                .and_then(Value::as_str)
                .is_some_and(|i| i.eq_ignore_ascii_case(&nic_id))
        });
        if in_use {
            return arm_error(
                StatusCode::BAD_REQUEST,
                "NicInUse",
                &format!(
                    "Network Interface {nic_id} is used by existing resource. In order to delete the network interface, it must be dissociated from the resource."
                ),
            );
        }
        let op = self.start_op(&mut st, host, sub, None, Done::NicDeleted(key.to_string()));
        Self::accepted(StatusCode::ACCEPTED, Value::Null, &op)
    }

    /// vCPUs in use by the VMs `pred` counts, reservations included (a
    /// reservation is a regular VM's cores: `pred` sees an empty body).
    fn cores_in_use(&self, st: &State, pred: impl Fn(&Value, &Sku) -> bool) -> u64 {
        let held = reservations::cores(&st.groups, st.vms.values(), &self.skus, |sku| {
            pred(&json!({}), sku)
        });
        held + st
            .vms
            .values()
            .filter(|v| {
                v.pointer("/properties/provisioningState")
                    .and_then(Value::as_str)
                    != Some("Failed")
                    && !reservations::on_reservation(&st.groups, v)
            })
            .filter_map(|v| {
                let size = v
                    .pointer("/properties/hardwareProfile/vmSize")
                    .and_then(Value::as_str)?;
                let sku = self.skus.iter().find(|s| s.name == size)?;
                pred(v, sku).then_some(sku.vcpu)
            })
            .sum::<u64>()
    }

    fn put_vm(&self, host: &str, sub: &str, key: &str, id: &str, name: &str, body: &[u8]) -> Reply {
        let Ok(mut v) = serde_json::from_slice::<Value>(body) else {
            return arm_error(
                StatusCode::BAD_REQUEST,
                "InvalidRequestFormat",
                "Cannot parse the request.",
            );
        };
        let mut st = self.lock();
        if let Some(existing) = st.vms.get(key) {
            // An update: nothing of interest changes.
            return reply(StatusCode::OK, public(existing));
        }
        let size = v
            .pointer("/properties/hardwareProfile/vmSize")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let Some(sku) = self.skus.iter().find(|s| s.name == size).cloned() else {
            return arm_error(
                StatusCode::CONFLICT,
                "SkuNotAvailable",
                &format!(
                    "The requested VM size for resource 'Following SKUs have failed for Capacity Restrictions: {size}' is currently not available in location '{}'.",
                    self.options.location
                ),
            );
        };
        let nic_id = v
            .pointer("/properties/networkProfile/networkInterfaces/0/id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let nic_key = nic_key(&nic_id);
        if !st.nics.contains_key(&nic_key) {
            return arm_error(
                StatusCode::BAD_REQUEST,
                "InvalidResourceReference",
                &format!("Resource {nic_id} referenced by resource {id} was not found."),
            );
        }
        let custom = v
            .pointer("/properties/osProfile/customData")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if custom.is_empty() || base64_decode(&custom).is_none() {
            return arm_error(
                StatusCode::BAD_REQUEST,
                "InvalidParameter",
                "The value of parameter customData is invalid.",
            );
        }
        let spot = v.pointer("/properties/priority").and_then(Value::as_str) == Some("Spot");
        let zone = v
            .pointer("/zones/0")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if !zone.is_empty() && !sku.zones.contains(&zone) {
            return arm_error(
                StatusCode::CONFLICT,
                "SkuNotAvailable",
                &format!(
                    "The requested VM size {size} is not available in zone {zone} of {}.",
                    self.options.location
                ),
            );
        }
        let mut reserved = false;
        if let Some(group_id) = reservations::named_by(&v) {
            let Some(group) = st.groups.get(&group_id.to_ascii_lowercase()) else {
                return arm_error(
                    StatusCode::BAD_REQUEST,
                    "InvalidResourceReference",
                    &format!("Resource {group_id} referenced by resource {id} was not found."),
                );
            };
            let zone = (!zone.is_empty()).then_some(zone.as_str());
            if group.member_for(&size, zone).is_none() {
                return arm_error(
                    StatusCode::BAD_REQUEST,
                    "InvalidParameter",
                    &format!(
                        "Capacity reservation group '{}' has no capacity reservation for VM size '{size}' in {}.",
                        group.name,
                        zone.map_or("the region".to_string(), |z| format!("zone {z}"))
                    ),
                );
            }
            reserved = reservations::has_room(group, st.vms.values(), &size, zone);
        }
        // Quotas, checked synchronously as ARM does; a VM a reservation
        // has room for uses the reservation's.
        let location = self.options.location.clone();
        let quota = st.quota.clone();
        let exceeded = |what: &str, limit: u64, usage: u64| {
            format!(
                "Operation could not be completed as it results in exceeding approved {what} quota. Additional details - Deployment Model: Resource Manager, Location: {location}, Current Limit: {limit}, Current Usage: {usage}, Additional Required: {}, (Minimum) New Limit Required: {}.",
                sku.vcpu,
                usage + sku.vcpu
            )
        };
        if reserved {
            // The reservation's quota is taken already.
        } else if spot {
            if let Some(limit) = quota.low_priority_cores {
                let used = self.cores_in_use(&st, |v, _| {
                    v.pointer("/properties/priority").and_then(Value::as_str) == Some("Spot")
                });
                if used + sku.vcpu > limit {
                    st.quota_refusals += 1;
                    return arm_error(
                        StatusCode::CONFLICT,
                        "OperationNotAllowed",
                        &exceeded("LowPriorityCores", limit, used),
                    );
                }
            }
        } else {
            if let Some(limit) = quota.family_cores.get(&sku.arm_family) {
                let used = self.cores_in_use(&st, |v, s| {
                    s.arm_family == sku.arm_family
                        && v.pointer("/properties/priority").and_then(Value::as_str) != Some("Spot")
                });
                if used + sku.vcpu > *limit {
                    let what = format!("{} Cores", sku.arm_family);
                    st.quota_refusals += 1;
                    return arm_error(
                        StatusCode::CONFLICT,
                        "OperationNotAllowed",
                        &exceeded(&what, *limit, used),
                    );
                }
            }
            if let Some(limit) = quota.regional_cores {
                let used = self.cores_in_use(&st, |v, _| {
                    v.pointer("/properties/priority").and_then(Value::as_str) != Some("Spot")
                });
                if used + sku.vcpu > limit {
                    st.quota_refusals += 1;
                    return arm_error(
                        StatusCode::CONFLICT,
                        "OperationNotAllowed",
                        &exceeded("Total Regional Cores", limit, used),
                    );
                }
            }
        }
        // One-shot injected failures: refused at once, or the operation fails.
        let mut error = None;
        if let Some(inj) = take_injection(&mut st, errors::Resource::Vm, &zone, &size) {
            let image = v
                .pointer("/properties/storageProfile/imageReference/communityGalleryImageId")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let (status, message) = inj.answer(&errors::Context {
                location: &self.options.location,
                vm_size: &size,
                id,
                image,
                subnet: "",
            });
            if let Some(status) = status {
                return refusal(status, &inj.code, &message);
            }
            error = Some(json!({"code": inj.code, "message": message}));
        }
        v["id"] = json!(id);
        v["name"] = json!(name);
        v["type"] = json!("Microsoft.Compute/virtualMachines");
        v["properties"]["provisioningState"] = json!("Creating");
        v["properties"]["vmId"] = json!(format!("00000000-0000-0000-0000-{:012}", st.next_id + 1));
        // customData is never returned by ARM.
        if let Some(os) = v
            .pointer_mut("/properties/osProfile")
            .and_then(Value::as_object_mut)
        {
            os.remove("customData");
        }
        v["emulator"] = json!({"customData": custom});
        st.vms.insert(key.to_string(), v.clone());
        let op = self.start_op(&mut st, host, sub, error, Done::VmCreated(key.to_string()));
        let mut shown = v;
        if let Some(o) = shown.as_object_mut() {
            o.remove("emulator");
        }
        Self::accepted(StatusCode::CREATED, shown, &op)
    }

    fn delete_vm(&self, host: &str, sub: &str, key: &str) -> Reply {
        let mut st = self.lock();
        let Some(vm) = st.vms.get_mut(key) else {
            return Response::builder()
                .status(StatusCode::NO_CONTENT)
                .body(Full::new(Bytes::new()))
                .unwrap_or_else(|_| reply(StatusCode::NO_CONTENT, json!({})));
        };
        vm["properties"]["provisioningState"] = json!("Deleting");
        let node = vm.get("name").and_then(Value::as_str).map(str::to_string);
        let op = self.start_op(
            &mut st,
            host,
            sub,
            None,
            Done::VmDeleted(key.to_string(), node),
        );
        Self::accepted(StatusCode::ACCEPTED, Value::Null, &op)
    }

    async fn operation(&self, id: &str) -> Reply {
        let finished = {
            let mut st = self.lock();
            let Some(op) = st.ops.get_mut(id) else {
                return arm_error(
                    StatusCode::NOT_FOUND,
                    "NotFound",
                    &format!("operation {id} not found"),
                );
            };
            if let Some(result) = &op.result {
                return reply(StatusCode::OK, result.clone());
            }
            if op.polls_left > 0 {
                op.polls_left -= 1;
                let mut r = reply(StatusCode::OK, json!({"name": id, "status": "InProgress"}));
                r.headers_mut()
                    .insert("retry-after", hyper::header::HeaderValue::from_static("0"));
                return r;
            }
            Self::finish(&mut st, id)
        };
        let Some((body, effect)) = finished else {
            return arm_error(StatusCode::NOT_FOUND, "NotFound", id);
        };
        self.apply(effect).await;
        reply(StatusCode::OK, body)
    }

    /// Finishes every operation whose time has come, polled or not.
    pub async fn sweep(&self) {
        let effects: Vec<Effect> = {
            let mut st = self.lock();
            let now = std::time::Instant::now();
            let due: Vec<String> = st
                .ops
                .iter()
                .filter(|(_, op)| op.result.is_none() && op.due <= now)
                .map(|(id, _)| id.clone())
                .collect();
            due.iter()
                .filter_map(|id| Self::finish(&mut st, id).map(|(_, e)| e))
                .collect()
        };
        for e in effects {
            self.apply(e).await;
        }
        self.sweep_evictions().await;
    }

    /// Marks the operation finished: its final answer, and what its VM's
    /// kubelet does about it.
    fn finish(st: &mut State, id: &str) -> Option<(Value, Effect)> {
        let op = st.ops.get_mut(id)?;
        let failed = op.error.is_some();
        let body = match &op.error {
            Some(e) => json!({"name": id, "status": "Failed", "error": e}),
            None => json!({"name": id, "status": "Succeeded"}),
        };
        op.result = Some(body.clone());
        let on_done = std::mem::replace(&mut op.on_done, Done::Nothing);
        let effect = match on_done {
            Done::VmCreated(key) => match st.vms.get_mut(&key) {
                Some(vm) => {
                    vm["properties"]["provisioningState"] =
                        json!(if failed { "Failed" } else { "Succeeded" });
                    vm["properties"]["timeCreated"] = json!(now_rfc3339());
                    if failed {
                        Effect::None
                    } else {
                        Effect::Register(vm.clone())
                    }
                }
                None => Effect::None,
            },
            Done::VmDeleted(key, node) => {
                st.vms.remove(&key);
                node.map_or(Effect::None, Effect::Deregister)
            }
            Done::NicDeleted(key) => {
                st.nics.remove(&key);
                Effect::None
            }
            Done::Nothing => Effect::None,
        };
        Some((body, effect))
    }

    /// Plays the kubelet: the Node appears when the VM is up, and goes with it.
    async fn apply(&self, effect: Effect) {
        match effect {
            Effect::None => {}
            Effect::Register(vm) => {
                let nic_ip = {
                    let st = self.lock();
                    let nic = vm
                        .pointer("/properties/networkProfile/networkInterfaces/0/id")
                        .and_then(Value::as_str)
                        .map(nic_key);
                    nic.and_then(|k| st.nics.get(&k).cloned()).and_then(|n| {
                        n.pointer("/properties/ipConfigurations/0/properties/privateIPAddress")
                            .and_then(Value::as_str)
                            .map(str::to_string)
                    })
                };
                if let Err(e) = self.register_node(&vm, nic_ip.as_deref()).await {
                    eprintln!(
                        "azure-emulator: registering the node of {}: {e:#}",
                        vm.get("name").and_then(Value::as_str).unwrap_or("?")
                    );
                }
            }
            Effect::Deregister(node) => {
                if let Err(e) = self
                    .kube("DELETE", &format!("/api/v1/nodes/{node}"), None)
                    .await
                {
                    eprintln!("azure-emulator: deleting node {node}: {e:#}");
                }
            }
        }
    }

    async fn kube(&self, method: &str, path: &str, body: Option<&Value>) -> anyhow::Result<()> {
        let Some(k) = &self.options.kube else {
            return Ok(());
        };
        let url = format!("{}{path}", k.endpoint.trim_end_matches('/'));
        let mut req = self
            .http
            .request(method.parse()?, url)
            .bearer_auth(&k.token);
        if let Some(b) = body {
            req = req.json(b);
        }
        let r = req.send().await?;
        let status = r.status();
        if !status.is_success() && status.as_u16() != 404 && status.as_u16() != 409 {
            anyhow::bail!(
                "{method} {path}: {status}: {}",
                r.text().await.unwrap_or_default()
            );
        }
        Ok(())
    }

    /// The Node the VM's kubelet would register, from its customData.
    pub fn node_for(&self, vm: &Value, internal_ip: Option<&str>) -> Option<Value> {
        let custom = vm.pointer("/emulator/customData").and_then(Value::as_str)?;
        let script = String::from_utf8(base64_decode(custom)?).ok()?;
        let flags = karpenter_plugin_azure::bootstrap::kubelet_flags(&script);
        let flag = |k: &str| flags.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        let name = flag("hostname-override")
            .or_else(|| vm.get("name").and_then(Value::as_str).map(str::to_string))?;
        let size = vm
            .pointer("/properties/hardwareProfile/vmSize")
            .and_then(Value::as_str)?;
        let sku = self.skus.iter().find(|s| s.name == size)?;
        let version = script
            .lines()
            .find_map(|l| l.strip_prefix("KUBERNETES_VERSION="))
            .unwrap_or("1.34.2");
        let mut labels = serde_json::Map::new();
        for kv in flag("node-labels")
            .unwrap_or_default()
            .split(',')
            .filter(|s| !s.is_empty())
        {
            if let Some((k, v)) = kv.split_once('=') {
                labels.insert(k.into(), json!(v));
            }
        }
        labels.insert("kubernetes.io/hostname".into(), json!(name));
        labels.insert("type".into(), json!("kwok"));
        let taints: Vec<Value> = flag("register-with-taints")
            .unwrap_or_default()
            .split(',')
            .filter(|s| !s.is_empty())
            .filter_map(|t| {
                let (kv, effect) = t.rsplit_once(':')?;
                let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
                Some(json!({"key": k, "value": v, "effect": effect}))
            })
            .collect();
        // What the kubelet would report: the plugin's capacity model, less
        // --kube-reserved and --eviction-hard.
        let max_pods: u64 = flag("max-pods").and_then(|p| p.parse().ok()).unwrap_or(110);
        let disk_gb = vm
            .pointer("/properties/storageProfile/osDisk/diskSizeGB")
            .and_then(Value::as_u64)
            .unwrap_or(128);
        let memory_mib = catalog::memory_capacity_mib(sku, 0.075);
        let reserved = flag("kube-reserved").unwrap_or_default();
        let part = |k: &str| {
            reserved
                .split(',')
                .find_map(|p| p.strip_prefix(&format!("{k}=")))
                .map(str::to_string)
                .unwrap_or_default()
        };
        let cpu_res: u64 = part("cpu").trim_end_matches('m').parse().unwrap_or(0);
        let mem_res: u64 = part("memory").trim_end_matches("Mi").parse().unwrap_or(0);
        let evict: u64 = flag("eviction-hard")
            .and_then(|e| {
                e.strip_prefix("memory.available<")
                    .map(|m| m.trim_end_matches("Mi").parse().unwrap_or(0))
            })
            .unwrap_or(0);
        let mut capacity = json!({"cpu": sku.vcpu.to_string(), "memory": format!("{memory_mib}Mi"), "pods": max_pods.to_string(), "ephemeral-storage": format!("{disk_gb}G")});
        let mut allocatable = json!({
            "cpu": format!("{}m", (sku.vcpu * 1000).saturating_sub(cpu_res)),
            "memory": format!("{}Mi", memory_mib.saturating_sub(mem_res + evict)),
            "pods": max_pods.to_string(),
            "ephemeral-storage": format!("{disk_gb}G"),
        });
        if sku.gpu_count > 0 {
            capacity["nvidia.com/gpu"] = json!(sku.gpu_count.to_string());
            allocatable["nvidia.com/gpu"] = json!(sku.gpu_count.to_string());
        }
        let mut addresses = vec![json!({"type": "Hostname", "address": name})];
        if let Some(ip) = internal_ip {
            addresses.push(json!({"type": "InternalIP", "address": ip}));
        }
        Some(json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": labels, "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"}},
            "spec": {"providerID": flag("provider-id").unwrap_or_default(), "taints": taints},
            "status": {
                "capacity": capacity,
                "allocatable": allocatable,
                "addresses": addresses,
                "nodeInfo": {"kubeletVersion": format!("v{}", version.trim_start_matches('v')), "architecture": "amd64", "operatingSystem": "linux",
                             "osImage": "Ubuntu 24.04 LTS", "containerRuntimeVersion": "containerd://2.0.4", "kernelVersion": "6.8.0-azure",
                             "kubeProxyVersion": "", "machineID": "", "systemUUID": "", "bootID": ""}
            }
        }))
    }

    async fn register_node(&self, vm: &Value, internal_ip: Option<&str>) -> anyhow::Result<()> {
        let Some(kube) = self.options.kube.clone() else {
            return Ok(());
        };
        let node = self
            .node_for(vm, internal_ip)
            .ok_or_else(|| anyhow::anyhow!("customData does not describe a node"))?;
        self.kube("POST", "/api/v1/nodes", Some(&node)).await?;
        let has_cilium_taint = node
            .pointer("/spec/taints")
            .and_then(Value::as_array)
            .is_some_and(|t| t.iter().any(|t| t["key"] == CILIUM_TAINT));
        if has_cilium_taint {
            let http = self.http.clone();
            let name = node["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            tokio::spawn(async move {
                if let Err(e) = cilium_agent(&http, &kube, &name).await {
                    eprintln!("azure-emulator: cilium agent on {name}: {e:#}");
                }
            });
        }
        Ok(())
    }
}

/// The startup taint AKS's cilium dataplane puts on a node until its agent runs.
pub const CILIUM_TAINT: &str = "node.cilium.io/agent-not-ready";
const UNREGISTERED_TAINT: &str = "karpenter.sh/unregistered";

/// Plays the node's cilium agent: once the controller has registered the
/// Node (its `karpenter.sh/unregistered` taint is gone; registration would
/// put startup taints back), removes the agent-not-ready taint.
async fn cilium_agent(http: &reqwest::Client, kube: &Kube, name: &str) -> anyhow::Result<()> {
    let url = format!(
        "{}/api/v1/nodes/{name}",
        kube.endpoint.trim_end_matches('/')
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(600);
    while std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        let r = http.get(&url).bearer_auth(&kube.token).send().await?;
        if r.status().as_u16() == 404 {
            return Ok(());
        }
        let node: Value = r.error_for_status()?.json().await?;
        let taints = node
            .pointer("/spec/taints")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if taints.iter().any(|t| t["key"] == UNREGISTERED_TAINT) {
            continue;
        }
        let kept: Vec<&Value> = taints.iter().filter(|t| t["key"] != CILIUM_TAINT).collect();
        if kept.len() == taints.len() {
            return Ok(());
        }
        // The resourceVersion makes this a compare-and-swap with the controller.
        let patch = json!({
            "metadata": {"resourceVersion": node["metadata"]["resourceVersion"]},
            "spec": {"taints": kept},
        });
        let r = http
            .patch(&url)
            .bearer_auth(&kube.token)
            .header("content-type", "application/merge-patch+json")
            .body(patch.to_string())
            .send()
            .await?;
        match r.status().as_u16() {
            409 => continue,
            s if (200..300).contains(&s) => return Ok(()),
            s => anyhow::bail!("PATCH node: {s}: {}", r.text().await.unwrap_or_default()),
        }
    }
    anyhow::bail!("the Node was not registered within 10 minutes")
}

/// A resource as ARM shows it (without what the emulator keeps aside).
fn public(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(o) = v.as_object_mut() {
        o.remove("emulator");
    }
    v
}

fn bad_api(api: &str) -> Reply {
    arm_error(
        StatusCode::BAD_REQUEST,
        "InvalidApiVersionParameter",
        &format!("The api-version '{api}' is invalid."),
    )
}

/// `rg/name` (lower case) of a NIC id.
fn nic_key(id: &str) -> String {
    let p: Vec<&str> = id.trim_matches('/').split('/').collect();
    match (p.get(3), p.get(7)) {
        (Some(rg), Some(name)) => {
            format!("{}/{}", rg.to_ascii_lowercase(), name.to_ascii_lowercase())
        }
        _ => String::new(),
    }
}

pub fn base64_decode(s: &str) -> Option<Vec<u8>> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(s.trim())
        .ok()
}

fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}
