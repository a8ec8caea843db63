"""An inventory provider: a fixed list of machines (a lab rack, machines
reserved elsewhere) in the plugin's settings, written in Python from the WIT
contract alone (wit/v0.1.1/provider.wit) and built with componentize-py.

Settings (the plugin's <name>.yaml, `settings:`):
  MACHINES  JSON list: [{"name", "type", "zone", "cpu", "memory",
            "price"?, "arch"?, "pods"?}]

A "launch" books a free machine for the NodeClaim in the `cache`
capability, which every instance of the plugin shares; deleting releases
it. Bookings live in the controller's memory, so this provider is for
trying the contract and the kit: a real one books in its cloud's API (see
the JavaScript example, which registers Nodes through wasi:http).
"""

import json
from typing import Dict, List, Optional, Tuple

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import cache, config, log
from wit_world.imports.karpenter_provider_types import (
    Condition,
    ConditionStatus,
    Error_InsufficientCapacity,
    Error_NodeClassNotReady,
    Error_NotFound,
    Error_Other,
    Instance,
    InstanceState,
    InstanceType,
    InsufficientCapacity,
    NodeClaim,
    NodeClass,
    NodeClassKind,
    NodeClassStatus,
    NodePool,
    Offering,
    Operator,
    OtherError,
    Overhead,
    ProviderMetadata,
    RepairPolicy,
    Requirement,
)

SCHEME = "inventory"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
ZONE = "topology.kubernetes.io/zone"
CAPACITY_TYPE = "karpenter.sh/capacity-type"
ARCH = "kubernetes.io/arch"
OS = "kubernetes.io/os"
HOSTNAME = "kubernetes.io/hostname"
ON_DEMAND = "on-demand"
GROUP = "example.karpenter.sh"
KIND = "InventoryNodeClass"


def other(message: str, retryable: bool = False) -> Err:
    return Err(Error_Other(OtherError(message, retryable)))


def ensure_kind(node_class: NodeClass) -> None:
    """Refuses a NodeClass of another kind; one naming none (a hand-made
    call) is taken as ours."""
    obj = json.loads(node_class.json or "{}")
    api_version, kind = obj.get("apiVersion", ""), obj.get("kind", "")
    if (api_version or kind) and (kind != KIND or api_version.split("/")[0] != GROUP):
        raise Err(
            Error_NodeClassNotReady(
                f"NodeClass {node_class.name} is a {kind} ({api_version}); this provider serves {KIND} ({GROUP})"
            )
        )


def machines() -> List[dict]:
    text = config.get_setting("MACHINES")
    if not text:
        return []
    try:
        listed = json.loads(text)
    except ValueError as e:
        raise other(f"setting MACHINES is not JSON: {e}")
    for m in listed:
        missing = [k for k in ("name", "type", "zone", "cpu", "memory") if k not in m]
        if missing:
            raise other(f"machine {json.dumps(m)} lacks {', '.join(missing)}")
    return listed


def booked_by(machine: str) -> Optional[str]:
    """The NodeClaim that holds the machine, if any."""
    held = cache.get(f"machine/{machine}")
    return held.decode() if held is not None else None


def labels_of(m: dict) -> Dict[str, str]:
    return {
        INSTANCE_TYPE: m["type"],
        ZONE: m["zone"],
        CAPACITY_TYPE: ON_DEMAND,
        ARCH: m.get("arch", "amd64"),
        OS: "linux",
    }


def capacity_of(m: dict) -> List[Tuple[str, str]]:
    return [("cpu", str(m["cpu"])), ("memory", str(m["memory"])), ("pods", str(m.get("pods", 110)))]


def satisfies(labels: Dict[str, str], reqs: List[Requirement]) -> bool:
    for r in reqs:
        value = labels.get(r.key)
        op = r.operator
        if op == Operator.IN and value not in r.values:
            return False
        if op == Operator.NOT_IN and value in r.values:
            return False
        if op == Operator.EXISTS and value is None:
            return False
        if op == Operator.DOES_NOT_EXIST and value is not None:
            return False
        if op in (Operator.GT, Operator.LT):
            try:
                v, bound = int(value or ""), int(r.values[0])
            except (ValueError, IndexError):
                return False
            if (op == Operator.GT and not v > bound) or (op == Operator.LT and not v < bound):
                return False
    return True


def instance(m: dict, claim: str, pool: str) -> Instance:
    labels = labels_of(m) | {HOSTNAME: m["name"]}
    return Instance(
        node_claim=claim,
        node_pool=pool,
        provider_id=f"{SCHEME}://{m['name']}",
        image_id="none",
        instance_type=m["type"],
        zone=m["zone"],
        capacity_type=ON_DEMAND,
        state=InstanceState.RUNNING,
        labels=sorted(labels.items()),
        capacity=capacity_of(m),
        allocatable=capacity_of(m),
        created_at=None,
    )


