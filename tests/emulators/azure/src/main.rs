//! `azure-emulator`: serve the ARM emulator on 127.0.0.1.
//!
//!     azure-emulator [--port N] [--location westus3] [--require-auth]
//!         [--op-polls N] [--page-size N]
//!         [--regional-cores N] [--low-priority-cores N] [--family-cores FAMILY=N]...
//!         [--fail CODE[:ZONE[:SIZE]]]...
//!         [--kube-endpoint URL --kube-ca-file PEM --kube-token-file FILE]
//!         [--tls --ca-out PEM] [--chaos RATE [--chaos-seed N]]
//!
//! Prints `listening on 127.0.0.1:PORT` once ready (with `--tls`, after
//! writing the CA clients must trust to `--ca-out`). Admin API: POST
//! /admin/inject {"code","zone","vmSize","message","count"}, POST /admin/fault
//! {"status","retryAfter","method","path","count"|"persistent"}, DELETE
//! /admin/fault, POST /admin/quota {"regionalCores","lowPriorityCores",
//! "familyCores":{...}}, POST /admin/chaos {"rate"} (the share of ARM calls
//! failed at random: 429, 500, 503, allocation failures, lost answers),
//! GET /admin/state (with the faults injected by kind).

use azure_emulator::{Emulator, Injection, Kube, Options};
use std::io::Write;

fn main() -> anyhow::Result<()> {
    let mut o = Options {
        location: "westus3".into(),
        op_polls: 1,
        page_size: 50,
        ..Options::default()
    };
    let mut port = 0u16;
    let mut ca_out = None;
    let (mut endpoint, mut ca, mut token) = (None, None, None);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || {
            args.next()
                .ok_or_else(|| anyhow::anyhow!("{a} needs a value"))
        };
        match a.as_str() {
            "--port" => port = value()?.parse()?,
            "--location" => o.location = value()?,
            "--require-auth" => o.require_auth = true,
            "--op-polls" => o.op_polls = value()?.parse()?,
            "--page-size" => o.page_size = value()?.parse()?,
            "--regional-cores" => o.quota.regional_cores = Some(value()?.parse()?),
            "--low-priority-cores" => o.quota.low_priority_cores = Some(value()?.parse()?),
            "--family-cores" => {
                let v = value()?;
                let (f, n) = v
                    .split_once('=')
                    .ok_or_else(|| anyhow::anyhow!("--family-cores FAMILY=N"))?;
                o.quota.family_cores.insert(f.to_string(), n.parse()?);
            }
            "--fail" => {
                let v = value()?;
                o.injections.push(
                    Injection::parse(&v)
                        .ok_or_else(|| anyhow::anyhow!("--fail CODE[:ZONE[:SIZE]]"))?,
                );
            }
            "--tls" => o.tls = true,
            "--chaos" => o.chaos_rate = value()?.parse()?,
            "--chaos-seed" => o.chaos_seed = value()?.parse()?,
            "--ca-out" => ca_out = Some(value()?),
            "--kube-endpoint" => endpoint = Some(value()?),
            "--kube-ca-file" => ca = Some(std::fs::read(value()?)?),
            "--kube-token-file" => {
                token = Some(std::fs::read_to_string(value()?)?.trim().to_string())
            }
            "-h" | "--help" => {
                println!(
                    "see the crate docs: azure-emulator [--port N] [--location L] [--require-auth] [--fail CODE[:ZONE[:SIZE]]] [--kube-endpoint URL --kube-ca-file F --kube-token-file F] [--tls --ca-out F] ..."
                );
                return Ok(());
            }
            other => anyhow::bail!("unknown argument {other}"),
        }
    }
    if let (Some(endpoint), Some(ca_pem), Some(token)) = (endpoint, ca, token) {
        o.kube = Some(Kube {
            endpoint,
            ca_pem,
            token,
        });
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let emulator = Emulator::new(o)?;
        let (addr, handle) = emulator.clone().serve(port).await?;
        if let (Some(path), Some(pem)) = (&ca_out, emulator.ca_pem()) {
            std::fs::write(path, pem)?;
        }
        println!("listening on {addr}");
        std::io::stdout().flush()?;
        handle.await?;
        Ok(())
    })
}
