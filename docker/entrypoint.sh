#!/bin/bash
# Container entrypoint: turn the container's configuration into one mqbroker command line.
#
# The broker reads defaults, then a broker.conf (-c), then --set KEY=VALUE (later wins). This
# script builds, in that order:
#   -c "$MINI_ROCKETMQ_CONF"              when the file exists (default /etc/mini-rocketmq/broker.conf,
#                                         meant to be mounted read-only);
#   --set for the image's defaults         only for keys that neither the file nor the environment
#                                         sets, so a default never overrides what an operator wrote;
#   --set brokerIP1=$ROCKETMQ_BROKER_IP1   the one setting almost everybody needs;
#   --set KEY=VALUE for each BROKER_CONF_KEY=VALUE variable (KEY spelt as in broker.conf, e.g.
#                                         BROKER_CONF_listenPort=20911), in name order;
#   "$@"                                   the container's arguments, last so they win.
# A first argument that does not start with "-" is run as a command instead (e.g. `bash`, or the
# benchmark service's `python -m bench ...`), as most images do.
#
# Why brokerIP1 defaults to 127.0.0.1: the broker advertises brokerIP1:listenPort in the routes that
# the name server hands to clients, and clients then connect to that address. Left to itself the
# broker picks its first non-loopback address, which inside a container is the container's private
# bridge address: the host cannot route to it, so clients on the host get routes but no broker
# (the best-known complaint about RocketMQ's own images). With ports published on the host under
# the same numbers (-p 9876:9876 -p 10911:10911), 127.0.0.1 is the address that works for clients on
# the host. Clients on other machines need ROCKETMQ_BROKER_IP1=<the host's address>; clients in other
# containers can share the broker's network namespace (compose: network_mode "service:broker").
set -euo pipefail

readonly default_conf=/etc/mini-rocketmq/broker.conf
conf="${MINI_ROCKETMQ_CONF:-$default_conf}"

die() {
    echo "mini-rocketmq-entrypoint: $*" >&2
    exit 2
}

if [[ $# -gt 0 && "$1" != -* ]]; then
    exec "$@"
fi

args=()
if [[ -f "$conf" ]]; then
    [[ -r "$conf" ]] || die "$conf exists but is not readable by uid $(id -u)"
    args+=(-c "$conf")
elif [[ -n "${MINI_ROCKETMQ_CONF:-}" ]]; then
    die "MINI_ROCKETMQ_CONF=$MINI_ROCKETMQ_CONF: no such file (mount it, or unset the variable)"
fi

# The BROKER_CONF_* variable names, sorted so the command line does not depend on env order.
# compgen lists names only, so values with newlines or "=" cannot fool it.
mapfile -t conf_vars < <(compgen -e | grep '^BROKER_CONF_' | LC_ALL=C sort || true)

# Is KEY set by the mounted file or by the environment? (A Java properties key ends at "=", ":" or
# whitespace.)
is_configured() {
    local key="$1" var
    if [[ -f "$conf" ]] && grep -Eq "^[[:space:]]*${key}[[:space:]]*[=:[:space:]]" "$conf"; then
        return 0
    fi
    for var in "${conf_vars[@]}"; do
        [[ "${var#BROKER_CONF_}" == "$key" ]] && return 0
    done
    [[ "$key" == brokerIP1 && -n "${ROCKETMQ_BROKER_IP1:-}" ]]
}

# The image's defaults: see above for brokerIP1; the store lives on the image's volume; a fixed
# brokerName instead of upstream's host name, which in a container is a random id that would
# change every time the container is re-created on the same store.
for default in brokerIP1=127.0.0.1 storePathRootDir=/home/rocketmq/store brokerName=broker-a; do
    is_configured "${default%%=*}" || args+=(--set "$default")
done

if [[ -n "${ROCKETMQ_BROKER_IP1:-}" ]]; then
    args+=(--set "brokerIP1=$ROCKETMQ_BROKER_IP1")
fi

for var in "${conf_vars[@]}"; do
    key="${var#BROKER_CONF_}"
    [[ -n "$key" ]] || die "BROKER_CONF_ needs a broker.conf key after it, e.g. BROKER_CONF_listenPort=10911"
    args+=(--set "$key=${!var}")
done

exec mqbroker "${args[@]}" "$@"
