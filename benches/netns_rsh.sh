#!/bin/sh
# OpenMPI's remote shell for hosts that are network namespaces on this machine
# (`mpirun --mca plm_rsh_agent benches/netns_rsh.sh`, benches/peers.sh): mpirun calls it as
# it would call ssh, `netns_rsh.sh HOST COMMAND...`, HOST being the namespace's name, and it
# runs the command line in that namespace through a shell, as sshd would.
#
# Every "host" here shares one hostname and one /tmp, where OpenMPI's daemons keep their
# session folders and the machine's topology in shared memory by hostname: daemons of two
# namespaces would take each other's. So each namespace's daemon gets a TMPDIR of its own,
# a folder named for it under NETNS_RSH_TMPDIR (default: TMPDIR, or /tmp).
[ $# -ge 2 ] || { echo "usage: netns_rsh.sh NAMESPACE COMMAND..." >&2; exit 2; }
ns=$1
shift
dir=${NETNS_RSH_TMPDIR:-${TMPDIR:-/tmp}}/$ns
mkdir -p "$dir" || exit 1
TMPDIR=$dir exec ip netns exec "$ns" /bin/sh -c "$*"
