"""TB's programs: the C sources the baselines compile on a worker (with its own mpicc, as T6's) and run there.

Each prints ``<metric> <subject> <value>`` lines (judges/baselines.py ``parse_lines``). The ping-pong is an MPI
program over the cohort; the triad runs one task per worker, the workers taking turns trial by trial through marks
on the shared home (files under a path prefix the caller gives), so workers that share a host's cores never
measure each other.
"""

from __future__ import annotations

PINGPONG = r"""
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define NAME 256
static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
static double pingpong(int peer, int initiator, char *buf, int bytes, int iters) {
    double *trip = calloc(iters, sizeof(double));
    for (int i = -2; i < iters; i++) {  /* two warm-up round trips */
        double t0 = MPI_Wtime();
        if (initiator) {
            MPI_Send(buf, bytes, MPI_CHAR, peer, 1, MPI_COMM_WORLD);
            MPI_Recv(buf, bytes, MPI_CHAR, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(buf, bytes, MPI_CHAR, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(buf, bytes, MPI_CHAR, peer, 1, MPI_COMM_WORLD);
        }
        if (i >= 0) trip[i] = MPI_Wtime() - t0;
    }
    qsort(trip, iters, sizeof(double), by_value);
    double median = iters % 2 ? trip[iters / 2] : (trip[iters / 2 - 1] + trip[iters / 2]) / 2;
    free(trip);
    return median / 2;  /* one way: half the median round trip */
}
/* osu_bw's form: the sender posts a window of messages, the receiver takes them all and answers one byte; the
   bandwidth is one way, sender to receiver (a throttled way out, or in, shows in that direction alone), from the
   fastest of the windows (a throttled link is slow in every window; a healthy one preempted by other work on a
   2-core host was 0.58x of the other pairs by the median window, three rounds). */
#define WINDOW 8
static double stream(int peer, int sender, char *buf, int bytes, int iters) {
    double *t = calloc(iters, sizeof(double)); MPI_Request req[WINDOW]; char ack = 0;
    for (int i = -1; i < iters; i++) {  /* one warm-up window */
        double t0 = MPI_Wtime();
        for (int w = 0; w < WINDOW; w++) {
            if (sender) MPI_Isend(buf, bytes, MPI_CHAR, peer, 2, MPI_COMM_WORLD, &req[w]);
            else MPI_Irecv(buf, bytes, MPI_CHAR, peer, 2, MPI_COMM_WORLD, &req[w]);
        }
        MPI_Waitall(WINDOW, req, MPI_STATUSES_IGNORE);
        if (sender) MPI_Recv(&ack, 1, MPI_CHAR, peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        else MPI_Send(&ack, 1, MPI_CHAR, peer, 3, MPI_COMM_WORLD);
        if (i >= 0) t[i] = MPI_Wtime() - t0;
    }
    qsort(t, iters, sizeof(double), by_value);
    double fastest = t[0];  /* the best window, STREAM's way: a preempted window on shared cores is not the link */
    free(t);
    return (double)bytes * WINDOW / fastest;  /* bytes per second */
}
int main(int argc, char **argv) {
    int me, n; char name[NAME] = {0}; char *all; char *buf = calloc(1, 1 << 20);
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &me); MPI_Comm_size(MPI_COMM_WORLD, &n);
    const char *node = getenv("SLURMD_NODENAME"); strncpy(name, node ? node : "?", NAME - 1);
    all = calloc(n, NAME);
    MPI_Allgather(name, NAME, MPI_CHAR, all, NAME, MPI_CHAR, MPI_COMM_WORLD);
    for (int phase = 0; phase < (n > 2 ? 2 : 1); phase++) {
        for (int p = 0; p < n; p++) {
            int peer = (p + (phase ? n - 1 : 1)) % n;
            if (me == p || me == peer) {
                int other = me == p ? peer : p, initiator = me == p;
                double lat = pingpong(other, initiator, buf, 8, 200);
                double bw = stream(other, initiator, buf, 1 << 20, 10);
                if (initiator) {
                    printf("mpi_latency %s->%s %.3f\n", name, all + other * NAME, lat * 1e6);
                    printf("mpi_bandwidth %s->%s %.1f\n", name, all + other * NAME, bw / 1e6);
                    fflush(stdout);
                }
            }
            MPI_Barrier(MPI_COMM_WORLD);
        }
    }
    MPI_Finalize();
    return 0;
}
"""

