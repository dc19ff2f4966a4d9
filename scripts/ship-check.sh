#!/usr/bin/env bash
# make ship-check: what floodgate ships, built and tried as a user would.
#   1. make release, then a second release from a copy of the tree at
#      another path and, for linux/amd64, with an empty build cache: every
#      file (binaries, .debs, THIRD_PARTY, SHA256SUMS) byte for byte equal
#   2. the release binary's version line
#   3. the .deb installed with dpkg into a scratch root (--root with
#      --force-script-chrootless: its maintainer scripts run, honouring
#      DPKG_ROOT); the installed floodgate's version and "check" of the
#      installed configuration; the conffiles; removal and purge
#   4. systemd-analyze verify of the installed unit
#   5. make image
#   6. helm lint; promtool check rules and test rules
#   7. the Go tests of the tools module (tools/shipcheck, tools/thirdparty):
#      the image, the manifests and chart, the Envoy example, the
#      dashboard's and alerts' metric names, every shipped configuration,
#      the licenses
# SHIP_CHECK_COLD=0 leaves out the empty-cache rebuild (about a minute).
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"
DIST="${DIST:-dist}"
passed=0
step() { echo; echo "=== ship-check: $*"; }
ok() { passed=$((passed + 1)); echo "ok: $*"; }
fail() { echo "FAIL: $*" >&2; echo "ship-check: $passed passed, 1 failed"; exit 1; }
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT

step "make release"
start=$SECONDS
DIST="$DIST" scripts/release.sh
source scripts/buildvars.sh
ok "release $VERSION in $((SECONDS - start))s"

step "a second release, from another path: identical"
copy="$scratch/elsewhere/floodgate"
mkdir -p "$copy"
git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf - | tar -xf - -C "$copy"
(cd "$copy" && DIST=dist2 VERSION="$VERSION" REVISION="$REVISION" SOURCE_DATE_EPOCH="$SOURCE_DATE_EPOCH" scripts/release.sh >/dev/null)
diff "$DIST/SHA256SUMS" "$copy/dist2/SHA256SUMS" || fail "the second release differs (SHA256SUMS above)"
while read -r _ f; do cmp "$DIST/$f" "$copy/dist2/$f" || fail "$f differs"; done < "$DIST/SHA256SUMS"
ok "$(wc -l < "$DIST/SHA256SUMS") files identical"
if [ "${SHIP_CHECK_COLD:-1}" != 0 ]; then
	start=$SECONDS
	(cd "$copy" && GOCACHE="$scratch/gocache" PLATFORMS=linux/amd64 DEB_ARCHES= DIST=dist3 VERSION="$VERSION" REVISION="$REVISION" SOURCE_DATE_EPOCH="$SOURCE_DATE_EPOCH" scripts/release.sh >/dev/null)
	cmp "$DIST/floodgate_linux_amd64/floodgate" "$copy/dist3/floodgate_linux_amd64/floodgate" || fail "linux/amd64 built with an empty build cache differs"
	ok "linux/amd64 with an empty build cache identical ($((SECONDS - start))s)"
fi

step "the release binary's version"
want="floodgate $VERSION (${REVISION:0:12}, $DATE, $(go env GOVERSION))"
got="$("$DIST/floodgate_linux_amd64/floodgate" version)"
[ "$got" = "$want" ] || fail "floodgate version: got \"$got\", want \"$want\""
ok "$got"

step "the .deb, installed into a scratch root"
deb="$(ls "$DIST"/floodgate_*_amd64.deb)"
for d in "$DIST"/floodgate_*.deb; do
	dpkg-deb --info "$d" >/dev/null || fail "dpkg-deb --info $d"
	want_files="./etc/default/floodgate ./etc/floodgate/floodgate.yaml ./usr/bin/floodgate ./usr/lib/systemd/system/floodgate.service ./usr/share/doc/floodgate/LICENSE ./usr/share/doc/floodgate/THIRD_PARTY.md"
	have="$(dpkg-deb --contents "$d" | awk '{print $6}')"
	for f in $want_files; do grep -qx "$f" <<<"$have" || fail "$d lacks $f"; done
