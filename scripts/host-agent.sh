#!/bin/sh
# Open MPI's rsh agent for the emulated hosts of scripts/hosts.sh: called as
# `host-agent.sh 10.77.0.1N COMMAND...` (as ssh would be), it runs the command in host N's
# network and UTS namespaces.
host="$1"; shift
n=$(( ${host##*.} - 10 ))
exec nsenter --net=/run/netns/ndt-host$n --uts=/run/ndt-hosts/uts-host$n -- /bin/sh -c "$*"
