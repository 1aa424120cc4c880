/*
 * Every collective checked against a local reference (see coll_checks.h for
 * the options), on ranks started by `jitccl launch -n N`: rank and size from
 * RANK / WORLD_SIZE, the unique id from NCCL_COMM_ID (every rank calls
 * ncclGetUniqueId and gets the same id; rank 0's init starts the root).
 */
#include "coll_checks.h"

int main(int argc, char** argv) {
  int rank, nranks;
  rank_from_env(&rank, &nranks);
  ncclUniqueId id = uid_from_env();
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, nranks, id, rank));
  run_collective_checks(comm, rank, nranks, argc, argv);
  NCCLCHECK(ncclCommFinalize(comm));
  NCCLCHECK(ncclCommDestroy(comm));
  report_passed();
  return 0;
}
