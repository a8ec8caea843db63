//! Outbound HTTP allow-lists in the `scheme://host[:port]` form, with the
//! wildcards of Spin's `allowed_outbound_hosts`: `*` for a whole part,
//! `*.example.com` for subdomains, `8000-8010` for port ranges. An empty list
//! denies everything; a bare `*` is refused as too broad to be deliberate.

use anyhow::{Context, bail};

#[derive(Debug, Clone, Default, PartialEq)]
pub struct AllowList {
    entries: Vec<Entry>,
}

#[derive(Debug, Clone, PartialEq)]
struct Entry {
    scheme: Option<String>,
    host: HostPattern,
    port: PortPattern,
}

#[derive(Debug, Clone, PartialEq)]
enum HostPattern {
    Any,
    Exact(String),
    /// `*.example.com`: any subdomain, not example.com itself.
    Suffix(String),
}

#[derive(Debug, Clone, PartialEq)]
enum PortPattern {
    Any,
    /// No port written: the scheme's default port.
    Default,
    Range(u16, u16),
}

impl AllowList {
    pub fn parse<S: AsRef<str>>(entries: &[S]) -> anyhow::Result<Self> {
        let entries = entries
            .iter()
            .map(|e| {
                Entry::parse(e.as_ref()).with_context(|| format!("allowed host {:?}", e.as_ref()))
            })
            .collect::<anyhow::Result<_>>()?;
        Ok(AllowList { entries })
    }

    /// Whether a request to `scheme://host:port` may go out.
    pub fn allows(&self, scheme: &str, host: &str, port: Option<u16>) -> bool {
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase();
        let port = port.or_else(|| default_port(scheme));
        self.entries.iter().any(|e| e.matches(scheme, &host, port))
    }
}

impl Entry {
    fn parse(text: &str) -> anyhow::Result<Self> {
        if text.trim() == "*" {
            bail!("a bare * would allow every host; write *://*:* if that is really meant");
        }
        let (scheme, rest) = text
            .split_once("://")
            .context("expected scheme://host[:port]")?;
        if rest.contains('/') {
            bail!("paths are not allowed, only scheme://host[:port]");
        }
        let scheme = match scheme {
            "*" => None,
            "http" | "https" => Some(scheme.to_string()),
            other => bail!("unsupported scheme {other:?}: use http, https or *"),
        };
        let (host, port) = split_host_port(rest)?;
        let host = match host.as_str() {
            "" => bail!("missing host"),
            "*" => HostPattern::Any,
            h if h.starts_with("*.") => HostPattern::Suffix(h[1..].to_string()),
            h if h.contains('*') => bail!("a wildcard may only be a whole host or a *. prefix"),
            h => HostPattern::Exact(h.to_string()),
        };
        let port = match port.as_deref() {
            None => {
                if scheme.is_none() {
                    bail!("with scheme * a port is required (there is no default port)");
                }
                PortPattern::Default
            }
            Some("*") => PortPattern::Any,
            Some(p) => match p.split_once('-') {
                Some((a, b)) => {
                    let (a, b): (u16, u16) = (a.parse()?, b.parse()?);
                    if a > b {
                        bail!("port range {a}-{b} is empty");
                    }
                    PortPattern::Range(a, b)
                }
                None => {
                    let p: u16 = p.parse().context("port")?;
                    PortPattern::Range(p, p)
                }
            },
        };
        Ok(Entry { scheme, host, port })
    }

    fn matches(&self, scheme: &str, host: &str, port: Option<u16>) -> bool {
        if self.scheme.as_deref().is_some_and(|s| s != scheme) {
            return false;
        }
        let host_ok = match &self.host {
            HostPattern::Any => true,
            HostPattern::Exact(h) => h == host,
            HostPattern::Suffix(s) => host.ends_with(s.as_str()) && host.len() > s.len(),
        };
        let port_ok = match (&self.port, port) {
            (PortPattern::Any, _) => true,
            (PortPattern::Default, p) => {
                p.is_some() && p == self.scheme.as_deref().and_then(default_port)
            }
            (PortPattern::Range(a, b), Some(p)) => (*a..=*b).contains(&p),
            (PortPattern::Range(..), None) => false,
        };
        host_ok && port_ok
    }
}

fn split_host_port(text: &str) -> anyhow::Result<(String, Option<String>)> {
    let text = text.to_ascii_lowercase();
    if let Some(rest) = text.strip_prefix('[') {
        let (host, after) = rest.split_once(']').context("unclosed [ in IPv6 host")?;
        let port = after.strip_prefix(':').map(str::to_string);
        return Ok((host.to_string(), port));
    }
    Ok(match text.rsplit_once(':') {
        Some((h, p)) => (h.to_string(), Some(p.to_string())),
        None => (text, None),
    })
}

fn default_port(scheme: &str) -> Option<u16> {
    match scheme {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(entries: &[&str]) -> AllowList {
        AllowList::parse(entries).expect("valid allow-list")
    }

    #[test]
    fn empty_list_denies_everything() {
        assert!(!list(&[]).allows("https", "management.azure.com", None));
    }

    #[test]
    fn exact_host_uses_the_default_port_of_its_scheme() {
        let l = list(&["https://management.azure.com"]);
        assert!(l.allows("https", "management.azure.com", None));
        assert!(l.allows("https", "Management.Azure.com", Some(443)));
        assert!(!l.allows("https", "management.azure.com", Some(8443)));
        assert!(!l.allows("http", "management.azure.com", None));
        assert!(!l.allows("https", "evil.com", None));
    }

    #[test]
    fn wildcards_for_subdomains_ports_and_schemes() {
        let l = list(&[
            "https://*.nebius.cloud",
            "http://127.0.0.1:8000-8010",
            "*://localhost:*",
        ]);
        assert!(l.allows("https", "compute.api.nebius.cloud", None));
        assert!(!l.allows("https", "nebius.cloud", None));
        assert!(!l.allows("https", "nebius.cloud.evil.com", None));
        assert!(l.allows("http", "127.0.0.1", Some(8005)));
        assert!(!l.allows("http", "127.0.0.1", Some(8011)));
        assert!(l.allows("https", "localhost", Some(6443)));
        assert!(l.allows("http", "localhost", Some(1)));
    }

    #[test]
    fn ipv6_hosts() {
        let l = list(&["http://[::1]:8080"]);
        assert!(l.allows("http", "[::1]", Some(8080)));
        assert!(l.allows("http", "::1", Some(8080)));
    }

    #[test]
    fn malformed_entries_are_refused_with_a_reason() {
        for (entry, why) in [
            ("*", "bare"),
            ("management.azure.com", "scheme://"),
            ("https://a.com/path", "paths"),
            ("ftp://a.com", "unsupported scheme"),
            ("*://a.com", "port is required"),
            ("https://a*.com", "wildcard"),
            ("https://a.com:9-1", "empty"),
        ] {
            let err = AllowList::parse(&[entry]).expect_err(entry);
            assert!(format!("{err:#}").contains(why), "{entry}: {err:#}");
        }
    }
}
