//! The region's catalog: the embedded tables, replaced by what the Resource
//! SKUs and Retail Prices APIs answer when they are reachable. Answers are kept
//! in the host cache for 12 hours; a failed refresh is not retried for 10
//! minutes, and the embedded tables answer meanwhile.

use crate::arm::Arm;
use crate::catalog::{self, Prices, Sku};
use crate::settings::Settings;
use crate::vm::SKUS_API;
use karpenter_plugin_sdk::http::{Request, encode};
use karpenter_plugin_sdk::prelude::*;
use serde_json::Value;

const TTL: u64 = 12 * 3600;
const FAILED_TTL: u64 = 600;
/// Pages of the Retail Prices API (1000 items each) read at most.
const MAX_PRICE_PAGES: usize = 40;

/// The region's SKUs and prices.
pub fn catalog(s: &Settings) -> (Vec<Sku>, Prices) {
    parse(&s.location, &texts(s))
}

/// The refreshed SKU and price tables as the host cache holds them (None:
/// the embedded table answers). Cheap to compare, so callers can keep what
/// they built from the same texts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Texts {
    pub skus: Option<String>,
    pub prices: Option<String>,
}

pub fn texts(s: &Settings) -> Texts {
    let region = &s.location;
    let skus = cached(&format!("catalog/skus/{region}"), s.catalog_refresh, || {
        fetch_skus(s).map(|k| catalog::render_skus(&k))
    });
    // Prices are public, but only a plugin configured for a subscription
    // (so not an offline `simulate`) reaches out for them.
    let live_prices = s.catalog_refresh && s.subscription.is_some();
    let prices = cached(&format!("catalog/prices/{region}"), live_prices, || {
        fetch_prices(s).map(|p| p.render())
    });
    Texts { skus, prices }
}

/// The SKUs and prices of `texts`, the embedded tables where they are absent.
pub fn parse(region: &str, texts: &Texts) -> (Vec<Sku>, Prices) {
    let skus = texts
        .skus
        .as_deref()
        .map(catalog::parse_skus)
        .filter(|k| !k.is_empty())
        .unwrap_or_else(|| catalog::embedded_skus(region));
    let prices = texts
        .prices
        .as_deref()
        .map(Prices::parse)
        .filter(|p| !p.on_demand.is_empty())
        .unwrap_or_else(|| Prices::embedded(region));
    (skus, prices)
}

fn cached(
    key: &str,
    refresh: bool,
    fetch: impl FnOnce() -> Result<String, String>,
) -> Option<String> {
    if let Some(v) = cache::get(key) {
        return Some(String::from_utf8_lossy(&v).into_owned());
    }
    let failed = format!("{key}/failed");
    if !refresh || cache::get(&failed).is_some() {
        return None;
    }
    match fetch() {
        Ok(text) => {
            cache::set(key, text.as_bytes(), TTL);
            Some(text)
        }
        Err(e) => {
            karpenter_plugin_sdk::log::info(
                "catalog refresh failed; using the embedded table",
                &[("key", key), ("error", &e)],
            );
            cache::set(&failed, b"", FAILED_TTL);
            None
        }
    }
}

fn fetch_skus(s: &Settings) -> Result<Vec<Sku>, String> {
    let sub = s
        .subscription
        .clone()
        .ok_or("AZURE_SUBSCRIPTION_ID is not set")?;
    let arm = Arm::new(s).map_err(|e| format!("{e:?}"))?;
    let filter = encode(&format!("location eq '{}'", s.location));
    let first = format!(
        "/subscriptions/{sub}/providers/Microsoft.Compute/skus?api-version={SKUS_API}&$filter={filter}"
    );
    let mut out = Vec::new();
    arm.pages(&first, "resource SKUs", 51, |page| {
        out.extend(parse_resource_skus(page, &s.location))
    })?;
    Ok(out)
}

fn fetch_prices(s: &Settings) -> Result<Prices, String> {
    let filter = format!(
        "serviceName eq 'Virtual Machines' and armRegionName eq '{}' and priceType eq 'Consumption'",
        s.location
    );
    let mut next = Some(format!(
        "{}/api/retail/prices?api-version=2023-01-01-preview&$filter={}",
        s.prices_endpoint,
        encode(&filter)
    ));
    let mut prices = Prices::default();
    for _ in 0..MAX_PRICE_PAGES {
        let Some(url) = next.take() else { break };
        let r = Request::get(url)
            .header("accept", "application/json")
            .send()
            .map_err(|e| e.to_string())?;
        if !r.is_success() {
            return Err(format!("retail prices: HTTP {}", r.status));
        }
        let v: Value = r.json().map_err(|e| e.to_string())?;
        next = parse_retail_prices(&v, &mut prices);
    }
    prices.on_demand.sort_by(|a, b| a.0.cmp(&b.0));
    prices.on_demand.dedup_by(|a, b| a.0 == b.0);
    prices.spot.sort_by(|a, b| a.0.cmp(&b.0));
    prices.spot.dedup_by(|a, b| a.0 == b.0);
    Ok(prices)
}

