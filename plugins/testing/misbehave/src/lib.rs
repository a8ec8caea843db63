//! A provider that misbehaves on purpose. `metadata` always works (the host
//! calls it at load); `get-instance-types` does what the MODE setting says:
//!
//! - `read-file`: reads /etc/hostname; `read-env`: reads HOME; `socket`: opens
//!   a TCP connection; `http-denied`: calls a host not on the allow-list;
//!   `fetch`: GETs the URL setting; `token`: asks the host for a token for
//!   the SCOPE setting; `settings`: lists every setting it sees and reads
//!   the SECRET setting's value as a secret name, then signs with it — each
//!   reports what it got
//!   as an error message;
//! - `loop`: spins forever; `alloc`: allocates 1 GiB; `panic`: panics;
//!   `panic-validate`: panics in `validate-node-class` instead;
//! - `garbage`: returns an instance type with a NaN price and a bad quantity;
//! - `cache-flood`: stores 3,000 cache entries of 1 MiB and reports how many
//!   the host kept (`cache-flood-at-load` also does so in `metadata`);
//! - `body-flood`: streams a 1 GiB request body to the URL setting;
//! - `sleep`: waits 100 ms (or the setting `SLEEP_MS`), then answers as a
//!   healthy plugin;
//! - `slow-after-first`: answers the first call at once and waits 10 s in
//!   every later one;
//! - anything else: one valid instance type.
#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]

use karpenter_plugin_sdk::http::Request;
use karpenter_plugin_sdk::prelude::*;

struct Misbehave;

const FLOOD_ENTRIES: usize = 3_000;

/// Tries to pin 3 GB of host memory in the cache; returns how many entries stuck.
fn flood_cache() -> usize {
    let value = vec![7u8; 1 << 20];
    for i in 0..FLOOD_ENTRIES {
        cache::set(&format!("flood/{i:05}"), &value, 0);
    }
    cache::keys("flood/").len()
}

/// Streams 1 GiB into one request body, 4 KiB a write as wasi:io allows.
fn flood_body(url: &str) -> String {
    use karpenter_plugin_sdk::bindings::wasi::http::outgoing_handler;
    use karpenter_plugin_sdk::bindings::wasi::http::types::{
        Fields, Method, OutgoingBody, OutgoingRequest, Scheme,
    };
    let Some(rest) = url.strip_prefix("http://") else {
        return format!("URL {url:?} is not http://");
    };
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let request = OutgoingRequest::new(Fields::new());
    let _ = request.set_method(&Method::Post);
    let _ = request.set_scheme(Some(&Scheme::Http));
    let _ = request.set_authority(Some(authority));
    let _ = request.set_path_with_query(Some(&format!("/{path}")));
    let Ok(body) = request.body() else {
        return "no body".into();
    };
    let pending = match outgoing_handler::handle(request, None) {
        Ok(p) => p,
        Err(e) => return format!("refused at once: {e:?}"),
    };
    let chunk = [0u8; 4096];
    let mut sent: u64 = 0;
    if let Ok(stream) = body.write() {
        while sent < 1 << 30 {
            if let Err(e) = stream.blocking_write_and_flush(&chunk) {
                drop(stream);
                let _ = OutgoingBody::finish(body, None);
                return format!(
                    "stream closed after {sent} bytes: {e:?}; response {:?}",
                    response(&pending)
                );
            }
            sent += chunk.len() as u64;
        }
    }
    let _ = OutgoingBody::finish(body, None);
    format!("sent {sent} bytes; response {:?}", response(&pending))
}

fn response(
    pending: &karpenter_plugin_sdk::bindings::wasi::http::types::FutureIncomingResponse,
) -> Option<String> {
    pending.subscribe().block();
    pending
        .get()
        .map(|r| format!("{:?}", r.map(|r| r.map(|r| r.status()))))
}

impl Guest for Misbehave {
    fn metadata() -> ProviderMetadata {
        if config::get_setting("MODE").as_deref() == Some("cache-flood-at-load") {
            flood_cache();
        }
        ProviderMetadata {
            name: "misbehave".into(),
            provider_id_schemes: vec!["misbehave".into()],
            node_classes: vec![NodeClassKind {
                group: "test.karpenter.sh".into(),
                version: "v1".into(),
                kind: "MisbehaveNodeClass".into(),
                plural: "misbehavenodeclasses".into(),
                short_names: vec![],
                schema: r#"{"type":"object"}"#.into(),
            }],
        }
    }

    fn validate_node_class(_c: NodeClass) -> Result<NodeClassStatus, Error> {
        if config::get_setting("MODE").as_deref() == Some("panic-validate") {
            panic!("validating: a provider bug");
        }
        Err(fatal("not implemented"))
    }

