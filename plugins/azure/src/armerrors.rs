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

/// The reason a failed create is reported under (the NodeClaim's Launched
/// condition, its events, the host's error metric): one per kind of ARM
/// error, so users can act on it without reading ARM's message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// Out of capacity or quota: the offerings are kept out for a while.
    Capacity(CapacityFailure),
    /// The subnet has no address left for the NIC.
    SubnetFull,
    /// The NodeClass's image is not there (or not in this region).
    ImageNotFound,
    /// The controller's identity may not do this.
    AuthorizationFailed,
    /// ARM kept answering 429 past every retry.
    Throttled,
    /// Anything else, reported under ARM's own code.
    Other,
}

impl Reason {
    pub fn of(e: &ArmError) -> Reason {
        if let Some(c) = CapacityFailure::classify(e) {
            return Reason::Capacity(c);
        }
        match e.code.as_str() {
            "SubnetIsFull" => Reason::SubnetFull,
            "ImageNotFound"
            | "GalleryImageNotFound"
            | "PlatformImageNotFound"
            | "ImageVersionDeprecated" => Reason::ImageNotFound,
            "AuthorizationFailed" | "LinkedAuthorizationFailed" | "InvalidAuthenticationToken" => {
                Reason::AuthorizationFailed
            }
            _ if e.status == 429 => Reason::Throttled,
            _ => Reason::Other,
        }
    }

    /// The CamelCase name; `e` gives it for allocation failures (ARM's own
    /// code says which) and for `Other`.
    pub fn name(self, e: &ArmError) -> String {
        let fixed = match self {
            Reason::Capacity(CapacityFailure::FamilyQuota) => "SKUFamilyQuotaExceeded",
            Reason::Capacity(CapacityFailure::RegionalQuota) => "RegionalCoresQuotaExceeded",
            Reason::Capacity(CapacityFailure::SpotQuota) => "SpotCoresQuotaExceeded",
            Reason::Capacity(CapacityFailure::SkuNotAvailable) => "SKUNotAvailable",
            Reason::SubnetFull => "SubnetFull",
            Reason::ImageNotFound => "ImageNotFound",
            Reason::AuthorizationFailed => "AuthorizationFailed",
            Reason::Throttled => "Throttled",
            Reason::Capacity(CapacityFailure::Zonal) | Reason::Other => {
                return if e.code.is_empty() {
                    "ARMError".to_string()
                } else {
                    e.code.clone()
                };
            }
        };
        fixed.to_string()
    }

    /// Whether the same create may succeed if tried again soon. A full
    /// subnet, a missing image or a missing role needs someone to act.
    pub fn retryable(self, e: &ArmError) -> bool {
        match self {
            Reason::SubnetFull | Reason::ImageNotFound | Reason::AuthorizationFailed => false,
            Reason::Throttled | Reason::Capacity(_) => true,
            Reason::Other => e.transient() || e.status == 409,
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
    fn every_create_error_has_one_reason() {
        let named = |status: u16, code: &str, message: &str| {
            let e = ArmError::from_body(
                status,
                format!(r#"{{"error": {{"code": "{code}", "message": "{message}"}}}}"#).as_bytes(),
            );
            let r = Reason::of(&e);
            (r.name(&e), r.retryable(&e))
        };
        let cases = [
            (
                409,
                "OperationNotAllowed",
                "exceeding approved standardDSv5Family Cores quota. Family Cores quota",
                "SKUFamilyQuotaExceeded",
                true,
            ),
            (
                409,
                "OperationNotAllowed",
                "Total Regional Cores quota",
                "RegionalCoresQuotaExceeded",
                true,
            ),
            (
                409,
                "OperationNotAllowed",
                "LowPriorityCores quota",
                "SpotCoresQuotaExceeded",
                true,
            ),
            (
                409,
                "SkuNotAvailable",
                "not available in location",
                "SKUNotAvailable",
                true,
            ),
            (
                409,
                "AllocationFailed",
                "no capacity",
                "AllocationFailed",
                true,
            ),
            (
                409,
                "ZonalAllocationFailed",
                "no capacity in zone",
                "ZonalAllocationFailed",
                true,
            ),
            (
                409,
                "OverconstrainedAllocationRequest",
                "too narrow",
                "OverconstrainedAllocationRequest",
                true,
            ),
            (
                400,
                "SubnetIsFull",
                "does not have enough capacity for 1 IP addresses",
                "SubnetFull",
                false,
            ),
            (
                404,
                "GalleryImageNotFound",
                "is not available in westus2 region",
                "ImageNotFound",
                false,
            ),
            (
                403,
                "AuthorizationFailed",
                "does not have authorization",
                "AuthorizationFailed",
                false,
            ),
            (
                403,
                "LinkedAuthorizationFailed",
                "subnets/join/action",
                "AuthorizationFailed",
                false,
            ),
            (429, "TooManyRequests", "throttled", "Throttled", true),
            (400, "InvalidParameter", "bad", "InvalidParameter", false),
            (
                500,
                "InternalServerError",
                "oops",
                "InternalServerError",
                true,
            ),
        ];
        for (status, code, message, reason, retry) in cases {
            assert_eq!(
                named(status, code, message),
                (reason.to_string(), retry),
                "{code}: {message}"
            );
        }
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