/// Linux consumption prices of one Retail Prices page; returns NextPageLink.
pub fn parse_retail_prices(page: &Value, into: &mut Prices) -> Option<String> {
    for item in page
        .get("Items")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let s = |k: &str| item.get(k).and_then(Value::as_str).unwrap_or_default();
        let Some(price) = item
            .get("retailPrice")
            .and_then(Value::as_f64)
            .filter(|p| p.is_finite() && *p >= 0.0)
        else {
            continue;
        };
        let (name, meter, product) = (s("armSkuName"), s("meterName"), s("productName"));
        if name.is_empty()
            || product.contains("Windows")
            || meter.contains("Low Priority")
            || s("type") != "Consumption"
        {
            continue;
        }
        if meter.ends_with("Spot") {
            into.spot.push((name.to_string(), price));
        } else {
            into.on_demand.push((name.to_string(), price));
        }
    }
    page.get("NextPageLink")
        .and_then(Value::as_str)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
}

/// Family, series and version from a size name: Standard_NC24ads_A100_v4 ->
/// (N, NCads_A100_v4, 4).
pub fn name_parts(name: &str) -> (String, String, String) {
    let size = name.strip_prefix("Standard_").unwrap_or(name);
    let family = size
        .chars()
        .next()
        .map(|c| c.to_string())
        .unwrap_or_default();
    let letters: String = size
        .chars()
        .take_while(|c| c.is_ascii_alphabetic())
        .collect();
    let rest: String = size
        .chars()
        .skip_while(|c| c.is_ascii_alphabetic())
        .skip_while(|c| c.is_ascii_digit())
        .collect();
    let rest = rest.trim_start_matches('-');
    let series = format!("{letters}{rest}");
    let version = size
        .rsplit_once("_v")
        .map(|(_, v)| v.to_string())
        .filter(|v| v.chars().all(|c| c.is_ascii_digit()) && !v.is_empty())
        .unwrap_or_else(|| "1".into());
    (family, series, version)
}

/// The GPU model of a size, from its name (the SKU API only counts GPUs).
pub fn gpu_name(name: &str) -> &'static str {
    for (pat, gpu) in [
        ("H100", "H100"),
        ("H200", "H200"),
        ("A100", "A100"),
        ("A10", "A10"),
        ("T4", "T4"),
        ("V100", "V100"),
    ] {
        if name.contains(pat) {
            return gpu;
        }
    }
    if name.starts_with("Standard_NC") && name.ends_with("_v3") {
        "V100"
    } else {
        ""
    }
}

