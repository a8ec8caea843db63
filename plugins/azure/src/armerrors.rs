//! ARM error bodies and what a failed launch says about capacity: which
//! offerings to keep out of the next scheduling rounds, and for how long.
//!
//! Architecture Invariant: pure; the caller writes the cache and builds the
//! contract error.

use crate::catalog::{Sku, zone_labels};
use karpenter_plugin_sdk::labels;
use serde_json::Value;

/// `{"error": {"code": ..., "message": ...}}` (also the `error` of a failed
/// async operation).
#[derive(Debug, Clone, PartialEq)]
pub struct ArmError {
    pub status: u16,
    pub code: String,
    pub message: String,
}

impl ArmError {
    pub fn from_body(status: u16, body: &[u8]) -> ArmError {
        let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        let e = v.get("error").unwrap_or(&v);
        ArmError::from_value(status, e, || {
            String::from_utf8_lossy(body).chars().take(500).collect()
        })
    }

    /// From an `error` object; `fallback` gives the message when it has none.
    pub fn from_value(status: u16, e: &Value, fallback: impl FnOnce() -> String) -> ArmError {
        let s = |k: &str| e.get(k).and_then(Value::as_str).map(str::to_string);
        // Details sometimes carry the specific code (e.g. inside a Conflict).
        let detail = e
            .get("details")
            .and_then(Value::as_array)
            .and_then(|d| d.first());
        let code = s("code").unwrap_or_default();
        let code = match (code.as_str(), detail) {
            ("" | "Conflict" | "BadRequest", Some(d)) => d
                .get("code")
                .and_then(Value::as_str)
                .unwrap_or(&code)
                .to_string(),
            _ => code,
        };
        let mut message = s("message").unwrap_or_else(fallback);
        if let Some(m) = detail
            .and_then(|d| d.get("message"))
            .and_then(Value::as_str)
        {
            message = format!("{message} ({m})");
        }
        ArmError {
            status,
            code,
            message,
        }
    }

    /// Throttled or a server-side failure: worth retrying the same request.
    pub fn transient(&self) -> bool {
        self.status == 429 || self.status >= 500
    }
}

impl std::fmt::Display for ArmError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.code, self.status, self.message)
    }
}

/// What a launch failure means for capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CapacityFailure {
    /// Out of capacity for this size in this zone.
    Zonal,
    /// The size cannot be had in the region (any zone).
    SkuNotAvailable,
    /// Spot (low-priority) cores quota exhausted: no spot offering launches.
    SpotQuota,
    /// The size's family quota exhausted.
    FamilyQuota,
    /// The regional cores quota exhausted.
    RegionalQuota,
}

impl CapacityFailure {
    pub fn classify(e: &ArmError) -> Option<CapacityFailure> {
        let m = e.message.as_str();
        match e.code.as_str() {
            "ZonalAllocationFailed"
            | "AllocationFailed"
            | "OverconstrainedAllocationRequest"
            | "OverconstrainedZonalAllocationRequest" => Some(CapacityFailure::Zonal),
            "SkuNotAvailable" => Some(CapacityFailure::SkuNotAvailable),
            "OperationNotAllowed" | "QuotaExceeded" => {
                if m.contains("LowPriorityCores") {
                    Some(CapacityFailure::SpotQuota)
                } else if m.contains("Family Cores quota") {
                    Some(CapacityFailure::FamilyQuota)
                } else if m.contains("Total Regional Cores quota") {
                    Some(CapacityFailure::RegionalQuota)
                } else {
                    None
                }
            }
            _ => None,
        }
    }

    /// A quota ran out (rather than capacity): the quota read was stale.
    pub fn is_quota(self) -> bool {
        matches!(
            self,
            CapacityFailure::SpotQuota
                | CapacityFailure::FamilyQuota
                | CapacityFailure::RegionalQuota
        )
    }

    /// How long the offerings stay unavailable.
    pub fn ttl_seconds(self) -> u64 {
        match self {
            CapacityFailure::Zonal => 3 * 60,
            CapacityFailure::SkuNotAvailable => 3 * 3600,
            CapacityFailure::SpotQuota
            | CapacityFailure::FamilyQuota
            | CapacityFailure::RegionalQuota => 3600,
        }
    }
}

/// One offering: (instance type, zone label, capacity type).
pub type OfferingKey = (String, String, String);

