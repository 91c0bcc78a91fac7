#!/usr/bin/env bash
# Certificates for docker-compose.tls.yml: a private CA and one certificate per service, named by its
# service name (and, for the router and the coordinator, published on the host, also by localhost and
# 127.0.0.1; for shard-1's consensus members, also by shard-1, the alias all three answer to). Needs
# openssl.
#
#   scripts/compose-certs.sh [DIR]      # default DIR: certs (mounted read-only at /certs)
#
# Writes DIR/ca.pem, DIR/<service>.pem, DIR/<service>.key. The CA's own key goes to DIR.ca.key, beside
# DIR and never into it, so no container sees it; keep it to sign more, or delete it. Run again to
# replace every file. The servers run as uid 10001: run this as root, which gives them the keys (mode
# 0600), or chown them to 10001 yourself.
set -euo pipefail

dir=${1:-certs}
services=(coordinator router shard-1-1 shard-1-2 shard-1-3 shard-2 shard-2-replica standby-1)
days=${SVC_CERT_DAYS:-825}

command -v openssl >/dev/null || { echo "compose-certs: openssl is needed" >&2; exit 1; }
mkdir -p "$dir"
# The servers (uid 10001) must get through the folder: only the keys are private.
chmod 0755 "$dir"
umask 077
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days "$days" \
  -subj "/CN=svc compose CA" -keyout "$dir.ca.key" -out "$dir/ca.pem" 2>/dev/null
chmod 0644 "$dir/ca.pem"

for s in "${services[@]}"; do
  san="DNS:$s"
  case "$s" in
    router | coordinator) san="$san,DNS:localhost,IP:127.0.0.1" ;;
    shard-1-?) san="$san,DNS:shard-1" ;;
  esac
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$s" \
    -keyout "$dir/$s.key" -out "$dir/$s.csr" 2>/dev/null
  openssl x509 -req -in "$dir/$s.csr" -CA "$dir/ca.pem" -CAkey "$dir.ca.key" -CAcreateserial \
    -days "$days" -out "$dir/$s.pem" \
    -extfile <(printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\nbasicConstraints=CA:FALSE\n' "$san") 2>/dev/null
  rm -f "$dir/$s.csr"
  chmod 0644 "$dir/$s.pem"
  chmod 0600 "$dir/$s.key"
  if [ "$(id -u)" = "0" ]; then chown 10001:10001 "$dir/$s.key"; fi
done
rm -f "$dir/ca.srl" "$dir.ca.srl"
if [ "$(id -u)" != "0" ]; then
  echo "compose-certs: the servers run as uid 10001 and must read $dir/*.key: sudo chown 10001 $dir/*.key" >&2
fi
echo "compose-certs: $dir/ca.pem and a certificate per service (${services[*]}); the CA key is $dir.ca.key"
