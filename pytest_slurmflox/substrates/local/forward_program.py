"""Loopback port forwarder into a network namespace (run as its own process, standalone: no package imports).

The login node's sshd listens inside the cluster's namespaces. This process binds 127.0.0.1:<port> in the
host's network namespace, then moves itself into the login node's namespace (setns), so every connection it
accepts on the host side is relayed to <addr>:<port> inside: the host reaches the login endpoint through
loopback only, and no host interface is touched.

Usage: python forward_program.py LISTEN_HOST LISTEN_PORT NETNS_PATH TARGET_HOST TARGET_PORT
"""

from __future__ import annotations

import ctypes
import os
import selectors
import signal
import socket
import sys
import threading

CLONE_NEWNET = 0x40000000


def _setns(path: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns({path}): {os.strerror(err)}")
    finally:
        os.close(fd)


def _pump(a: socket.socket, b: socket.socket) -> None:
    sel = selectors.DefaultSelector()
    sel.register(a, selectors.EVENT_READ, b)
    sel.register(b, selectors.EVENT_READ, a)
    try:
        while True:
            for key, _ in sel.select():
                src: socket.socket = key.fileobj  # type: ignore[assignment]
                data = src.recv(65536)
                if not data:
                    return
                key.data.sendall(data)
    except OSError:
        return
    finally:
        sel.close()
        a.close()
        b.close()


def _serve(client: socket.socket, target: tuple[str, int]) -> None:
    try:
        upstream = socket.create_connection(target, timeout=10)
        upstream.settimeout(None)
    except OSError:
        client.close()
        return
    _pump(client, upstream)


def main(argv: list[str]) -> int:
    listen_host, listen_port, netns, target_host, target_port = argv
    lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.bind((listen_host, int(listen_port)))
    lsock.listen(64)
    _setns(netns)  # from here on, new sockets are created inside the login node's namespace
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    print(f"forwarding {listen_host}:{listen_port} -> {target_host}:{target_port} in {netns}", flush=True)
    while True:
        client, _ = lsock.accept()
        threading.Thread(target=_serve, args=(client, (target_host, int(target_port))), daemon=True).start()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
