// Validates rendered Kubernetes manifests (helm template's output, on stdin or in the files given)
// against the Kubernetes API's schemas, as kubernetes-models generated them from the API's OpenAPI
// document (types, required fields, enums, formats of every built-in kind), plus checks the API server
// makes that no schema holds: object names, label keys and values, a workload's selector matching its
// pod labels, no two objects of one kind and name. An apiVersion or kind that is not a built-in is an
// error: a chart for this project uses none. Not checked (the schemas allow it): a field the API does not
// know, which the API server drops or refuses under strict field validation.
import { readFileSync } from 'node:fs';
import yaml from 'js-yaml';

const files = process.argv.slice(2);
const text = files.length === 0 ? readFileSync(0, 'utf8') : files.map((f) => readFileSync(f, 'utf8')).join('\n---\n');
const docs = yaml.loadAll(text).filter((d) => d !== null && d !== undefined);

const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const DNS_LABEL = /^[a-z]([-a-z0-9]*[a-z0-9])?$/;
const LABEL_VALUE = /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/;
const LABEL_NAME = /^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$/;

const errors = [];
const seen = new Set();
const modules = new Map();

async function modelOf(apiVersion, kind) {
  const path = apiVersion.includes('/') ? apiVersion : `v1`;
  if (!/^[a-z0-9.]+\/v[0-9a-z]+$|^v1$/.test(path)) return undefined;
  if (!modules.has(path)) modules.set(path, await import(`kubernetes-models/${path}`).catch(() => null));
  const mod = modules.get(path);
  return mod === null ? undefined : mod[kind];
}

function checkLabels(where, labels) {
  for (const [k, v] of Object.entries(labels ?? {})) {
    const [prefix, name] = k.includes('/') ? k.split('/', 2) : [null, k];
    if ((prefix !== null && (prefix.length > 253 || !DNS_SUBDOMAIN.test(prefix))) || name.length > 63 || !LABEL_NAME.test(name)) {
      errors.push(`${where}: label key ${JSON.stringify(k)} is not a valid label key`);
    }
    if (typeof v !== 'string' || v.length > 63 || !LABEL_VALUE.test(v)) errors.push(`${where}: label ${k}=${JSON.stringify(v)} is not a valid label value`);
  }
}

for (const doc of docs) {
  const where = `${doc.kind ?? '?'} ${doc.metadata?.name ?? '?'}`;
  if (typeof doc.apiVersion !== 'string' || typeof doc.kind !== 'string') {
    errors.push(`${where}: no apiVersion or kind`);
    continue;
  }
  const Model = await modelOf(doc.apiVersion, doc.kind);
  if (Model === undefined) {
    errors.push(`${where}: ${doc.apiVersion} ${doc.kind} is not a built-in Kubernetes kind`);
    continue;
  }
  try {
    new Model(doc).validate();
  } catch (e) {
    errors.push(`${where}: ${e.message}`);
  }
  const name = doc.metadata?.name;
  if (typeof name !== 'string' || name.length > 253 || !DNS_SUBDOMAIN.test(name)) errors.push(`${where}: metadata.name is not a DNS subdomain`);
  // Services and the pods of a StatefulSet (<name>-<ordinal>, their host names) need DNS labels.
  if ((doc.kind === 'Service' || doc.kind === 'StatefulSet') && (name.length > (doc.kind === 'Service' ? 63 : 58) || !DNS_LABEL.test(name))) {
    errors.push(`${where}: the name must be a DNS label short enough for its pods' host names`);
  }
  const key = `${doc.kind}/${doc.metadata?.namespace ?? ''}/${name}`;
  if (seen.has(key)) errors.push(`${where}: defined twice`);
  seen.add(key);
  checkLabels(where, doc.metadata?.labels);
  const template = doc.spec?.template;
  if (template !== undefined && ['Deployment', 'StatefulSet', 'DaemonSet', 'ReplicaSet'].includes(doc.kind)) {
    checkLabels(`${where} pod template`, template.metadata?.labels);
    for (const [k, v] of Object.entries(doc.spec.selector?.matchLabels ?? {})) {
      if (template.metadata?.labels?.[k] !== v) errors.push(`${where}: selector ${k}=${v} does not match the pod template's labels`);
    }
    if (doc.kind === 'StatefulSet' && !docs.some((d) => d.kind === 'Service' && d.metadata?.name === doc.spec.serviceName && d.spec?.clusterIP === 'None')) {
      errors.push(`${where}: serviceName ${doc.spec.serviceName} is not a headless Service of this chart`);
    }
  }
}

if (docs.length === 0) errors.push('no manifest to validate');
if (errors.length > 0) {
  for (const e of errors) console.error(`invalid: ${e}`);
  console.error(`${errors.length} problem(s) in ${docs.length} manifest(s)`);
  process.exit(1);
}
console.log(`${docs.length} manifest(s) valid against the Kubernetes API schemas (kubernetes-models)`);
