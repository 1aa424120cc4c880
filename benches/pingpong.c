/* Cross-CPU round trip: two threads, pinned to the first two CPUs this process may run on,
   hand a counter back and forth through two cache lines (each spins with pause, as the
   collectives' waits do). Prints the mean round trip in ns over the rounds given (default
   100000). tools/compare-mpi.sh prints it beside its rows: on a VM it can change by 10x
   from one second to the next (vCPUs moved between SMT siblings, cores and sockets), and
   every small-message figure follows it. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#define RELAX() __builtin_ia32_pause()
#else
#define RELAX() __asm__ __volatile__("yield")
#endif

static volatile uint64_t ping __attribute__((aligned(128)));
static volatile uint64_t pong __attribute__((aligned(128)));
static long rounds = 100000;
static int cpus[2];

static int pin(int cpu) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  return pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}

/* Plays its part even if it could not pin (the main thread waits for it): says so after. */
static void* peer(void* arg) {
  (void)arg;
  void* pinned = pin(cpus[1]) == 0 ? 0 : (void*)1;
  for (long i = 1; i <= rounds; i++) {
    while (__atomic_load_n(&ping, __ATOMIC_ACQUIRE) != (uint64_t)i) RELAX();
    __atomic_store_n(&pong, (uint64_t)i, __ATOMIC_RELEASE);
  }
  return pinned;
}

int main(int argc, char** argv) {
  if (argc > 1) rounds = atol(argv[1]);
  if (rounds <= 0) {
    fprintf(stderr, "pingpong: rounds must be a positive count, not '%s'\n", argv[1]);
    return 2;
  }
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) {
    perror("pingpong: sched_getaffinity");
    return 1;
  }
  int found = 0;
  for (int c = 0; c < CPU_SETSIZE && found < 2; c++)
    if (CPU_ISSET(c, &allowed)) cpus[found++] = c;
  if (found < 2) {
    fprintf(stderr, "pingpong: this process may run on one CPU only\n");
    return 1;
  }
  if (pin(cpus[0]) != 0) {
    fprintf(stderr, "pingpong: cannot pin to CPU %d\n", cpus[0]);
    return 1;
  }
  pthread_t t;
  if (pthread_create(&t, 0, peer, 0) != 0) {
    fprintf(stderr, "pingpong: cannot start a thread\n");
    return 1;
  }
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (long i = 1; i <= rounds; i++) {
    __atomic_store_n(&ping, (uint64_t)i, __ATOMIC_RELEASE);
    while (__atomic_load_n(&pong, __ATOMIC_ACQUIRE) != (uint64_t)i) RELAX();
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  void* failed;
  pthread_join(t, &failed);
  if (failed) {
    fprintf(stderr, "pingpong: cannot pin to CPU %d\n", cpus[1]);
    return 1;
  }
  double ns = ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / rounds;
  printf("%.0f\n", ns);
  return 0;
}