def booked_instance(m: dict) -> Optional[Instance]:
    held = booked_by(m["name"])
    if held is None:
        return None
    claim, _, pool = held.partition("/")
    return instance(m, claim, pool)


class Provider(exports.Provider):
    def metadata(self) -> ProviderMetadata:
        return ProviderMetadata(
            name="inventory",
            provider_id_schemes=[SCHEME],
            node_classes=[
                NodeClassKind(
                    group=GROUP,
                    version="v1",
                    kind=KIND,
                    plural="inventorynodeclasses",
                    short_names=[],
                    schema='{"type":"object","properties":{"spec":{"type":"object"}}}',
                )
            ],
        )

    def validate_node_class(self, node_class: NodeClass) -> NodeClassStatus:
        ensure_kind(node_class)
        ready = bool(machines())
        return NodeClassStatus(
            conditions=[
                Condition(
                    type="Ready",
                    status=ConditionStatus.TRUE if ready else ConditionStatus.FALSE,
                    reason="Ready" if ready else "NoMachines",
                    message="" if ready else "setting MACHINES lists no machine",
                )
            ],
            resolved="{}",
        )

    def get_instance_types(self, node_pool: NodePool, node_class: NodeClass) -> List[InstanceType]:
        by_type: Dict[str, List[dict]] = {}
        for m in machines():
            by_type.setdefault(m["type"], []).append(m)
        types = []
        for name, ms in sorted(by_type.items()):
            zones = sorted({m["zone"] for m in ms})
            offerings = [
                Offering(
                    zone=zone,
                    capacity_type=ON_DEMAND,
                    price=float(min(m.get("price", 0.0) for m in ms if m["zone"] == zone)),
                    # Offered while a machine of the type in the zone is free.
                    available=any(m["zone"] == zone and booked_by(m["name"]) is None for m in ms),
                    reservation_capacity=None,
                    requirements=[],
                )
                for zone in zones
            ]
            first = ms[0]
            types.append(
                InstanceType(
                    name=name,
                    requirements=[
                        Requirement(INSTANCE_TYPE, Operator.IN, [name], None),
                        Requirement(ARCH, Operator.IN, [first.get("arch", "amd64")], None),
                        Requirement(OS, Operator.IN, ["linux"], None),
                        Requirement(ZONE, Operator.IN, zones, None),
                        Requirement(CAPACITY_TYPE, Operator.IN, [ON_DEMAND], None),
                    ],
                    offerings=offerings,
                    capacity=capacity_of(first),
                    overhead=Overhead(kube_reserved=[], system_reserved=[], eviction_threshold=[]),
                )
            )
        return types

    def create(self, node_claim: NodeClaim, node_class: NodeClass) -> Instance:
        inventory = machines()
        # Idempotent by NodeClaim name: a retry after a crash finds its machine.
        for m in inventory:
            held = booked_by(m["name"])
            if held is not None and held.partition("/")[0] == node_claim.name:
                return instance(m, node_claim.name, node_claim.node_pool)
        fitting = [
            m
            for m in inventory
            if booked_by(m["name"]) is None and satisfies(labels_of(m), node_claim.requirements)
        ]
        for m in sorted(fitting, key=lambda m: (float(m.get("price", 0.0)), m["name"])):
            mine = f"{node_claim.name}/{node_claim.node_pool}"
            cache.set(f"machine/{m['name']}", mine.encode(), 0)
            # Instances share the cache but not a lock: the last booking
            # wins, and the loser moves on to the next machine.
            if booked_by(m["name"]) == mine:
                log.log(log.Level.INFO, "machine booked", [("machine", m["name"]), ("nodeclaim", node_claim.name)])
                return instance(m, node_claim.name, node_claim.node_pool)
        raise Err(
            Error_InsufficientCapacity(
                InsufficientCapacity(f"no free machine satisfies NodeClaim {node_claim.name}", [])
            )
        )

    def delete(self, node_claim: NodeClaim) -> None:
        for m in machines():
            held = booked_by(m["name"])
            if held is None:
                continue
            # Only the claim's own booking: a stale delete must never free a
            # machine booked again since.
            mine = held.partition("/")[0] == node_claim.name
            if mine and node_claim.provider_id in (None, f"{SCHEME}://{m['name']}"):
                cache.delete(f"machine/{m['name']}")
                return
        raise Err(Error_NotFound(f"NodeClaim {node_claim.name} holds no machine"))

    def get(self, provider_id: str) -> Instance:
        for m in machines():
            if f"{SCHEME}://{m['name']}" == provider_id:
                found = booked_instance(m)
                if found is not None:
                    return found
        raise Err(Error_NotFound(f"{provider_id} is not booked"))

    def list_instances(self) -> List[Instance]:
        return [i for i in (booked_instance(m) for m in machines()) if i is not None]

    def is_drifted(self, node_claim: NodeClaim, node_class: NodeClass) -> Optional[str]:
        return None

    def repair_policies(self) -> List[RepairPolicy]:
        return []