#: How long one triad trial runs at least (ms): over the CFS bandwidth period, so a CPU quota shows in every trial.
TRIAL_MS = 150
#: How many trials each worker runs; the best counts (STREAM's way).
TRIALS = 3
#: How long a worker waits for the mark of the trial before its turn, once, before it stops waiting (seconds).
TURN_WAIT = 20
TRIAD = (
    f"#define TRIAL_MS {TRIAL_MS}\n#define TRIALS {TRIALS}\n#define TURN_WAIT {TURN_WAIT}\n"
    + r"""
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#define N (2 * 1024 * 1024)
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
/* Trial t of rank r runs after the mark of the trial before it in the order (0,0) (0,1) .. (0,n-1) (1,0) ..:
   the workers take turns trial by trial, so a load that comes and goes on the host falls on every worker's
   trials alike. A mark that never comes is waited for once (its rank is gone), then no more. Each look opens the
   marks' directory first: on an NFS home that open revalidates the directory (close-to-open: Linux fs/nfs/dir.c,
   nfs_lookup_verify_inode), so a mark another worker made is not hidden behind a cached "no such file" until the
   directory's attributes expire (nfs(5) lookupcache, acdirmin: 30 s by default). */
static int patient = 1;
static void mark(const char *turn, int trial, int rank, int waiting) {
    char path[4096], dir[4096];
    snprintf(path, sizeof path, "%s-%d-%d", turn, trial, rank);
    if (!waiting) { FILE *f = fopen(path, "w"); if (f) fclose(f); return; }
    snprintf(dir, sizeof dir, "%s", turn);
    char *slash = strrchr(dir, '/');
    if (slash) *(slash == dir ? slash + 1 : slash) = 0; else snprintf(dir, sizeof dir, ".");
    for (int i = 0; patient && i < TURN_WAIT * 100; i++) {
        int fd = open(dir, O_RDONLY | O_DIRECTORY);
        if (fd >= 0) close(fd);
        if (access(path, F_OK) == 0) return;
        usleep(10000);
    }
    patient = 0;
}
int main(int argc, char **argv) {
    const char *turn = argc > 1 ? argv[1] : NULL, *id = getenv("SLURM_PROCID"), *ids = getenv("SLURM_NTASKS");
    int rank = id ? atoi(id) : 0, size = ids ? atoi(ids) : 1;
    double *a = malloc(N * sizeof(double)), *b = malloc(N * sizeof(double)), *c = malloc(N * sizeof(double));
    double s = 3.0, check = 0, best = 0;
    for (long i = 0; i < N; i++) { a[i] = 0; b[i] = 1; c[i] = 2; }
    for (int trial = 0; trial < TRIALS; trial++) {
        if (turn && (trial || rank)) mark(turn, rank ? trial : trial - 1, rank ? rank - 1 : size - 1, 1);
        long passes = 0; double t0 = now(), secs;
        do { for (long i = 0; i < N; i++) a[i] = b[i] + s * c[i]; check += a[passes++ % N]; }
        while ((secs = now() - t0) < TRIAL_MS / 1e3);
        if (turn) mark(turn, trial, rank, 0);
        double rate = 3.0 * 8 * N * passes / secs / 1e6;
        if (rate > best) best = rate;
    }
    const char *node = getenv("SLURMD_NODENAME");
    printf("memory_triad %s %.1f\n", node ? node : "?", best);
    return check == 0;
}
"""
)
