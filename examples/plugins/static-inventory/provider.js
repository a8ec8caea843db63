// A static-inventory provider: a fixed list of machines (bare metal, a lab
// rack) given in the plugin's settings, written in JavaScript from the WIT
// contract alone (wit/v0.1.0/provider.wit) and built with componentize-js.
//
// Settings (the plugin's <name>.yaml, `settings:`):
//   MACHINES          JSON list: [{"name", "zone", "cpu", "memory", "arch"?,
//                     "os"?, "pods"?, "price"?, "labels"?}]
//   NODE_ANNOTATIONS  JSON object put on every Node (e.g. kwok's marker)
//   TOKEN_SECRET      the granted secret holding an API server token
//                     (default kube/token)
//
// A "launch" takes a free machine and registers its Node in the API server,
// named after the machine: the Node's name is the lock, so two NodeClaims can
// never get the same machine. A machine is free while no Node of it exists.

import { getSetting, getSecret } from 'karpenter:provider/config@0.1.0';
import { info } from 'karpenter:provider/cluster@0.1.0';
import { log } from 'karpenter:provider/log@0.1.0';

const SCHEME = 'static';
const GROUP = 'example.karpenter.sh';
const KIND = 'StaticNodeClass';
const MANAGED = 'static.example.karpenter.sh/managed';
const MACHINE = 'static.example.karpenter.sh/machine';
const NODECLAIM = 'static.example.karpenter.sh/nodeclaim';
const L = {
  instanceType: 'node.kubernetes.io/instance-type',
  arch: 'kubernetes.io/arch',
  os: 'kubernetes.io/os',
  zone: 'topology.kubernetes.io/zone',
  capacityType: 'karpenter.sh/capacity-type',
  nodePool: 'karpenter.sh/nodepool',
  hostname: 'kubernetes.io/hostname',
};

// --- errors: the contract's typed variants -------------------------------

const notFound = (message) => ({ tag: 'not-found', val: message });
const notReady = (message) => ({ tag: 'node-class-not-ready', val: message });
const other = (message, retryable) => ({ tag: 'other', val: { message, retryable } });
const insufficientCapacity = (message) =>
  ({ tag: 'insufficient-capacity', val: { message, offerings: [] } });

// --- the inventory -------------------------------------------------------

function machines() {
  const text = getSetting('MACHINES');
  if (!text) return [];
  let list;
  try {
    list = JSON.parse(text);
  } catch (e) {
    throw other(`setting MACHINES is not JSON: ${e.message}`, false);
  }
  return list.map((m) => {
    if (!m.name || !m.zone || !m.cpu || !m.memory) {
      throw other(`machine ${JSON.stringify(m)} needs name, zone, cpu and memory`, false);
    }
    const arch = m.arch ?? 'amd64';
    return {
      name: m.name,
      zone: m.zone,
      cpu: String(m.cpu),
      memory: String(m.memory),
      pods: String(m.pods ?? 110),
      arch,
      os: m.os ?? 'linux',
      price: Number(m.price ?? 0),
      labels: m.labels ?? {},
      // Machines of one shape form one instance type.
      type: m.type ?? `metal-${m.cpu}c-${String(m.memory).toLowerCase()}-${arch}`,
    };
  });
}

function instanceTypes(free) {
  const byType = new Map();
  for (const m of machines()) {
    if (!byType.has(m.type)) byType.set(m.type, []);
    byType.get(m.type).push(m);
  }
  const types = [];
  for (const [name, ms] of byType) {
    const zones = [...new Set(ms.map((m) => m.zone))].sort();
    const first = ms[0];
    types.push({
      name,
      requirements: [
        req(L.instanceType, [name]),
        req(L.arch, [first.arch]),
        req(L.os, [first.os]),
        req(L.zone, zones),
        req(L.capacityType, ['on-demand']),
        ...Object.entries(first.labels).map(([k, v]) => req(k, [String(v)])),
      ],
      offerings: zones.map((zone) => {
        const inZone = ms.filter((m) => m.zone === zone);
        return {
          zone,
          capacityType: 'on-demand',
          price: Math.min(...inZone.map((m) => m.price)),
          available: inZone.some((m) => free.has(m.name)),
          reservationCapacity: undefined,
          requirements: [],
        };
      }),
      capacity: [['cpu', first.cpu], ['memory', first.memory], ['pods', first.pods]],
      overhead: {
        kubeReserved: [['cpu', '100m'], ['memory', '256Mi']],
        systemReserved: [],
        evictionThreshold: [['memory', '100Mi']],
      },
    });
  }
  return types;
}

const req = (key, values) => ({ key, operator: 'in', values, minValues: undefined });

