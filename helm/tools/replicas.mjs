// Checks the read replicas in rendered manifests (helm template's output on stdin; there must be some):
//   node replicas.mjs <namespace> [clusterDomain]
// - Every read replica (a container with SVC_LEADER_URL) follows a pod that the manifests make: a
//   leader group's leader, or a member of a consensus group (one of its StatefulSet's pods, on gRPC 6334).
// - A consensus group's replicas are spread over its members: the counts per member differ by at most one.
// - Every replica pod is named once in the coordinator's SVC_CLUSTER_REPLICAS (and the routers', where
//   they have it), under the shard id of the group it follows, and nothing else is.
// - A replica's StatefulSet names a headless Service that selects its pods (their DNS names); no
//   consensus group's -any Service (the writes' address) selects a replica.
// - Under TLS (an https SVC_LEADER_URL) a replica verifies its leader (SVC_LEADER_CA).
// - No two StatefulSets select each other's pods, and no pod is under two PodDisruptionBudgets (an
//   eviction refuses such a pod).
import { readFileSync } from 'node:fs';
import yaml from 'js-yaml';

const [namespace, domain = 'cluster.local'] = process.argv.slice(2);
if (namespace === undefined) {
  console.error('usage: node replicas.mjs <namespace> [clusterDomain] < manifests');
  process.exit(2);
}
const docs = yaml.loadAll(readFileSync(0, 'utf8')).filter((d) => d !== null && d !== undefined);
const errors = [];
const sets = docs.filter((d) => d.kind === 'StatefulSet');
const envValue = (c, name) => (c.env ?? []).find((e) => e.name === name)?.value;
const svcContainer = (d) => d.spec.template.spec.containers.find((c) => c.name === 'svc');
const podsOf = (d) => Array.from({ length: d.spec.replicas }, (_, i) => `${d.metadata.name}-${i}.${d.spec.serviceName}.${namespace}.svc.${domain}`);

// Every pod host the manifests make, with the StatefulSet (and so the group) it belongs to.
const hostSet = new Map();
for (const d of sets) for (const h of podsOf(d)) hostSet.set(h, d);

// The shards as the routers name them, in order: a group's label from its first pod's StatefulSet.
const router = docs.find((d) => d.kind === 'Deployment' && d.metadata.name.endsWith('-router'));
const routerEnv = router === undefined ? null : svcContainer(router) ?? router.spec.template.spec.containers[0];
const shardUrls = routerEnv === null ? [] : String(envValue(routerEnv, 'SVC_CLUSTER_SHARDS') ?? '').replace(/^\[|\]$/g, '').split(',').filter((x) => x !== '');
const groupOfShardUrl = (url) => {
  const host = new URL(url).hostname;
  const set = hostSet.get(host);
  if (set !== undefined) return set.metadata.labels['svc-group'];
  // A consensus group's -any Service: <fullname>-<group>-any.
  const any = docs.find((d) => d.kind === 'Service' && `${d.metadata.name}.${namespace}.svc.${domain}` === host);
  return any?.metadata.labels?.['svc-group'] ?? null;
};
const shardOfGroup = new Map(shardUrls.map((u, i) => [groupOfShardUrl(u), i]));

const replicaPods = new Map();
const perMember = new Map();
let replicas = 0;
for (const d of sets) {
  const c = svcContainer(d);
  const leader = c === undefined ? undefined : envValue(c, 'SVC_LEADER_URL');
  if (leader === undefined) continue;
  const where = `StatefulSet ${d.metadata.name}`;
  const u = new URL(leader);
  const followed = hostSet.get(u.hostname);
  const group = d.metadata.labels['svc-group'];
  if (followed === undefined) errors.push(`${where}: SVC_LEADER_URL ${leader} names no pod of these manifests`);
  else if (followed.metadata.labels['svc-group'] !== group) errors.push(`${where}: follows ${u.hostname}, of another group`);
  else if (!['leader', 'member'].includes(followed.metadata.labels['app.kubernetes.io/component'])) errors.push(`${where}: follows a ${followed.metadata.labels['app.kubernetes.io/component']}`);
  if (u.port !== '6334') errors.push(`${where}: SVC_LEADER_URL ${leader} is not the gRPC port 6334`);
  if (u.protocol === 'https:' && envValue(c, 'SVC_LEADER_CA') === undefined) errors.push(`${where}: an https SVC_LEADER_URL without SVC_LEADER_CA`);
  const labels = d.spec.template.metadata.labels;
  const headless = docs.find((x) => x.kind === 'Service' && x.metadata.name === d.spec.serviceName);
  if (headless === undefined || headless.spec.clusterIP !== 'None') errors.push(`${where}: its serviceName ${d.spec.serviceName} is no headless Service here`);
  else if (!Object.entries(headless.spec.selector ?? {}).every(([k, v]) => labels[k] === v)) errors.push(`${where}: the headless Service ${d.spec.serviceName} does not select its pods (no DNS names)`);
  for (const svc of docs.filter((x) => x.kind === 'Service' && x.metadata.name.endsWith('-any'))) {
    if (Object.entries(svc.spec.selector ?? {}).every(([k, v]) => labels[k] === v)) errors.push(`${where}: the Service ${svc.metadata.name} (a group's writes) selects its pods`);
  }
  if (followed?.metadata.labels['app.kubernetes.io/component'] === 'member') {
    const counts = perMember.get(group) ?? new Map();
    counts.set(u.hostname, (counts.get(u.hostname) ?? 0) + d.spec.replicas);
    perMember.set(group, counts);
  }
  for (const h of podsOf(d)) replicaPods.set(h, shardOfGroup.get(group));
  replicas += d.spec.replicas;
}
for (const [group, counts] of perMember) {
  const members = sets.find((d) => d.metadata.labels['svc-group'] === group && d.metadata.labels['app.kubernetes.io/component'] === 'member');
  const all = podsOf(members).map((h) => counts.get(h) ?? 0);
  if (Math.max(...all) - Math.min(...all) > 1) errors.push(`group ${group}: replicas per member ${all.join(', ')}, not spread evenly`);
}

