#!/bin/sh
# floodgate's prerm: stop the service before its binary goes away.
set -e
if [ -z "${DPKG_ROOT:-}" ] && [ -d /run/systemd/system ] && [ "$1" = remove ]; then
	systemctl disable --now floodgate.service >/dev/null || true
fi
exit 0