done
R="$scratch/root"
mkdir -p "$R/etc" "$R/var/lib/dpkg/info" "$R/var/lib/dpkg/updates" "$R/var/lib/dpkg/triggers"
touch "$R/var/lib/dpkg/status" "$R/var/lib/dpkg/available"
printf 'root:x:0:0:root:/root:/bin/sh\n' > "$R/etc/passwd"
printf 'root:x:0:\n' > "$R/etc/group"
printf 'root:*:19000:0:99999:7:::\n' > "$R/etc/shadow"
printf 'root:*::\n' > "$R/etc/gshadow"
dpkg --root="$R" --force-script-chrootless --force-not-root -i "$deb" || fail "dpkg -i $deb"
grep -q '^floodgate:x:[0-9]*:[0-9]*:.*:/nonexistent:/usr/sbin/nologin$' "$R/etc/passwd" || fail "postinst made no floodgate user: $(cat "$R/etc/passwd")"
conffiles="$(dpkg-query --admindir="$R/var/lib/dpkg" -W -f='${Conffiles}' floodgate)"
for f in /etc/floodgate/floodgate.yaml /etc/default/floodgate; do grep -q " $f " <<<"$conffiles" || fail "$f is not a conffile: $conffiles"; done
[ "$(stat -c %a "$R/etc/default/floodgate")" = 600 ] || fail "/etc/default/floodgate is not 0600"
got="$("$R/usr/bin/floodgate" version)"
[ "$got" = "$want" ] || fail "the installed floodgate version: \"$got\""
"$R/usr/bin/floodgate" check --config "$R/etc/floodgate/floodgate.yaml" || fail "floodgate check of the installed configuration"
"$R/usr/bin/floodgate" check --config "$R/etc/floodgate" >/dev/null || fail "floodgate check of the installed configuration directory"
ok "installed $(basename "$deb"): user, conffiles, version, check"

step "systemd-analyze verify of the installed unit"
if command -v systemd-analyze >/dev/null 2>&1; then
	# verify resolves the unit's dependencies and commands inside --root:
	# give the scratch root the host's units and kill (ExecReload).
	for u in /usr/lib/systemd/system/*; do [ -e "$R/usr/lib/systemd/system/$(basename "$u")" ] || cp -a "$u" "$R/usr/lib/systemd/system/"; done
	ln -sfn usr/bin "$R/bin"
	cp "$(type -P kill)" "$R/usr/bin/kill"
	out="$(systemd-analyze verify --root="$R" /usr/lib/systemd/system/floodgate.service 2>&1)" || fail "systemd-analyze verify: $out"
	[ -z "$out" ] || fail "systemd-analyze verify warns: $out"
	systemd-analyze security --offline=true --root="$R" floodgate.service 2>/dev/null | tail -1 || true
	ok "systemd-analyze verify: no warning"
else
	echo "skipped: systemd-analyze is not installed (Debian's systemd package has it)"
fi
dpkg --root="$R" --force-script-chrootless --force-not-root --purge floodgate >/dev/null || fail "dpkg --purge"
[ ! -e "$R/usr/bin/floodgate" ] && [ ! -e "$R/etc/floodgate/floodgate.yaml" ] || fail "files left after purge"
ok "purged"

step "make image"
DIST="$DIST" scripts/image.sh
ok "image"

step "helm lint, promtool"
helm="$(cd tools && go tool -n helm)"
"$helm" lint --strict deploy/helm/floodgate || fail "helm lint"
promtool="$(cd tools && go tool -n promtool)"
"$promtool" check rules deploy/prometheus/alerts.yaml || fail "promtool check rules"
(cd deploy/prometheus && "$promtool" test rules alerts_test.yaml) || fail "promtool test rules"
ok "helm lint, promtool check rules, promtool test rules"

step "the tools module's tests"
(cd tools && go vet ./... && SHIP_DIST="$root/$DIST" SHIP_REQUIRE=1 go test -count=1 ./...) || fail "go test in tools/"
ok "tools tests"

echo
echo "sizes: $(stat -c '%s %n' "$DIST"/floodgate_linux_amd64/floodgate "$DIST"/floodgate_*_amd64.deb "$DIST"/floodgate_image.tar | tr '\n' ' ')"
echo "ship-check: $passed passed, 0 failed"
