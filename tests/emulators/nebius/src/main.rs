//! `nebius-emulator`: serve the Nebius gRPC emulator (h2c) on 127.0.0.1.
//!
//!     nebius-emulator [--port N] [--op-ms N] [--page-size N]
//!         [--quota PLATFORM=UNITS]... [--capacity PLATFORM=INSTANCES]...
//!         [--kube-endpoint URL --kube-ca-file PEM --kube-token-file FILE]
//!
//! Prints `listening on 127.0.0.1:PORT` once ready. Tokens are issued for
//! JWTs signed with the key in testdata/credentials.json.

use nebius_emulator::{Emulator, Kube, Options};
use std::io::Write;

fn main() -> anyhow::Result<()> {
    let mut o = Options::default();
    let mut port = 0u16;
    let (mut endpoint, mut ca, mut token) = (None, None, None);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || {
            args.next()
                .ok_or_else(|| anyhow::anyhow!("{a} needs a value"))
        };
        let pair = |v: String| -> anyhow::Result<(String, u64)> {
            let (k, n) = v
                .split_once('=')
                .ok_or_else(|| anyhow::anyhow!("expected PLATFORM=N, got {v}"))?;
            Ok((k.to_string(), n.parse()?))
        };
        match a.as_str() {
            "--port" => port = value()?.parse()?,
            "--op-ms" => o.op_duration = std::time::Duration::from_millis(value()?.parse()?),
            "--page-size" => o.page_size = value()?.parse()?,
            "--quota" => {
                let (k, n) = pair(value()?)?;
                o.quota.platform_units.insert(k, n);
            }
            "--capacity" => {
                let (k, n) = pair(value()?)?;
                o.quota.capacity.insert(k, n);
            }
            "--kube-endpoint" => endpoint = Some(value()?),
            "--kube-ca-file" => ca = Some(std::fs::read(value()?)?),
            "--kube-token-file" => {
                token = Some(std::fs::read_to_string(value()?)?.trim().to_string())
            }
            "-h" | "--help" => {
                println!(
                    "nebius-emulator [--port N] [--op-ms N] [--page-size N] [--quota PLATFORM=UNITS]... [--capacity PLATFORM=INSTANCES]... [--kube-endpoint URL --kube-ca-file PEM --kube-token-file FILE]"
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
        let (addr, handle) = Emulator::new(o)?.serve(port).await?;
        println!("listening on {addr}");
        std::io::stdout().flush()?;
        handle.await?;
        Ok(())
    })
}
