//! The subset of the Nebius public API this provider speaks, as prost
//! messages written by hand.
//!
//! Package, message and field names and numbers are those of the public
//! protobuf definitions (github.com/nebius/api: nebius/common/v1/{metadata,
//! operation,operation_service,error}.proto, nebius/compute/v1/{instance,
//! instance_service,disk,disk_service,platform,platform_service,
//! network_interface}.proto, nebius/iam/v1/{token_service,
//! token_exchange_service}.proto, google/rpc/status.proto). Only the fields
//! we read or write are declared; protobuf skips the others on decode.

use prost::Message;
use std::collections::HashMap;

/// gRPC method paths: `/<package>.<Service>/<Method>`.
pub mod paths {
    pub const INSTANCE_GET: &str = "/nebius.compute.v1.InstanceService/Get";
    pub const INSTANCE_GET_BY_NAME: &str = "/nebius.compute.v1.InstanceService/GetByName";
    pub const INSTANCE_LIST: &str = "/nebius.compute.v1.InstanceService/List";
    pub const INSTANCE_CREATE: &str = "/nebius.compute.v1.InstanceService/Create";
    pub const INSTANCE_DELETE: &str = "/nebius.compute.v1.InstanceService/Delete";
    pub const DISK_GET_BY_NAME: &str = "/nebius.compute.v1.DiskService/GetByName";
    pub const DISK_LIST: &str = "/nebius.compute.v1.DiskService/List";
    pub const DISK_CREATE: &str = "/nebius.compute.v1.DiskService/Create";
    pub const DISK_DELETE: &str = "/nebius.compute.v1.DiskService/Delete";
    pub const PLATFORM_LIST: &str = "/nebius.compute.v1.PlatformService/List";
    pub const OPERATION_GET: &str = "/nebius.common.v1.OperationService/Get";
    pub const TOKEN_EXCHANGE: &str = "/nebius.iam.v1.TokenExchangeService/Exchange";
}

// ---- google.protobuf / google.rpc ----

#[derive(Clone, PartialEq, Message)]
pub struct Timestamp {
    #[prost(int64, tag = "1")]
    pub seconds: i64,
    #[prost(int32, tag = "2")]
    pub nanos: i32,
}

#[derive(Clone, PartialEq, Message)]
pub struct Any {
    #[prost(string, tag = "1")]
    pub type_url: String,
    #[prost(bytes = "vec", tag = "2")]
    pub value: Vec<u8>,
}

/// google.rpc.Status: in an Operation's `status` and, serialized, in the
/// `grpc-status-details-bin` trailer.
#[derive(Clone, PartialEq, Message)]
pub struct Status {
    #[prost(int32, tag = "1")]
    pub code: i32,
    #[prost(string, tag = "2")]
    pub message: String,
    #[prost(message, repeated, tag = "3")]
    pub details: Vec<Any>,
}

// ---- nebius.common.v1 ----

#[derive(Clone, PartialEq, Message)]
pub struct ResourceMetadata {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(string, tag = "2")]
    pub parent_id: String,
    #[prost(string, tag = "3")]
    pub name: String,
    #[prost(int64, tag = "4")]
    pub resource_version: i64,
    #[prost(message, optional, tag = "5")]
    pub created_at: Option<Timestamp>,
    #[prost(message, optional, tag = "6")]
    pub updated_at: Option<Timestamp>,
    #[prost(map = "string, string", tag = "7")]
    pub labels: HashMap<String, String>,
}

#[derive(Clone, PartialEq, Message)]
pub struct GetByNameRequest {
    #[prost(string, tag = "1")]
    pub parent_id: String,
    #[prost(string, tag = "2")]
    pub name: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct Operation {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(string, tag = "2")]
    pub description: String,
    #[prost(message, optional, tag = "3")]
    pub created_at: Option<Timestamp>,
    #[prost(message, optional, tag = "5")]
    pub finished_at: Option<Timestamp>,
    #[prost(string, tag = "7")]
    pub resource_id: String,
    /// Set once the operation is done; code 0 is success.
    #[prost(message, optional, tag = "10")]
    pub status: Option<Status>,
}

#[derive(Clone, PartialEq, Message)]
pub struct GetOperationRequest {
    #[prost(string, tag = "1")]
    pub id: String,
}

