#!/bin/sh
# MPICH's launcher for the two "hosts" of tests/test_distributed.py: mpiexec runs it instead of
# ssh, as `netns_launcher.sh -x HOST COMMAND...`, and it runs COMMAND (the hydra proxy that
# starts that host's ranks) in HOST's network namespace.  TINYOPT_NETNS_HOSTS maps hosts to
# namespaces: "10.213.0.1=ns-a 10.213.0.2=ns-b".
while [ "${1#-}" != "$1" ]; do shift; done   # ssh options (-x)
host=$1
shift
for pair in $TINYOPT_NETNS_HOSTS; do
    if [ "${pair%%=*}" = "$host" ]; then
        exec ip netns exec "${pair#*=}" sh -c "$*"
    fi
done
echo "netns_launcher.sh: no namespace for host $host (TINYOPT_NETNS_HOSTS=$TINYOPT_NETNS_HOSTS)" >&2
exit 1
