"""MPI that talks: a program whose ranks exchange messages on every pair of workers, and the judging of its lines.

Why: Open MPI opens its transports lazily, on the first message; a world whose ranks all start can still be unable
to exchange one message between two workers. The program does a ring (rank r sends to r+1), then every pair in
``size - 1`` shifted rounds (round k: rank r sends to r+k and hears from r-k), so each rank opens at most one new
connection per round and no two ranks connect to each other at once: the cost grows with the peers, not with a storm
of ``size - 1`` simultaneous connects per rank. Each receive is polled with ``MPI_Test`` (naps growing to 20 ms, so
many ranks sharing cores do not spin) until its own deadline: :data:`WAIT_S` for the ring and for each round, and
:func:`exchange_seconds` for all rounds together. A rank that heard a silence stays until that end before it exits
(a rank that exits without finalizing ends the whole step, and the others' pairs would look silent too); an
``alarm`` ends a rank that hangs anyway. Each rank prints ``rank=R size=N``, then ``heard <ring|all> from=P`` or
``silent <ring|all> from=P`` per expected sender, so a pair that cannot talk is named from what the receiving side
saw (or did not live to see).
"""

from __future__ import annotations

#: Seconds the ring, and each round of the all-pairs exchange, may wait for its message.
WAIT_S = 20

#: Seconds the all-pairs exchange may take per peer on top of :data:`WAIT_S` (an upper bound, not an expectation:
#: on a host where every worker shares two cores a round takes a fraction of it).
PER_PEER_S = 0.5

#: Pairs named in a failure message before the rest is counted (every pair is in the step's own evidence).
NAMED_PAIRS = 40


def exchange_seconds(size: int) -> float:
    """Seconds every round of the all-pairs exchange may take together in a world of ``size`` ranks; the program is
    ended after ``WAIT_S + exchange_seconds(size) + 10``."""
    return WAIT_S + PER_PEER_S * max(size - 1, 0)


def program_seconds(size: int) -> float:
    """Seconds the program may run in all (its own ``alarm``): the ring, every round, and ten to end."""
    return WAIT_S + exchange_seconds(size) + 10


MPI_TALK = r"""
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
static int wait_for(MPI_Request *r, double deadline) {
    int done = 0, nap = 1000;
    while (!done && MPI_Wtime() < deadline) {
        if (MPI_Test(r, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return 0;
        if (!done) { usleep(nap); if (nap < 20000) nap += nap / 2; }
    }
    return done;
}
int main(int argc, char **argv) {
    int rank, size, silent = 0;
    MPI_Init(&argc, &argv);
    double all_s = argc > 1 ? atof(argv[1]) : WAIT_S;  /* every round together (exchange_seconds) */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    alarm((unsigned)(WAIT_S + all_s + 10));
    printf("rank=%d size=%d\n", rank, size); fflush(stdout);
    int prev = (rank + size - 1) % size, next = (rank + 1) % size, in = -1;
    MPI_Request ring[2];
    MPI_Irecv(&in, 1, MPI_INT, prev, 1, MPI_COMM_WORLD, &ring[0]);
    MPI_Isend(&rank, 1, MPI_INT, next, 1, MPI_COMM_WORLD, &ring[1]);
    int ok = wait_for(&ring[0], MPI_Wtime() + WAIT_S) && in == prev;
    printf("%s ring from=%d\n", ok ? "heard" : "silent", prev); fflush(stdout);
    silent += !ok;
    int *ins = calloc(size, sizeof(int));
    MPI_Request *sends = calloc(size, sizeof(MPI_Request));
    sends[0] = MPI_REQUEST_NULL;
    double end = MPI_Wtime() + all_s;
    for (int k = 1; k < size; k++) {
        int to = (rank + k) % size, from = (rank + size - k) % size;
        MPI_Request recv;
        ins[from] = -1;
        MPI_Irecv(&ins[from], 1, MPI_INT, from, 2, MPI_COMM_WORLD, &recv);
        MPI_Isend(&rank, 1, MPI_INT, to, 2, MPI_COMM_WORLD, &sends[k]);
        double round_end = MPI_Wtime() + WAIT_S;
        ok = wait_for(&recv, round_end < end ? round_end : end) && ins[from] == from;
        printf("%s all from=%d\n", ok ? "heard" : "silent", from); fflush(stdout);
        silent += !ok;
    }
    if (silent) {
        /* a silent peer: no MPI_Finalize (it would wait for that peer); and no early exit either: a rank that ends
           without finalizing ends the whole step (Slurm's pmix plugin), so it stays, serving its own sends, until
           the exchange's end, and the other ranks finish their rounds and name only the pairs that did not talk */
        while (MPI_Wtime() < end) {
            int all_sent = 0;
            MPI_Testall(size, sends, &all_sent, MPI_STATUSES_IGNORE);
            usleep(20000);
        }
        return 3;
    }
    MPI_Waitall(2, ring, MPI_STATUSES_IGNORE);
    MPI_Waitall(size, sends, MPI_STATUSES_IGNORE);
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


def pairs_message(pairs: list[str]) -> list[str]:
    """The silent pairs as a failure names them: the first :data:`NAMED_PAIRS` as ``<pair> cannot talk``, then how
    many more (a world where nothing talks has ``size * size`` of them)."""
    named = [f"{pair} cannot talk" for pair in pairs[:NAMED_PAIRS]]
    more = len(pairs) - NAMED_PAIRS
    return named + ([f"and {more} more pairs cannot talk ({len(pairs)} in all)"] if more > 0 else [])