/// nebius.common.v1.ServiceError, carried as an Any in a google.rpc.Status.
#[derive(Clone, PartialEq, Message)]
pub struct ServiceError {
    #[prost(string, tag = "1")]
    pub service: String,
    #[prost(string, tag = "2")]
    pub code: String,
    #[prost(message, optional, tag = "111")]
    pub resource_not_found: Option<ResourceNotFound>,
    #[prost(message, optional, tag = "112")]
    pub resource_already_exists: Option<ResourceAlreadyExists>,
    #[prost(message, optional, tag = "140")]
    pub too_many_requests: Option<TooManyRequests>,
    #[prost(message, optional, tag = "141")]
    pub quota_failure: Option<QuotaFailure>,
    #[prost(message, optional, tag = "142")]
    pub not_enough_resources: Option<NotEnoughResources>,
}

pub const SERVICE_ERROR_TYPE: &str = "type.googleapis.com/nebius.common.v1.ServiceError";

#[derive(Clone, PartialEq, Message)]
pub struct ResourceNotFound {
    #[prost(string, tag = "1")]
    pub resource_id: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct ResourceAlreadyExists {
    #[prost(string, tag = "1")]
    pub resource_id: String,
}

/// nebius.common.v1.TooManyRequests: throttled; try again later.
#[derive(Clone, PartialEq, Message)]
pub struct TooManyRequests {
    #[prost(string, tag = "1")]
    pub violation: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct QuotaFailure {
    #[prost(message, repeated, tag = "1")]
    pub violations: Vec<QuotaViolation>,
}

/// nebius.common.v1.QuotaFailure.Violation
#[derive(Clone, PartialEq, Message)]
pub struct QuotaViolation {
    #[prost(string, tag = "1")]
    pub quota: String,
    #[prost(string, tag = "2")]
    pub message: String,
    #[prost(string, tag = "3")]
    pub limit: String,
    #[prost(string, tag = "4")]
    pub requested: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct NotEnoughResources {
    #[prost(message, repeated, tag = "1")]
    pub violations: Vec<ResourceViolation>,
}

/// nebius.common.v1.NotEnoughResources.Violation
#[derive(Clone, PartialEq, Message)]
pub struct ResourceViolation {
    #[prost(string, tag = "1")]
    pub resource_type: String,
    #[prost(string, tag = "2")]
    pub message: String,
    #[prost(string, tag = "3")]
    pub requested: String,
}

// ---- nebius.compute.v1: platforms ----

#[derive(Clone, PartialEq, Message)]
pub struct ListPlatformsRequest {
    #[prost(int64, tag = "1")]
    pub page_size: i64,
    #[prost(string, tag = "2")]
    pub page_token: String,
    #[prost(string, tag = "3")]
    pub parent_id: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct ListPlatformsResponse {
    #[prost(message, repeated, tag = "1")]
    pub items: Vec<Platform>,
    #[prost(string, tag = "2")]
    pub next_page_token: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct Platform {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<ResourceMetadata>,
    #[prost(message, optional, tag = "2")]
    pub spec: Option<PlatformSpec>,
    #[prost(message, optional, tag = "3")]
    pub status: Option<PlatformStatus>,
}

#[derive(Clone, PartialEq, Message)]
pub struct PlatformSpec {
    #[prost(message, repeated, tag = "1")]
    pub presets: Vec<Preset>,
    #[prost(string, tag = "4")]
    pub human_readable_name: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct Preset {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, optional, tag = "2")]
    pub resources: Option<PresetResources>,
}

#[derive(Clone, PartialEq, Message)]
pub struct PresetResources {
    #[prost(int32, tag = "1")]
    pub vcpu_count: i32,
    #[prost(int32, tag = "3")]
    pub memory_gibibytes: i32,
    #[prost(int32, tag = "4")]
    pub gpu_count: i32,
}

#[derive(Clone, PartialEq, Message)]
pub struct PlatformStatus {
    #[prost(bool, tag = "3")]
    pub allowed_for_preemptibles: bool,
}

// ---- nebius.compute.v1: disks ----

#[derive(Clone, PartialEq, Message)]
pub struct Disk {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<ResourceMetadata>,
    #[prost(message, optional, tag = "2")]
    pub spec: Option<DiskSpec>,
}

/// DiskSpec.DiskType
pub const DISK_TYPE_NETWORK_SSD: i32 = 1;

#[derive(Clone, PartialEq, Message)]
pub struct DiskSpec {
    /// One of the `size` oneof: size_gibibytes.
    #[prost(int64, optional, tag = "4")]
    pub size_gibibytes: Option<i64>,
    #[prost(int32, tag = "6")]
    pub r#type: i32,
    /// One of the `source` oneof: source_image_family.
    #[prost(message, optional, tag = "10")]
    pub source_image_family: Option<SourceImageFamily>,
}

#[derive(Clone, PartialEq, Message)]
pub struct SourceImageFamily {
    #[prost(string, tag = "1")]
    pub image_family: String,
    #[prost(string, tag = "2")]
    pub parent_id: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct CreateDiskRequest {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<ResourceMetadata>,
    #[prost(message, optional, tag = "2")]
    pub spec: Option<DiskSpec>,
}

#[derive(Clone, PartialEq, Message)]
pub struct DeleteDiskRequest {
    #[prost(string, tag = "1")]
    pub id: String,
}

// ---- nebius.compute.v1: instances ----

#[derive(Clone, PartialEq, Message)]
pub struct Instance {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<ResourceMetadata>,
    #[prost(message, optional, tag = "2")]
    pub spec: Option<InstanceSpec>,
    #[prost(message, optional, tag = "3")]
    pub status: Option<InstanceStatus>,
}

#[derive(Clone, PartialEq, Message)]
pub struct InstanceSpec {
    #[prost(string, tag = "1")]
    pub service_account_id: String,
    #[prost(message, optional, tag = "2")]
    pub resources: Option<ResourcesSpec>,
    #[prost(message, repeated, tag = "4")]
    pub network_interfaces: Vec<NetworkInterfaceSpec>,
    #[prost(message, optional, tag = "5")]
    pub boot_disk: Option<AttachedDiskSpec>,
    #[prost(string, tag = "8")]
    pub cloud_init_user_data: String,
    /// InstanceRecoveryPolicy: RECOVER = 0, FAIL = 1.
    #[prost(int32, tag = "15")]
    pub recovery_policy: i32,
    #[prost(message, optional, tag = "19")]
    pub preemptible: Option<PreemptibleSpec>,
    #[prost(string, tag = "20")]
    pub hostname: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct ResourcesSpec {
    #[prost(string, tag = "1")]
    pub platform: String,
    /// The `size` oneof's preset.
    #[prost(string, optional, tag = "2")]
    pub preset: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
pub struct NetworkInterfaceSpec {
    #[prost(string, tag = "1")]
    pub subnet_id: String,
    #[prost(string, tag = "2")]
    pub name: String,
    /// Empty means "allocate a private address".
    #[prost(message, optional, tag = "3")]
    pub ip_address: Option<IpAddress>,
    /// Present (even empty) means "allocate a public address".
    #[prost(message, optional, tag = "4")]
    pub public_ip_address: Option<PublicIpAddress>,
}

/// nebius.compute.v1.IPAddress
#[derive(Clone, PartialEq, Message)]
pub struct IpAddress {
    #[prost(string, tag = "1")]
    pub allocation_id: String,
}

/// nebius.compute.v1.PublicIPAddress
#[derive(Clone, PartialEq, Message)]
pub struct PublicIpAddress {
    #[prost(bool, tag = "3")]
    pub r#static: bool,
}

/// AttachedDiskSpec.AttachMode
pub const ATTACH_READ_WRITE: i32 = 2;

#[derive(Clone, PartialEq, Message)]
pub struct AttachedDiskSpec {
    #[prost(int32, tag = "1")]
    pub attach_mode: i32,
    /// The `type` oneof's existing_disk.
    #[prost(message, optional, tag = "2")]
    pub existing_disk: Option<ExistingDisk>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ExistingDisk {
    #[prost(string, tag = "1")]
    pub id: String,
}

/// PreemptibleSpec.PreemptionPolicy
pub const PREEMPTION_STOP: i32 = 1;

#[derive(Clone, PartialEq, Message)]
pub struct PreemptibleSpec {
    #[prost(int32, tag = "1")]
    pub on_preemption: i32,
}

/// InstanceStatus.InstanceState
pub mod state {
    pub const CREATING: i32 = 1;
    pub const UPDATING: i32 = 2;
    pub const STARTING: i32 = 3;
    pub const RUNNING: i32 = 4;
    pub const STOPPING: i32 = 5;
    pub const STOPPED: i32 = 6;
    pub const DELETING: i32 = 7;
    pub const ERROR: i32 = 8;
}

#[derive(Clone, PartialEq, Message)]
pub struct InstanceStatus {
    #[prost(int32, tag = "1")]
    pub state: i32,
    #[prost(message, repeated, tag = "2")]
    pub network_interfaces: Vec<NetworkInterfaceStatus>,
}

#[derive(Clone, PartialEq, Message)]
pub struct NetworkInterfaceStatus {
    #[prost(int32, tag = "1")]
    pub index: i32,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(message, optional, tag = "3")]
    pub ip_address: Option<IpAddressStatus>,
    #[prost(message, optional, tag = "4")]
    pub public_ip_address: Option<IpAddressStatus>,
}

/// IPAddressStatus and PublicIPAddressStatus share these two fields.
#[derive(Clone, PartialEq, Message)]
pub struct IpAddressStatus {
    #[prost(string, tag = "1")]
    pub address: String,
    #[prost(string, tag = "2")]
    pub allocation_id: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct GetInstanceRequest {
    #[prost(string, tag = "1")]
    pub id: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct ListInstancesRequest {
    #[prost(string, tag = "1")]
    pub parent_id: String,
    #[prost(int64, tag = "2")]
    pub page_size: i64,
    #[prost(string, tag = "3")]
    pub page_token: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct ListInstancesResponse {
    #[prost(message, repeated, tag = "1")]
    pub items: Vec<Instance>,
    #[prost(string, tag = "2")]
    pub next_page_token: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct ListDisksRequest {
    #[prost(string, tag = "1")]
    pub parent_id: String,
    #[prost(int64, tag = "2")]
    pub page_size: i64,
    #[prost(string, tag = "3")]
    pub page_token: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct ListDisksResponse {
    #[prost(message, repeated, tag = "1")]
    pub items: Vec<Disk>,
    #[prost(string, tag = "2")]
    pub next_page_token: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct CreateInstanceRequest {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<ResourceMetadata>,
    #[prost(message, optional, tag = "2")]
    pub spec: Option<InstanceSpec>,
}

#[derive(Clone, PartialEq, Message)]
pub struct DeleteInstanceRequest {
    #[prost(string, tag = "1")]
    pub id: String,
}

// ---- nebius.iam.v1 ----

#[derive(Clone, PartialEq, Message)]
pub struct ExchangeTokenRequest {
    #[prost(string, tag = "1")]
    pub grant_type: String,
    #[prost(string, tag = "2")]
    pub requested_token_type: String,
    #[prost(string, tag = "3")]
    pub subject_token: String,
    #[prost(string, tag = "4")]
    pub subject_token_type: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct CreateTokenResponse {
    #[prost(string, tag = "1")]
    pub access_token: String,
    #[prost(string, tag = "2")]
    pub issued_token_type: String,
    #[prost(string, tag = "3")]
    pub token_type: String,
    #[prost(int64, tag = "4")]
    pub expires_in: i64,
}

/// The ServiceError inside a google.rpc.Status, if any.
pub fn service_error(status: &Status) -> Option<ServiceError> {
    status
        .details
        .iter()
        .find(|d| d.type_url == SERVICE_ERROR_TYPE)
        .and_then(|d| ServiceError::decode(d.value.as_slice()).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_numbers_on_the_wire() {
        // CreateInstanceRequest{spec{cloud_init_user_data = 8}}: tag 2 (len),
        // then tag 8 (len) = 0x42.
        let r = CreateInstanceRequest {
            metadata: None,
            spec: Some(InstanceSpec {
                cloud_init_user_data: "x".into(),
                ..Default::default()
            }),
        };
        assert_eq!(r.encode_to_vec(), vec![0x12, 3, 0x42, 1, b'x']);
        // ServiceError.quota_failure = 141: varint key (141 << 3 | 2) = 1130.
        let e = ServiceError {
            quota_failure: Some(QuotaFailure { violations: vec![] }),
            ..Default::default()
        };
        assert_eq!(e.encode_to_vec(), vec![0xea, 0x08, 0]);
    }
}
