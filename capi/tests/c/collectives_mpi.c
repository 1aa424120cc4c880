/*
 * The checks of collectives.c through NCCL's canonical entry point: ranks
 * from mpirun, rank 0 calls ncclGetUniqueId (no NCCL_COMM_ID: a fresh root in
 * rank 0's process) and MPI_Bcast's its 128 bytes to the others. Built with
 * mpicc.
 */
/* First: common.h asks for POSIX 2008 before any system header. */
#include "coll_checks.h"

#include <mpi.h>

#define MPICHECK(call)                                                  \
  do {                                                                  \
    int m_ = (call);                                                    \
    if (m_ != MPI_SUCCESS) die("%s returned MPI error %d", #call, m_); \
  } while (0)

int main(int argc, char** argv) {
  int rank, nranks;
  MPICHECK(MPI_Init(&argc, &argv));
  MPICHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  MPICHECK(MPI_Comm_size(MPI_COMM_WORLD, &nranks));
  g_rank = rank;
  if (getenv("NCCL_COMM_ID") || getenv("JITCCL_COMM_ID"))
    die("NCCL_COMM_ID / JITCCL_COMM_ID is set: this test passes the id with MPI_Bcast");
  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  if (rank == 0) NCCLCHECK(ncclGetUniqueId(&id));
  MPICHECK(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD));
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, nranks, id, rank));
  run_collective_checks(comm, rank, nranks, argc, argv);
  /* The ranks agree through MPI too that every one of them got here. */
  long mine = g_checks, least = 0;
  MPICHECK(MPI_Allreduce(&mine, &least, 1, MPI_LONG, MPI_MIN, MPI_COMM_WORLD));
  EXPECT(least > 0, "the fewest checks passed by a rank: expected > 0, got %ld", least);
  NCCLCHECK(ncclCommFinalize(comm));
  NCCLCHECK(ncclCommDestroy(comm));
  MPICHECK(MPI_Finalize());
  report_passed();
  return 0;
}
