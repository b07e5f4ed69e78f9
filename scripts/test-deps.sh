#!/bin/sh
# The system packages the test suite drives, from Debian, when they are missing: chromium for the
# browser tests, redis-server for the bus tests, openssl for their TLS certificates, nginx, haproxy
# and caddy for the proxy tests. The tests start their own servers on free ports, so the services
# the packages start are stopped.
# Needs root (or sudo) the first time only.
set -eu
missing=""
command -v chromium >/dev/null 2>&1 || missing="$missing chromium"
command -v redis-server >/dev/null 2>&1 || missing="$missing redis-server"
command -v openssl >/dev/null 2>&1 || missing="$missing openssl"
# nginx and haproxy install to /usr/sbin, which a non-root PATH may lack.
[ -x /usr/sbin/nginx ] || missing="$missing nginx"
[ -x /usr/sbin/haproxy ] || missing="$missing haproxy"
[ -x /usr/bin/caddy ] || missing="$missing caddy"
[ -z "$missing" ] && exit 0
run() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }
export DEBIAN_FRONTEND=noninteractive
run apt-get update -qq >/dev/null
# shellcheck disable=SC2086 # one word per package
run apt-get install -y -qq $missing >/dev/null
for service in redis-server nginx haproxy caddy; do
  case " $missing " in *" $service "*) run service "$service" stop >/dev/null 2>&1 || true ;; esac
done
