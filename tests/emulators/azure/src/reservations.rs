//! Capacity reservation groups, as ARM serves them: a group holds at most
//! one reservation per VM size and zone; a VM created with
//! `properties.capacityReservation.capacityReservationGroup.id` is allocated
//! against the reservation of its size and zone. ARM lets a group take more
//! VMs than a reservation holds (they run unreserved) and lists them all
//! as allocated. The quota counts a reservation's whole capacity as used,
//! and a VM on it only where it goes past the capacity.
//!
//! Groups are made through `/admin/reservations` (a test's setup); the
//! plugin reads them through ARM's GET of the group (with
//! `$expand=instanceView`) and its reservations list.

use karpenter_plugin_azure::catalog::Sku;
use serde_json::{Value, json};
use std::collections::BTreeMap;

#[derive(Clone, Debug)]
pub struct Member {
    pub name: String,
    pub vm_size: String,
    /// Zone number ("1"); None for a regional reservation.
    pub zone: Option<String>,
    pub capacity: u64,
}

#[derive(Clone, Debug)]
pub struct Group {
    /// The ARM id, as the group's GET answers it.
    pub id: String,
    pub name: String,
    pub location: String,
    pub members: Vec<Member>,
}

/// Groups by lower-cased ARM id.
pub type Groups = BTreeMap<String, Group>;

pub fn group_id(sub: &str, rg: &str, name: &str) -> String {
    format!(
        "/subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.Compute/capacityReservationGroups/{name}"
    )
}

/// From the admin body `{"subscription", "resourceGroup", "name",
/// "reservations": [{"name", "vmSize", "zone", "capacity"}]}`.
pub fn from_admin(v: &Value, location: &str) -> Option<Group> {
    let s = |k: &str| v.get(k).and_then(Value::as_str);
    let name = s("name")?.to_string();
    let id = group_id(
        s("subscription").unwrap_or("sub-1"),
        s("resourceGroup")?,
        &name,
    );
    let members = v
        .get("reservations")?
        .as_array()?
        .iter()
        .map(|m| {
            Some(Member {
                name: m.get("name")?.as_str()?.to_string(),
                vm_size: m.get("vmSize")?.as_str()?.to_string(),
                zone: m.get("zone").and_then(Value::as_str).map(str::to_string),
                capacity: m.get("capacity")?.as_u64()?,
            })
        })
        .collect::<Option<Vec<_>>>()?;
    Some(Group {
        id,
        name,
        location: location.to_string(),
        members,
    })
}

/// The group a VM body names, if any.
pub fn named_by(vm: &Value) -> Option<&str> {
    vm.pointer("/properties/capacityReservation/capacityReservationGroup/id")
        .and_then(Value::as_str)
}

fn zone_of(vm: &Value) -> Option<&str> {
    vm.pointer("/zones/0").and_then(Value::as_str)
}

