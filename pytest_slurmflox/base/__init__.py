"""The ground floor: running a command on a host (``run``: the local, SSH and pod-exec runners, their ``Result`` and
the one quoting helper; ``kubeexec``: why a pod exec could not run;
``sshconnect``: paramiko routes, keys and host keys) and waiting with a deadline
(``waits``). Every folder may import it; it imports nothing of the package outside itself.
"""