// SVC_CLUSTER_REPLICAS on the routers and the coordinator: each replica pod once, under its group's
// shard. The coordinator must have it (the routers get the map from it).
let lists = 0;
const coordinator = docs.find((x) => x.kind === 'Deployment' && x.metadata.name.endsWith('-coordinator'));
if (coordinator === undefined || !coordinator.spec.template.spec.containers.some((c) => envValue(c, 'SVC_CLUSTER_REPLICAS') !== undefined)) {
  errors.push('the coordinator has no SVC_CLUSTER_REPLICAS');
}
for (const d of docs.filter((x) => x.kind === 'Deployment' || x.kind === 'StatefulSet')) {
  for (const c of d.spec.template.spec.containers) {
    const list = envValue(c, 'SVC_CLUSTER_REPLICAS');
    if (list === undefined) continue;
    lists++;
    const named = new Map();
    for (const item of String(list).split(',').filter((x) => x !== '')) {
      const [shard, url] = [Number(item.slice(0, item.indexOf('='))), item.slice(item.indexOf('=') + 1)];
      const host = new URL(url).hostname;
      if (named.has(host)) errors.push(`${d.kind} ${d.metadata.name}: ${host} twice in SVC_CLUSTER_REPLICAS`);
      named.set(host, shard);
      if (!replicaPods.has(host)) errors.push(`${d.kind} ${d.metadata.name}: SVC_CLUSTER_REPLICAS names ${host}, no replica pod`);
      else if (replicaPods.get(host) !== shard) errors.push(`${d.kind} ${d.metadata.name}: ${host} under shard ${shard}, its group is shard ${replicaPods.get(host)}`);
    }
    for (const h of replicaPods.keys()) if (!named.has(h)) errors.push(`${d.kind} ${d.metadata.name}: SVC_CLUSTER_REPLICAS lacks ${h}`);
  }
}

// Selectors: a StatefulSet's selector matches its own pods' labels and no other StatefulSet's; a pod's
// labels match at most one PodDisruptionBudget.
const matches = (selector, labels) => Object.entries(selector.matchLabels ?? {}).every(([k, v]) => labels[k] === v);
const pdbs = docs.filter((d) => d.kind === 'PodDisruptionBudget');
for (const d of sets) {
  const labels = d.spec.template.metadata.labels;
  if (!matches(d.spec.selector, labels)) errors.push(`StatefulSet ${d.metadata.name}: its selector does not match its pods`);
  for (const o of sets) if (o !== d && matches(o.spec.selector, labels)) errors.push(`StatefulSet ${o.metadata.name} selects the pods of ${d.metadata.name}`);
  const under = pdbs.filter((p) => matches(p.spec.selector, labels)).map((p) => p.metadata.name);
  if (under.length > 1) errors.push(`StatefulSet ${d.metadata.name}: its pods are under ${under.length} PodDisruptionBudgets (${under.join(', ')})`);
}

if (replicas === 0) errors.push('no read replica in these manifests (each check renders some)');
if (errors.length > 0) {
  console.error(errors.join('\n'));
  process.exit(1);
}
console.log(`${replicas} read replicas (${[...perMember.keys()].length} consensus groups with replicas) follow pods of their groups, have DNS names and no write traffic, and are each named once in ${lists} SVC_CLUSTER_REPLICAS; selectors and budgets do not overlap`);