    fn get_instance_types(_p: NodePool, _c: NodeClass) -> Result<Vec<InstanceType>, Error> {
        let mode = config::get_setting("MODE").unwrap_or_default();
        match mode.as_str() {
            "read-file" => Err(fatal(format!(
                "read /etc/hostname: {:?}",
                std::fs::read_to_string("/etc/hostname")
            ))),
            "read-env" => Err(fatal(format!(
                "HOME={:?}, {} variables visible",
                std::env::var("HOME"),
                std::env::vars().count()
            ))),
            "socket" => Err(fatal(format!(
                "connect: {:?}",
                std::net::TcpStream::connect("127.0.0.1:80").map(|_| ())
            ))),
            "http-denied" => match Request::get("https://example.com/").send() {
                Ok(r) => Ok(vec![one(r.status as f64)]),
                Err(e) => Err(fatal(e.to_string())),
            },
            "fetch" => {
                let url = config::get_setting("URL").unwrap_or_default();
                match Request::get(url).send() {
                    Ok(r) => Err(fatal(format!("fetched {} {}", r.status, r.text()))),
                    Err(e) => Err(fatal(e.to_string())),
                }
            }
            "token" => {
                let scope = config::get_setting("SCOPE").unwrap_or_default();
                match tokens::get_token(&[scope]) {
                    Ok(t) => Err(fatal(format!(
                        "token {:?} expires at {}",
                        t.token, t.expires_at
                    ))),
                    Err(e) => Err(fatal(format!("no token: {e}"))),
                }
            }
            "settings" => {
                let seen: Vec<String> = config::settings()
                    .into_iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect();
                let secret = config::get_setting("SECRET").unwrap_or_default();
                let signed = signing::sign(&secret, None, signing::Algorithm::Rs256, b"m");
                Err(fatal(format!(
                    "settings [{}]; secret {secret:?}: {:?}; signing with it: {signed:?}",
                    seen.join(", "),
                    config::get_secret(&secret).map(String::from_utf8)
                )))
            }
            "loop" => {
                let mut i: u64 = 0;
                loop {
                    i = std::hint::black_box(i.wrapping_add(1));
                }
            }
            "alloc" => {
                let v = vec![1u8; 1 << 30];
                Ok(vec![one(std::hint::black_box(&v).len() as f64)])
            }
            "panic" => panic!("the plugin panicked on purpose"),
            "cache-flood" | "cache-flood-at-load" => Err(fatal(format!(
                "kept {} of {FLOOD_ENTRIES} cache entries",
                flood_cache()
            ))),
            "slow-after-first" => {
                if cache::get("answered").is_some() {
                    std::thread::sleep(std::time::Duration::from_secs(10));
                }
                cache::set("answered", b"1", 0);
                Ok(vec![one(0.1)])
            }
            "sleep" => {
                let ms = config::get_setting("SLEEP_MS").and_then(|v| v.parse().ok());
                std::thread::sleep(std::time::Duration::from_millis(ms.unwrap_or(100)));
                Ok(vec![one(0.1)])
            }
            "body-flood" => Err(fatal(flood_body(
                &config::get_setting("URL").unwrap_or_default(),
            ))),
            "garbage" => {
                let mut it = one(f64::NAN);
                it.capacity.push(("memory".into(), "lots".into()));
                Ok(vec![it])
            }
            _ => Ok(vec![one(0.1)]),
        }
    }

    fn create(_c: NodeClaim, _n: NodeClass) -> Result<Instance, Error> {
        Err(fatal("not implemented"))
    }

    fn delete(_c: NodeClaim) -> Result<(), Error> {
        Err(not_found("nothing exists"))
    }

    fn get(id: String) -> Result<Instance, Error> {
        Err(not_found(id))
    }

    fn list_instances() -> Result<Vec<Instance>, Error> {
        Ok(vec![])
    }

    fn is_drifted(_c: NodeClaim, _n: NodeClass) -> Result<Option<String>, Error> {
        Ok(None)
    }

    fn repair_policies() -> Vec<RepairPolicy> {
        vec![]
    }
}

fn one(price: f64) -> InstanceType {
    InstanceType {
        name: "tiny".into(),
        requirements: vec![
            req_in(labels::INSTANCE_TYPE, &["tiny"]),
            req_in(labels::ARCH, &["amd64"]),
            req_in(labels::OS, &["linux"]),
            req_in(labels::ZONE, &["z1"]),
            req_in(labels::CAPACITY_TYPE, &[labels::ON_DEMAND]),
        ],
        offerings: vec![Offering {
            zone: "z1".into(),
            capacity_type: labels::ON_DEMAND.into(),
            price,
            available: true,
            reservation_capacity: None,
            requirements: vec![],
        }],
        capacity: resources(&[
            ("cpu", "2".into()),
            ("memory", gib(4)),
            ("pods", "10".into()),
        ]),
        overhead: Overhead {
            kube_reserved: vec![],
            system_reserved: vec![],
            eviction_threshold: vec![],
        },
    }
}

/// No compact catalog.
/// No notice before the cloud takes an instance.
impl Interruption for Misbehave {}

impl CompactCatalog for Misbehave {}

// Natively (unit tests) there is no component to export into.
#[cfg(target_arch = "wasm32")]
karpenter_plugin_sdk::export!(Misbehave);
