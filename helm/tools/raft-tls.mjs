// Checks mutual TLS between consensus members in rendered manifests (helm template's output on stdin):
//   node raft-tls.mjs on|off <namespace> [clusterDomain]
// A member is a container (not an init container) whose env has SVC_RAFT_MEMBERS. "on": every member has
// SVC_RAFT_TLS_CA=/tls/ca.crt once, with the TLS Secret mounted at /tls and SVC_TLS_CERT set; no other
// container of any workload has SVC_RAFT_TLS_CA; and every member's address in SVC_RAFT_MEMBERS is a pod
// of its StatefulSet under that StatefulSet's headless Service, so the one wildcard the chart documents,
// *.<service>.<namespace>.svc.<clusterDomain>, is valid for it by Node's own host name check (the one the
// members make). "off": no container has SVC_RAFT_TLS_CA. Either way at least one member must be found.
import { readFileSync } from 'node:fs';
import { checkServerIdentity } from 'node:tls';
import yaml from 'js-yaml';

const [mode, namespace, domain = 'cluster.local'] = process.argv.slice(2);
if (!['on', 'off'].includes(mode) || namespace === undefined) {
  console.error('usage: node raft-tls.mjs on|off <namespace> [clusterDomain] < manifests');
  process.exit(2);
}
const CA = '/tls/ca.crt';
const docs = yaml.loadAll(readFileSync(0, 'utf8')).filter((d) => d !== null && d !== undefined);
const errors = [];
const envOf = (c, name) => (c.env ?? []).filter((e) => e.name === name);
let members = 0;
let others = 0;
let memberSets = 0;

for (const doc of docs) {
  const pod = doc.spec?.template?.spec;
  if (pod === undefined) continue;
  const where = `${doc.kind} ${doc.metadata?.name}`;
  for (const c of pod.initContainers ?? []) {
    if (envOf(c, 'SVC_RAFT_TLS_CA').length > 0) errors.push(`${where}: init container ${c.name} has SVC_RAFT_TLS_CA`);
  }
  let isMemberSet = false;
  for (const c of pod.containers ?? []) {
    const ca = envOf(c, 'SVC_RAFT_TLS_CA');
    const list = envOf(c, 'SVC_RAFT_MEMBERS');
    if (list.length === 0) {
      others++;
      if (ca.length > 0) errors.push(`${where}: container ${c.name} is no consensus member but has SVC_RAFT_TLS_CA`);
      continue;
    }
    members++;
    isMemberSet = true;
    if (doc.kind !== 'StatefulSet') {
      errors.push(`${where}: a consensus member outside a StatefulSet has no stable address`);
      continue;
    }
    if (mode === 'off') {
      if (ca.length > 0) errors.push(`${where}: container ${c.name} has SVC_RAFT_TLS_CA`);
      continue;
    }
    if (ca.length !== 1 || ca[0].value !== CA) errors.push(`${where}: container ${c.name} needs SVC_RAFT_TLS_CA=${CA} once, has ${JSON.stringify(ca)}`);
    if (envOf(c, 'SVC_TLS_CERT').length !== 1) errors.push(`${where}: container ${c.name} has SVC_RAFT_TLS_CA without SVC_TLS_CERT`);
    const mount = (c.volumeMounts ?? []).find((m) => m.mountPath === '/tls');
    const volume = mount === undefined ? undefined : (pod.volumes ?? []).find((v) => v.name === mount.name);
    if (volume?.secret?.secretName === undefined) errors.push(`${where}: container ${c.name} mounts no Secret at /tls`);
    // Each address: <statefulset>-<i>.<service>.<namespace>.svc.<domain>, i below replicas, the pod's name its id.
    const service = doc.spec.serviceName;
    const wildcard = `*.${service}.${namespace}.svc.${domain}`;
    const entries = String(list[0].value).split(',');
    if (entries.length !== doc.spec.replicas) errors.push(`${where}: SVC_RAFT_MEMBERS lists ${entries.length} members for ${doc.spec.replicas} replicas`);
    entries.forEach((entry, i) => {
      const [id, addr] = entry.split('=');
      const host = addr.replace(/:[0-9]+$/, '');
      const podName = `${doc.metadata.name}-${i}`;
      if (id !== podName || host !== `${podName}.${service}.${namespace}.svc.${domain}`) {
        errors.push(`${where}: member ${i} is ${entry}, not ${podName} at ${podName}.${service}.${namespace}.svc.${domain}`);
      }
      const err = checkServerIdentity(host, { subject: {}, subjectaltname: `DNS:${wildcard}` });
      if (err !== undefined) errors.push(`${where}: a certificate for ${wildcard} is not valid for ${host}: ${err.message}`);
    });
  }
  if (isMemberSet) memberSets++;
}

if (members === 0) errors.push('no consensus member in the manifests: nothing was checked');
if (errors.length > 0) {
  for (const e of errors) console.error(`invalid: ${e}`);
  process.exit(1);
}
console.log(mode === 'on'
  ? `SVC_RAFT_TLS_CA on all ${memberSets} consensus StatefulSet(s), valid wildcards for their members, on none of ${others} other container(s)`
  : `no SVC_RAFT_TLS_CA on ${memberSets} consensus StatefulSet(s) nor ${others} other container(s)`);
