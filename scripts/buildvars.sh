# Sourced by release.sh and image.sh: the release's identity, from git
# unless already in the environment.
#   VERSION            git describe --tags --always --dirty; an untagged
#                      commit gives v0.0.0-g<hash>[-dirty], so that a
#                      version always starts with v and a digit
#   REVISION           the commit's full hash
#   SOURCE_DATE_EPOCH  the commit's time (Unix seconds), never the clock:
#                      two builds of one commit are identical
#   DATE               the same time, RFC 3339 in UTC
if git rev-parse --git-dir >/dev/null 2>&1; then
	: "${REVISION:=$(git rev-parse HEAD)}"
	: "${SOURCE_DATE_EPOCH:=$(git log -1 --format=%ct)}"
	: "${VERSION:=$(git describe --tags --always --dirty --match 'v[0-9]*')}"
else
	if [ -z "${VERSION:-}" ] || [ -z "${REVISION:-}" ] || [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
		echo "buildvars: not a git checkout: set VERSION, REVISION and SOURCE_DATE_EPOCH" >&2
	fi
	: "${REVISION:=unknown}" "${SOURCE_DATE_EPOCH:=0}" "${VERSION:=v0.0.0-unknown}"
fi
case "$VERSION" in
v[0-9]*) ;;
*) VERSION="v0.0.0-g$VERSION" ;;
esac
DATE="$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)"
export VERSION REVISION SOURCE_DATE_EPOCH DATE