// Whether a label value meets a requirement (Kubernetes' node selector rules).
function satisfies(r, value) {
  switch (r.operator) {
    case 'in': return value !== undefined && r.values.includes(value);
    case 'not-in': return value === undefined || !r.values.includes(value);
    case 'exists': return value !== undefined;
    case 'does-not-exist': return value === undefined;
    case 'gt': return value !== undefined && Number(value) > Number(r.values[0]);
    case 'lt': return value !== undefined && Number(value) < Number(r.values[0]);
    case 'gte': return value !== undefined && Number(value) >= Number(r.values[0]);
    case 'lte': return value !== undefined && Number(value) <= Number(r.values[0]);
    default: return false;
  }
}

function machineLabels(m) {
  return {
    ...m.labels,
    [L.instanceType]: m.type,
    [L.arch]: m.arch,
    [L.os]: m.os,
    [L.zone]: m.zone,
    [L.capacityType]: 'on-demand',
    [L.hostname]: m.name,
  };
}

// --- the API server ------------------------------------------------------

function token() {
  const name = getSetting('TOKEN_SECRET') ?? 'kube/token';
  try {
    return new TextDecoder().decode(getSecret(name)).trim();
  } catch (e) {
    throw other(`API server token ${name}: ${e.payload ?? e}`, false);
  }
}

