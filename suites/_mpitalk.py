"""MPI that talks: a program whose ranks exchange messages on every pair of workers, and the judging of its lines.

Why: Open MPI opens its transports lazily, on the first message; a world whose ranks all start can still be unable
to exchange one message between two workers. The program does a ring (rank r sends to r+1) and an all-to-all (every
rank sends to every other), each receive polled with ``MPI_Test`` until a deadline measured with ``MPI_Wtime``
(:data:`WAIT_S`); an ``alarm`` ends a rank that hangs anyway (in ``MPI_Finalize`` after a silent peer). Each rank
prints ``rank=R size=N``, then ``heard <ring|all> from=P`` or ``silent <ring|all> from=P`` per expected sender, so a
pair that cannot talk is named from what the receiving side saw (or did not live to see).
"""

from __future__ import annotations

#: Seconds each exchange may wait for its messages; the whole program is ended after ``2 * WAIT_S + 10``.
WAIT_S = 20

MPI_TALK = r"""
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
static int wait_for(MPI_Request *r, double deadline) {
    int done = 0;
    while (!done && MPI_Wtime() < deadline) {
        if (MPI_Test(r, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return 0;
        if (!done) usleep(1000);
    }
    return done;
}
int main(int argc, char **argv) {
    int rank, size, silent = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    alarm(2 * WAIT_S + 10);
    printf("rank=%d size=%d\n", rank, size); fflush(stdout);
    int prev = (rank + size - 1) % size, next = (rank + 1) % size, in = -1;
    MPI_Request ring[2];
    MPI_Irecv(&in, 1, MPI_INT, prev, 1, MPI_COMM_WORLD, &ring[0]);
    MPI_Isend(&rank, 1, MPI_INT, next, 1, MPI_COMM_WORLD, &ring[1]);
    int ok = wait_for(&ring[0], MPI_Wtime() + WAIT_S) && in == prev;
    printf("%s ring from=%d\n", ok ? "heard" : "silent", prev); fflush(stdout);
    silent += !ok;
    int *ins = calloc(size, sizeof(int));
    MPI_Request *req = calloc(2 * size, sizeof(MPI_Request));
    for (int p = 0; p < size; p++) {
        ins[p] = -1; req[p] = req[size + p] = MPI_REQUEST_NULL;
        if (p == rank) continue;
        MPI_Irecv(&ins[p], 1, MPI_INT, p, 2, MPI_COMM_WORLD, &req[p]);
        MPI_Isend(&rank, 1, MPI_INT, p, 2, MPI_COMM_WORLD, &req[size + p]);
    }
    double deadline = MPI_Wtime() + WAIT_S;
    for (int p = 0; p < size; p++) {
        if (p == rank) continue;
        ok = wait_for(&req[p], deadline) && ins[p] == p;
        printf("%s all from=%d\n", ok ? "heard" : "silent", p); fflush(stdout);
        silent += !ok;
    }
    if (silent) return 3;  /* a silent peer: no MPI_Finalize (it would wait for that peer) */
    MPI_Waitall(2, ring, MPI_STATUSES_IGNORE);
    MPI_Waitall(2 * size, req, MPI_STATUSES_IGNORE);
    MPI_Finalize();
    return 0;
}
""".replace("WAIT_S", str(WAIT_S))


def senders(rank: int, size: int) -> list[tuple[str, int]]:
    """The (exchange, sender rank) messages rank ``rank`` of a ``size``-rank world must hear."""
    return [("ring", (rank + size - 1) % size)] + [("all", p) for p in range(size) if p != rank]


def silent_pairs(lines: dict[str, list[str]], size: int) -> list[str]:
    """Every (sender -> receiver) pair of workers whose message did not arrive, by exchange: the receiver printed
    ``silent``, or did not print ``heard`` (it was ended first). ``lines`` is node -> its program lines; a node
    without a ``rank=`` line is not judged here (the start check names it)."""
    node_of: dict[int, str] = {}
    for node, own in lines.items():
        for line in own:
            if line.startswith("rank="):
                node_of[int(line.split("rank=")[1].split()[0])] = node
    pairs: list[str] = []
    for rank, node in sorted(node_of.items()):
        heard = set(lines[node])
        for kind, sender in senders(rank, size):
            if f"heard {kind} from={sender}" not in heard:
                pairs.append(f"{node_of.get(sender, f'rank {sender}')} -> {node} ({kind})")
    return pairs