/// The offerings a failure of `launched` (size, zone, capacity type) rules
/// out, given the region's catalog.
pub fn affected(
    failure: CapacityFailure,
    launched: &Sku,
    zone: &str,
    capacity_type: &str,
    region: &str,
    catalog: &[Sku],
) -> Vec<OfferingKey> {
    let all_zones = |s: &Sku, ct: &str| -> Vec<OfferingKey> {
        zone_labels(region, s)
            .into_iter()
            .map(|z| (s.name.clone(), z, ct.to_string()))
            .collect()
    };
    match failure {
        CapacityFailure::Zonal => vec![(
            launched.name.clone(),
            zone.to_string(),
            capacity_type.to_string(),
        )],
        CapacityFailure::SkuNotAvailable => all_zones(launched, capacity_type),
        CapacityFailure::SpotQuota => catalog
            .iter()
            .filter(|s| s.low_priority)
            .flat_map(|s| all_zones(s, labels::SPOT))
            .collect(),
        CapacityFailure::FamilyQuota => catalog
            .iter()
            .filter(|s| s.arm_family.eq_ignore_ascii_case(&launched.arm_family))
            .flat_map(|s| all_zones(s, capacity_type))
            .collect(),
        // Sizes at least as large would fail the same way; smaller ones may fit.
        CapacityFailure::RegionalQuota => catalog
            .iter()
            .filter(|s| s.vcpu >= launched.vcpu)
            .flat_map(|s| all_zones(s, capacity_type))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{SKUS_CSV, parse_skus};

    fn err(code: &str, message: &str) -> ArmError {
        ArmError::from_body(
            409,
            format!(r#"{{"error": {{"code": "{code}", "message": "{message}"}}}}"#).as_bytes(),
        )
    }

    #[test]
    fn classifies_capacity_errors() {
        use CapacityFailure::*;
        assert_eq!(
            CapacityFailure::classify(&err("ZonalAllocationFailed", "no capacity")),
            Some(Zonal)
        );
        assert_eq!(
            CapacityFailure::classify(&err("AllocationFailed", "x")),
            Some(Zonal)
        );
        assert_eq!(
            CapacityFailure::classify(&err("OverconstrainedAllocationRequest", "x")),
            Some(Zonal)
        );
        assert_eq!(
            CapacityFailure::classify(&err("SkuNotAvailable", "x")),
            Some(SkuNotAvailable)
        );
        assert_eq!(
            CapacityFailure::classify(&err(
                "OperationNotAllowed",
                "Operation could not be completed as it results in exceeding approved LowPriorityCores quota."
            )),
            Some(SpotQuota)
        );
        assert_eq!(
            CapacityFailure::classify(&err(
                "OperationNotAllowed",
                "exceeding approved standardDSv5Family Cores quota. Family Cores quota: Limit: 10"
            )),
            Some(FamilyQuota)
        );
        assert_eq!(
            CapacityFailure::classify(&err(
                "OperationNotAllowed",
                "Total Regional Cores quota: Limit: 100"
            )),
            Some(RegionalQuota)
        );
        assert_eq!(
            CapacityFailure::classify(&err("OperationNotAllowed", "something else")),
            None
        );
        assert_eq!(
            CapacityFailure::classify(&err("InvalidParameter", "bad")),
            None
        );
        // The code of the first detail when the top level is generic.
        let nested = ArmError::from_body(409, br#"{"error":{"code":"Conflict","message":"m","details":[{"code":"ZonalAllocationFailed","message":"d"}]}}"#);
        assert_eq!(nested.code, "ZonalAllocationFailed");
        assert!(ArmError::from_body(503, b"gateway").transient());
        assert_eq!(ArmError::from_body(503, b"gateway").message, "gateway");
    }

    #[test]
    fn affected_offerings() {
        let catalog = parse_skus(SKUS_CSV);
        let d4 = catalog
            .iter()
            .find(|s| s.name == "Standard_D4s_v5")
            .expect("d4");
        let z = affected(
            CapacityFailure::Zonal,
            d4,
            "westus3-1",
            "on-demand",
            "westus3",
            &catalog,
        );
        assert_eq!(
            z,
            vec![(
                "Standard_D4s_v5".to_string(),
                "westus3-1".to_string(),
                "on-demand".to_string()
            )]
        );
        let s = affected(
            CapacityFailure::SkuNotAvailable,
            d4,
            "westus3-1",
            "on-demand",
            "westus3",
            &catalog,
        );
        assert_eq!(s.len(), 4); // three zones and regional
        let spot = affected(
            CapacityFailure::SpotQuota,
            d4,
            "westus3-1",
            "spot",
            "westus3",
            &catalog,
        );
        assert!(spot.iter().all(|(_, _, ct)| ct == "spot"));
        assert!(spot.iter().any(|(n, _, _)| n == "Standard_E8s_v5"));
        assert!(!spot.iter().any(|(n, _, _)| n.starts_with("Standard_B")));
        let fam = affected(
            CapacityFailure::FamilyQuota,
            d4,
            "westus3-1",
            "on-demand",
            "westus3",
            &catalog,
        );
        assert_eq!(fam.len(), 8 * 4); // the eight Dsv5 sizes, everywhere
        assert!(fam.iter().all(|(n, _, _)| n.starts_with("Standard_D")
            && n.ends_with("s_v5")
            && !n.contains("ds")
            && !n.contains("as")));
    }
}
