#!/usr/bin/env bash
# make release: static floodgate binaries for every platform, the
# THIRD_PARTY notice, Debian packages for linux/amd64 and linux/arm64, and
# SHA256SUMS, into DIST (default dist). Offline once the Go modules are in
# the module cache, and reproducible: the same commit and Go release give
# the same bytes (scripts/ship-check.sh rebuilds and compares).
set -euo pipefail
cd "$(dirname "$0")/.."
DIST="${DIST:-dist}"
PLATFORMS="${PLATFORMS-linux/amd64 linux/arm64 darwin/amd64 darwin/arm64}"
DEB_ARCHES="${DEB_ARCHES-amd64 arm64}"
source scripts/buildvars.sh

pkg=github.com/floodgatehq/floodgate/internal/buildinfo
ldflags="-s -w -buildid= -X $pkg.version=$VERSION -X $pkg.revision=$REVISION -X $pkg.date=$DATE"
echo "release $VERSION ($REVISION, $DATE) into $DIST/"
rm -rf "$DIST"
mkdir -p "$DIST"
bins=()
for p in $PLATFORMS; do
	os="${p%/*}" arch="${p#*/}"
	out="$DIST/floodgate_${os}_${arch}/floodgate"
	CGO_ENABLED=0 GOOS="$os" GOARCH="$arch" go build -trimpath -buildvcs=false -ldflags "$ldflags" -o "$out" ./cmd/floodgate
	bins+=("$out")
done

# The notice covers every module linked into any of the binaries, and
# fails the release if one's license is not permissive.
distabs="$(cd "$DIST" && pwd)"
(cd tools && go run ./cmd/thirdparty -modroot .. -o "$distabs/THIRD_PARTY.md" "${bins[@]/#$DIST/$distabs}")

if [ -n "$DEB_ARCHES" ]; then
	nfpm="$(cd tools && go tool -n nfpm)"
	for arch in $DEB_ARCHES; do
		[ -x "$DIST/floodgate_linux_${arch}/floodgate" ] || { echo "no linux/$arch binary for its .deb" >&2; exit 1; }
		# nfpm expands the environment in some fields only: the paths of
		# deploy/deb/nfpm.yaml's contents are filled in here.
		conf="$(mktemp)"
		sed -e "s|\${DIST}|$DIST|g" -e "s|\${ARCH}|$arch|g" deploy/deb/nfpm.yaml > "$conf"
		ARCH="$arch" "$nfpm" package --config "$conf" --packager deb --target "$DIST/" | grep -v '^using deb packager' || true
		rm -f "$conf"
	done
fi

(cd "$DIST" && find . -type f ! -name SHA256SUMS | sed 's|^\./||' | LC_ALL=C sort | xargs sha256sum > SHA256SUMS)
(ls -l "$DIST"/*.deb "$DIST"/floodgate_*/floodgate 2>/dev/null || true) | awk '{print $5, $9}'
