#!/bin/sh
# Make a development CA and certificates signed by it, for tests and for
# trying the gateway on one machine. Usage: sh certs/mkcerts.sh OUTDIR
#
# OUTDIR receives:
#   ca.crt, ca.key           the development CA (CA:TRUE, keyCertSign)
#   server.crt, server.key   gw.localhost, *.gw.localhost, localhost,
#                            127.0.0.1, ::1
#   other.crt, other.key     other.localhost (a second name for SNI maps)
#   client.crt, client.key   client certificate, CN aktunnel-dev
#
# The server certificate has no *.localhost: Chromium and OpenSSL refuse a
# wildcard right under a single label, so host-form HTTPS URLs live under
# gw.localhost (https://8000-local.gw.localhost:8443/ with
# config/gateway-https.yaml, which lists gw.localhost as a domain).
#
# Keys are EC P-256, signatures SHA-256, validity 825 days (the most a
# browser accepts for a leaf). Keys are mode 600 and never belong in the
# source tree. If OUTDIR/server.crt is newer than this script nothing is
# done; server.crt is written last so make can rely on it.

set -eu

if [ $# -ne 1 ] || [ -z "$1" ]; then
	echo "usage: sh certs/mkcerts.sh OUTDIR" >&2
	exit 2
fi
out=$1
days=825

if [ -f "$out/server.crt" ] && \
    [ -n "$(find "$out/server.crt" -newer "$0" 2>/dev/null)" ]; then
	exit 0
fi

command -v openssl >/dev/null 2>&1 || {
	echo "mkcerts: openssl not found" >&2
	exit 1
}

# Keys are never written into the source tree: refuse an OUTDIR at or
# below this script's directory, judged by its nearest existing ancestor.
srcdir=$(cd "$(dirname "$0")" && pwd -P)
d=$out
while [ ! -d "$d" ]; do
	d=$(dirname "$d")
done
case "$(cd "$d" && pwd -P)/" in
"$srcdir"/*)
	echo "mkcerts: refusing to write into the source tree: $out" >&2
	exit 1
	;;
esac

mkdir -p "$out"
outdir=$(cd "$out" && pwd -P)

umask 077
tmp=$(mktemp -d "$outdir/.mkcerts.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' HUP INT TERM

# Run a command quietly; on failure show its output and stop.
run() {
	if ! "$@" >"$tmp/log" 2>&1; then
		cat "$tmp/log" >&2
		echo "mkcerts: failed: $*" >&2
		exit 1
	fi
}

cat >"$tmp/openssl.cnf" <<EOF
[req]
distinguished_name = dn
prompt = no

[dn]
CN = unused

[v3_ca]
basicConstraints = critical, CA:TRUE, pathlen:0
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash

[v3_server]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
subjectAltName = DNS:gw.localhost, DNS:*.gw.localhost, DNS:localhost, IP:127.0.0.1, IP:::1

[v3_other]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
subjectAltName = DNS:other.localhost

[v3_client]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
EOF

# Make an EC P-256 key.
mkkey() {
	run openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 \
	    -out "$tmp/$1.key"
}

# Make a certificate for name $1 with subject $2 and extension section $3,
# signed by the CA.
mkleaf() {
	mkkey "$1"
	run openssl req -new -config "$tmp/openssl.cnf" -key "$tmp/$1.key" \
	    -subj "$2" -out "$tmp/$1.csr"
	run openssl x509 -req -in "$tmp/$1.csr" -sha256 -days "$days" \
	    -CA "$tmp/ca.crt" -CAkey "$tmp/ca.key" \
	    -set_serial "0x$(openssl rand -hex 16)" \
	    -extfile "$tmp/openssl.cnf" -extensions "$3" -out "$tmp/$1.crt"
}

mkkey ca
run openssl req -new -x509 -config "$tmp/openssl.cnf" -key "$tmp/ca.key" \
    -subj "/O=akgateway/CN=akgateway development CA" -sha256 \
    -days "$days" -set_serial "0x$(openssl rand -hex 16)" \
    -extensions v3_ca -out "$tmp/ca.crt"
mkleaf server "/O=akgateway/CN=localhost" v3_server
mkleaf other "/O=akgateway/CN=other.localhost" v3_other
mkleaf client "/O=akgateway/CN=aktunnel-dev" v3_client

run openssl verify -CAfile "$tmp/ca.crt" -purpose sslserver \
    "$tmp/server.crt" "$tmp/other.crt"
run openssl verify -CAfile "$tmp/ca.crt" -purpose sslclient "$tmp/client.crt"

chmod 600 "$tmp"/*.key
chmod 644 "$tmp"/*.crt
for f in ca.key ca.crt other.key other.crt client.key client.crt server.key; do
	mv -f "$tmp/$f" "$outdir/$f"
done
# Last, so that its time stamp marks a complete set.
mv -f "$tmp/server.crt" "$outdir/server.crt"
touch "$outdir/server.crt"

echo "mkcerts: development CA and certificates in $out"