/// The virtualMachines SKUs of a Resource SKUs page usable in `region`.
pub fn parse_resource_skus(page: &Value, region: &str) -> Vec<Sku> {
    let mut out = Vec::new();
    for item in page
        .get("value")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let s = |k: &str| item.get(k).and_then(Value::as_str).unwrap_or_default();
        if s("resourceType") != "virtualMachines" {
            continue;
        }
        let name = s("name").to_string();
        let caps: Vec<(&str, &str)> = item
            .get("capabilities")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|c| Some((c.get("name")?.as_str()?, c.get("value")?.as_str()?)))
            .collect();
        let cap = |k: &str| caps.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
        let flag = |k: &str| cap(k).is_some_and(|v| v.eq_ignore_ascii_case("True"));
        let num = |k: &str| cap(k).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
        if cap("CpuArchitectureType").is_some_and(|a| a != "x64") {
            continue;
        }
        let restrictions = item
            .get("restrictions")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if restrictions
            .iter()
            .any(|r| r.get("type").and_then(Value::as_str) == Some("Location"))
        {
            continue;
        }
        let restricted_zones: Vec<String> = restrictions
            .iter()
            .filter(|r| r.get("type").and_then(Value::as_str) == Some("Zone"))
            .flat_map(|r| {
                r.pointer("/restrictionInfo/zones")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default()
            })
            .filter_map(|z| z.as_str().map(str::to_string))
            .collect();
        let mut zones: Vec<String> = item
            .get("locationInfo")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|l| {
                l.get("location")
                    .and_then(Value::as_str)
                    .is_some_and(|x| x.eq_ignore_ascii_case(region))
            })
            .flat_map(|l| {
                l.get("zones")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default()
            })
            .filter_map(|z| z.as_str().map(str::to_string))
            .filter(|z| !restricted_zones.contains(z))
            .collect();
        zones.sort();
        let (family, series, version) = name_parts(&name);
        let gpus = num("GPUs") as u64;
        let ephemeral = (num("CachedDiskBytes") / 1e9)
            .max(num("MaxResourceVolumeMB") / 1000.0)
            .floor() as u64;
        let sku = Sku {
            gpu_name: if gpus > 0 {
                gpu_name(&name).to_string()
            } else {
                String::new()
            },
            gpu_manufacturer: if gpus > 0 {
                "nvidia".into()
            } else {
                String::new()
            },
            name,
            arm_family: s("family").to_string(),
            family,
            series,
            version,
            vcpu: num("vCPUs") as u64,
            memory_gib: num("MemoryGB"),
            gpu_count: gpus,
            accelerated_networking: flag("AcceleratedNetworkingEnabled"),
            premium_io: flag("PremiumIO"),
            ephemeral_os_max_gb: ephemeral,
            zones,
            low_priority: flag("LowPriorityCapable"),
        };
        if catalog::supported(&sku) {
            out.push(sku);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_split_like_the_labels() {
        assert_eq!(
            name_parts("Standard_D4s_v5"),
            ("D".into(), "Ds_v5".into(), "5".into())
        );
        assert_eq!(
            name_parts("Standard_NC24ads_A100_v4"),
            ("N".into(), "NCads_A100_v4".into(), "4".into())
        );
        assert_eq!(
            name_parts("Standard_B2ms"),
            ("B".into(), "Bms".into(), "1".into())
        );
        assert_eq!(gpu_name("Standard_NC4as_T4_v3"), "T4");
        // The embedded table agrees with the rule.
        for s in catalog::parse_skus(catalog::SKUS_CSV) {
            let (f, series, v) = name_parts(&s.name);
            assert_eq!(
                (f, series, v),
                (s.family.clone(), s.series.clone(), s.version.clone()),
                "{}",
                s.name
            );
        }
    }

    #[test]
    fn parses_resource_skus() {
        let page = json!({"value": [
            {"resourceType": "virtualMachines", "name": "Standard_D4s_v5", "family": "standardDSv5Family",
             "locationInfo": [{"location": "westus3", "zones": ["3", "1", "2"]}],
             "restrictions": [{"type": "Zone", "restrictionInfo": {"zones": ["3"]}}],
             "capabilities": [{"name": "vCPUs", "value": "4"}, {"name": "MemoryGB", "value": "16"},
                              {"name": "LowPriorityCapable", "value": "True"}, {"name": "PremiumIO", "value": "True"},
                              {"name": "AcceleratedNetworkingEnabled", "value": "True"}, {"name": "CpuArchitectureType", "value": "x64"}]},
            {"resourceType": "virtualMachines", "name": "Standard_D2ps_v5", "capabilities": [{"name": "CpuArchitectureType", "value": "Arm64"}]},
            {"resourceType": "virtualMachines", "name": "Standard_B1s", "capabilities": [{"name": "vCPUs", "value": "1"}, {"name": "MemoryGB", "value": "1"}]},
            {"resourceType": "disks", "name": "Premium_LRS"}
        ]});
        let skus = parse_resource_skus(&page, "westus3");
        assert_eq!(skus.len(), 1);
        assert_eq!(skus[0].zones, ["1", "2"]);
        assert!(skus[0].low_priority && skus[0].premium_io && skus[0].accelerated_networking);
        assert_eq!(skus[0].series, "Ds_v5");
    }

    #[test]
    fn parses_retail_prices() {
        let page = json!({"Items": [
            {"armSkuName": "Standard_D4s_v5", "retailPrice": 0.192, "meterName": "D4s v5", "productName": "Virtual Machines Dsv5 Series", "type": "Consumption"},
            {"armSkuName": "Standard_D4s_v5", "retailPrice": 0.0384, "meterName": "D4s v5 Spot", "productName": "Virtual Machines Dsv5 Series", "type": "Consumption"},
            {"armSkuName": "Standard_D4s_v5", "retailPrice": 0.376, "meterName": "D4s v5", "productName": "Virtual Machines Dsv5 Series Windows", "type": "Consumption"},
            {"armSkuName": "Standard_D4s_v5", "retailPrice": 0.04, "meterName": "D4s v5 Low Priority", "productName": "Virtual Machines Dsv5 Series", "type": "Consumption"}
        ], "NextPageLink": "https://prices.azure.com/next"});
        let mut p = Prices::default();
        assert_eq!(
            parse_retail_prices(&page, &mut p).as_deref(),
            Some("https://prices.azure.com/next")
        );
        assert_eq!(p.on_demand, vec![("Standard_D4s_v5".to_string(), 0.192)]);
        assert_eq!(p.spot, vec![("Standard_D4s_v5".to_string(), 0.0384)]);
    }
}
