#!/bin/sh
# floodgate's postinst: a system user and group of its own, then the
# service enabled and (re)started where systemd runs. It honours
# DPKG_ROOT (dpkg --root with --force-script-chrootless) by writing the
# user into that root and leaving systemd alone.
set -e

root="${DPKG_ROOT:-}"
if ! grep -q '^floodgate:' "$root/etc/group" 2>/dev/null; then
	if [ -n "$root" ]; then
		groupadd --prefix "$root" --system floodgate
	else
		groupadd --system floodgate
	fi
fi
if ! grep -q '^floodgate:' "$root/etc/passwd" 2>/dev/null; then
	if [ -n "$root" ]; then
		useradd --prefix "$root" --system --gid floodgate --no-create-home \
			--home-dir /nonexistent --shell /usr/sbin/nologin --comment "floodgate rate limiter" floodgate
	else
		useradd --system --gid floodgate --no-create-home \
			--home-dir /nonexistent --shell /usr/sbin/nologin --comment "floodgate rate limiter" floodgate
	fi
fi

if [ -z "$root" ] && [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null || true
	if [ -z "$2" ]; then
		# First installation: enabled and started, as Debian's services are.
		systemctl enable floodgate.service >/dev/null || true
		systemctl start floodgate.service || true
	else
		systemctl try-restart floodgate.service || true
	fi
fi
exit 0
