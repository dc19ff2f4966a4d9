#!/bin/sh
# floodgate's postrm: systemd forgets the unit. The floodgate user stays
# (Debian leaves system users in place: files may still belong to it).
set -e
if [ -z "${DPKG_ROOT:-}" ] && [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null || true
fi
exit 0