fn size_of(vm: &Value) -> &str {
    vm.pointer("/properties/hardwareProfile/vmSize")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn live(vm: &Value) -> bool {
    !matches!(
        vm.pointer("/properties/provisioningState")
            .and_then(Value::as_str),
        Some("Failed" | "Deleting")
    )
}

impl Group {
    /// The reservation a VM of this size and zone is allocated against.
    pub fn member_for(&self, vm_size: &str, zone: Option<&str>) -> Option<&Member> {
        self.members
            .iter()
            .find(|m| m.vm_size.eq_ignore_ascii_case(vm_size) && m.zone.as_deref() == zone)
    }

    fn member_id(&self, m: &Member) -> String {
        format!("{}/capacityReservations/{}", self.id, m.name)
    }

    /// The ids of the live VMs allocated against `m`.
    fn allocated<'a>(&self, m: &Member, vms: impl Iterator<Item = &'a Value>) -> Vec<String> {
        vms.filter(|v| {
            live(v)
                && named_by(v).is_some_and(|g| g.eq_ignore_ascii_case(&self.id))
                && size_of(v).eq_ignore_ascii_case(&m.vm_size)
                && zone_of(v) == m.zone.as_deref()
        })
        .filter_map(|v| v.get("id").and_then(Value::as_str).map(str::to_string))
        .collect()
    }

    /// ARM's GET of the group; with the instance view when `expand`.
    pub fn to_json<'a>(&self, vms: impl Iterator<Item = &'a Value> + Clone, expand: bool) -> Value {
        let mut zones: Vec<&str> = self
            .members
            .iter()
            .filter_map(|m| m.zone.as_deref())
            .collect();
        zones.sort_unstable();
        zones.dedup();
        let associated: Vec<Value> = vms
            .clone()
            .filter(|v| live(v) && named_by(v).is_some_and(|g| g.eq_ignore_ascii_case(&self.id)))
            .filter_map(|v| v.get("id").cloned())
            .map(|id| json!({ "id": id }))
            .collect();
        let mut properties = json!({
            "capacityReservations": self.members.iter().map(|m| json!({"id": self.member_id(m)})).collect::<Vec<_>>(),
            "virtualMachinesAssociated": associated,
        });
        if expand {
            properties["instanceView"] = json!({
                "capacityReservations": self.members.iter().map(|m| json!({
                    "name": m.name,
                    "utilizationInfo": {
                        "currentCapacity": m.capacity,
                        "virtualMachinesAllocated": self.allocated(m, vms.clone()).into_iter().map(|id| json!({"id": id})).collect::<Vec<_>>(),
                    },
                    "statuses": [{"code": "ProvisioningState/succeeded", "level": "Info", "displayStatus": "Provisioning succeeded"}],
                })).collect::<Vec<_>>(),
            });
        }
        let mut out = json!({
            "id": self.id,
            "name": self.name,
            "type": "Microsoft.Compute/capacityReservationGroups",
            "location": self.location,
            "properties": properties,
        });
        if !zones.is_empty() {
            out["zones"] = json!(zones);
        }
        out
    }

    /// ARM's list of the group's reservations.
    pub fn members_json(&self) -> Value {
        let value: Vec<Value> = self
            .members
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let mut r = json!({
                    "id": self.member_id(m),
                    "name": m.name,
                    "type": "Microsoft.Compute/capacityReservationGroups/capacityReservations",
                    "location": self.location,
                    "sku": {"name": m.vm_size, "capacity": m.capacity},
                    "properties": {
                        "reservationId": format!("00000000-0000-0000-0001-{i:012}"),
                        "platformFaultDomainCount": 1,
                        "provisioningState": "Succeeded",
                    },
                });
                if let Some(z) = &m.zone {
                    r["zones"] = json!([z]);
                }
                r
            })
            .collect();
        json!({ "value": value })
    }
}

/// vCPUs the groups hold against the quota: each reservation's capacity, or
/// its allocated VMs where they are more; only families `count` accepts.
pub fn cores<'a>(
    groups: &Groups,
    vms: impl Iterator<Item = &'a Value> + Clone,
    skus: &[Sku],
    count: impl Fn(&Sku) -> bool,
) -> u64 {
    groups
        .values()
        .flat_map(|g| g.members.iter().map(move |m| (g, m)))
        .filter_map(|(g, m)| {
            let sku = skus
                .iter()
                .find(|s| s.name.eq_ignore_ascii_case(&m.vm_size))?;
            let used = (g.allocated(m, vms.clone()).len() as u64).max(m.capacity);
            count(sku).then_some(used * sku.vcpu)
        })
        .sum()
}

/// Whether the reservation of this size and zone has room for one more VM.
pub fn has_room<'a>(
    group: &Group,
    vms: impl Iterator<Item = &'a Value> + Clone,
    vm_size: &str,
    zone: Option<&str>,
) -> bool {
    group
        .member_for(vm_size, zone)
        .is_some_and(|m| (group.allocated(m, vms).len() as u64) < m.capacity)
}

/// Whether a VM's cores are the reservation's already: it is on a member
/// of a group that exists.
pub fn on_reservation(groups: &Groups, vm: &Value) -> bool {
    named_by(vm)
        .and_then(|id| groups.get(&id.to_ascii_lowercase()))
        .is_some_and(|g| g.member_for(size_of(vm), zone_of(vm)).is_some())
}