async function api(method, path, body) {
  const url = info().endpoint.replace(/\/$/, '') + path;
  const headers = { authorization: `Bearer ${token()}`, accept: 'application/json' };
  if (body !== undefined) headers['content-type'] = 'application/json';
  let response;
  try {
    response = await fetch(url, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  } catch (e) {
    throw other(`${method} ${path}: ${e.message ?? e}`, true);
  }
  const text = await response.text();
  if (response.status === 429 || response.status >= 500) {
    throw other(`${method} ${path}: API server answered ${response.status}: ${text}`, true);
  }
  return { status: response.status, json: () => JSON.parse(text), text };
}

async function managedNodes() {
  const selector = encodeURIComponent(`${MANAGED}=true`);
  const r = await api('GET', `/api/v1/nodes?labelSelector=${selector}`);
  if (r.status !== 200) throw other(`list nodes: ${r.status}: ${r.text}`, true);
  return r.json().items ?? [];
}

function instance(node) {
  const labels = node.metadata.labels ?? {};
  const pairs = (o) => Object.entries(o ?? {}).map(([k, v]) => [k, String(v)]);
  return {
    nodeClaim: labels[NODECLAIM] ?? '',
    nodePool: labels[L.nodePool] ?? '',
    providerId: node.spec?.providerID ?? '',
    imageId: 'static',
    instanceType: labels[L.instanceType] ?? '',
    zone: labels[L.zone] ?? '',
    capacityType: labels[L.capacityType] ?? '',
    state: node.metadata.deletionTimestamp ? 'stopping' : 'running',
    labels: pairs(labels),
    capacity: pairs(node.status?.capacity),
    allocatable: pairs(node.status?.allocatable),
    createdAt: node.metadata.creationTimestamp ?? undefined,
  };
}

function machineFromProviderId(providerId) {
  const prefix = `${SCHEME}://`;
  const name = providerId.startsWith(prefix) ? providerId.slice(prefix.length) : '';
  if (!name) throw other(`providerID ${JSON.stringify(providerId)} is not of the form static://<machine>`, false);
  return name;
}

function taint(t) {
  const effect = { 'no-schedule': 'NoSchedule', 'prefer-no-schedule': 'PreferNoSchedule', 'no-execute': 'NoExecute' }[t.effect];
  return { key: t.key, value: t.value, effect };
}

// Refuses a NodeClass of another kind; one naming none (a hand-made call) is
// taken as ours.
function ensureKind(nodeClass) {
  const { apiVersion = '', kind = '' } = JSON.parse(nodeClass.json || '{}');
  if ((apiVersion || kind) && (kind !== KIND || apiVersion.split('/')[0] !== GROUP)) {
    throw notReady(`NodeClass ${nodeClass.name} is a ${kind} (${apiVersion}); this provider serves ${KIND} (${GROUP})`);
  }
}

// --- the contract --------------------------------------------------------

export const provider = {
  metadata() {
    return {
      name: 'static-inventory',
      providerIdSchemes: [SCHEME],
      nodeClasses: [{
        group: GROUP,
        version: 'v1alpha1',
        kind: KIND,
        plural: 'staticnodeclasses',
        shortNames: [],
        schema: JSON.stringify({
          type: 'object',
          description: 'StaticNodeClass: machines from a fixed inventory. It has no settings of its own.',
          properties: {
            apiVersion: { type: 'string' },
            kind: { type: 'string' },
            metadata: { type: 'object' },
            spec: { type: 'object' },
            status: {
              type: 'object',
              properties: {
                conditions: {
                  type: 'array',
                  items: {
                    type: 'object',
                    required: ['type', 'status'],
                    properties: {
                      type: { type: 'string' }, status: { type: 'string' },
                      reason: { type: 'string' }, message: { type: 'string' },
                      lastTransitionTime: { type: 'string', format: 'date-time' },
                      observedGeneration: { type: 'integer' },
                    },
                  },
                },
              },
            },
          },
        }),
      }],
    };
  },

  validateNodeClass(nodeClass) {
    ensureKind(nodeClass);
    const count = machines().length;
    return {
      conditions: [{
        type: 'Ready',
        status: count > 0 ? 'true' : 'false',
        reason: count > 0 ? 'Ready' : 'NoMachines',
        message: count > 0 ? '' : 'the MACHINES setting lists no machine',
      }],
      resolved: JSON.stringify({ machines: count }),
    };
  },

  async getInstanceTypes(_nodePool, _nodeClass) {
    const taken = new Set((await managedNodes()).map((n) => n.metadata.labels?.[MACHINE]));
    const free = new Set(machines().map((m) => m.name).filter((n) => !taken.has(n)));
    return instanceTypes(free);
  },

  async create(claim, _nodeClass) {
    const existing = (await managedNodes()).filter((n) => n.metadata.labels?.[NODECLAIM] === claim.name);
    if (existing.length > 0) return instance(existing[0]);
    const taken = new Set((await managedNodes()).map((n) => n.metadata.labels?.[MACHINE]));
    const candidates = machines()
      .filter((m) => !taken.has(m.name))
      .filter((m) => {
        // The Node carries the machine's labels and the NodeClaim's (its
        // NodePool's template labels, the NodePool's name): all must fit.
        const labels = { ...machineLabels(m), ...Object.fromEntries(claim.labels), [L.nodePool]: claim.nodePool };
        return claim.requirements.every((r) => satisfies(r, labels[r.key]));
      })
      .sort((a, b) => a.price - b.price || a.name.localeCompare(b.name));
    let annotations = {};
    try {
      annotations = JSON.parse(getSetting('NODE_ANNOTATIONS') ?? '{}');
    } catch (e) {
      throw other(`setting NODE_ANNOTATIONS is not JSON: ${e.message}`, false);
    }
    for (const m of candidates) {
      const node = {
        apiVersion: 'v1',
        kind: 'Node',
        metadata: {
          name: m.name,
          labels: {
            ...machineLabels(m),
            ...Object.fromEntries(claim.labels),
            [L.nodePool]: claim.nodePool,
            [MANAGED]: 'true',
            [MACHINE]: m.name,
            [NODECLAIM]: claim.name,
          },
          annotations,
        },
        spec: {
          providerID: `${SCHEME}://${m.name}`,
          taints: [
            ...claim.taints.map(taint),
            ...claim.startupTaints.map(taint),
            { key: 'karpenter.sh/unregistered', effect: 'NoExecute' },
          ],
        },
        status: {
          capacity: { cpu: m.cpu, memory: m.memory, pods: m.pods },
          allocatable: { cpu: m.cpu, memory: m.memory, pods: m.pods },
        },
      };
      const r = await api('POST', '/api/v1/nodes', node);
      if (r.status === 200 || r.status === 201) {
        log('info', 'machine taken', [['machine', m.name], ['nodeclaim', claim.name]]);
        return instance(r.json());
      }
      // 409: another NodeClaim took this machine a moment ago; try the next.
      if (r.status !== 409) {
        throw { tag: 'create-error', val: { reason: 'NodeCreateFailed', message: `${r.status}: ${r.text}`, retryable: false } };
      }
    }
    throw insufficientCapacity(`no free machine satisfies NodeClaim ${claim.name}`);
  },

  async delete(claim) {
    let name;
    if (claim.providerId) {
      name = machineFromProviderId(claim.providerId);
    } else {
      const mine = (await managedNodes()).find((n) => n.metadata.labels?.[NODECLAIM] === claim.name);
      if (!mine) throw notFound(`NodeClaim ${claim.name} holds no machine`);
      name = mine.metadata.name;
    }
    const r = await api('DELETE', `/api/v1/nodes/${encodeURIComponent(name)}`);
    if (r.status === 404) throw notFound(`machine ${name} is free`);
    if (r.status !== 200 && r.status !== 202) throw other(`delete node ${name}: ${r.status}: ${r.text}`, true);
  },

  async get(providerId) {
    const name = machineFromProviderId(providerId);
    const r = await api('GET', `/api/v1/nodes/${encodeURIComponent(name)}`);
    if (r.status === 404) throw notFound(`machine ${name} is free`);
    if (r.status !== 200) throw other(`get node ${name}: ${r.status}: ${r.text}`, true);
    const node = r.json();
    if (node.metadata.labels?.[MANAGED] !== 'true') throw notFound(`node ${name} is not one of this provider's`);
    return instance(node);
  },

  async listInstances() {
    return (await managedNodes()).map(instance);
  },

  isDrifted(_claim, _nodeClass) {
    return undefined;
  },

  repairPolicies() {
    return [{ conditionType: 'Ready', conditionStatus: 'false', tolerationSeconds: 1800n }];
  },
};
