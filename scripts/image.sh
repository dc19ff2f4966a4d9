#!/usr/bin/env bash
# make image: floodgate's container image as an OCI archive,
# DIST/floodgate_image.tar (linux/amd64 and linux/arm64 under one index),
# built with go-containerregistry from make release's static binaries: no
# container engine. "docker load -i", "podman load -i" or
# "skopeo copy oci-archive:dist/floodgate_image.tar docker://REGISTRY/floodgate:TAG"
# take it from there.
set -euo pipefail
cd "$(dirname "$0")/.."
DIST="${DIST:-dist}"
source scripts/buildvars.sh
for f in "$DIST/floodgate_linux_amd64/floodgate" "$DIST/floodgate_linux_arm64/floodgate" "$DIST/THIRD_PARTY.md"; do
	[ -f "$f" ] || { echo "image: $f is missing: run make release first" >&2; exit 1; }
done
if [ ! -f /etc/ssl/certs/ca-certificates.crt ]; then
	sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
	$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq ca-certificates >/dev/null
fi
d="$(cd "$DIST" && pwd)"
(cd tools && go run ./cmd/ociimage -o "$d/floodgate_image.tar" \
	-version "$VERSION" -revision "$REVISION" -created "$DATE" \
	-license ../LICENSE -thirdparty "$d/THIRD_PARTY.md" \
	"linux/amd64=$d/floodgate_linux_amd64/floodgate" "linux/arm64=$d/floodgate_linux_arm64/floodgate")
ls -l "$DIST/floodgate_image.tar" | awk '{print $5, $9}'
