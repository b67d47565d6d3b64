"""Every Kubernetes label, annotation and taint key the project writes or reads, in one place.

The rendered worker NodeSet writes them (render/values.py), the qemu substrate's kubeadm and containerd config
name them, and the checks read them back from the live objects (kubechecks.py, nodeset.py): one spelling, so a key
the renderer writes is the key a check reads.
"""

from __future__ import annotations

# -- annotations on a worker pod (the Flox shim and our runtime revision) ------------------------------------
#: The Flox environment the shim activates for the pod (floxdocs docs/k8s/intro.md, docs/k8s/config.md).
ANNOTATION_ENVIRONMENT = "flox.dev/environment"
ANNOTATION_ACTIVATE_MODE = "flox.dev/activate-mode"
ANNOTATION_SKIP_CONTAINERS = "flox.dev/skip-containers"
#: The runtime revision the worker was rendered for (revision.runtime_revision).
ANNOTATION_REVISION = "slinky.local/runtime-revision"
LABEL_REVISION_SHORT = "slinky.local/runtime-revision-short"

# -- node labels and taints -------------------------------------------------------------------------------------
#: Nodes that run native Slurm workers (selected by the worker NodeSet, tainted so nothing else lands there).
LABEL_NATIVE_WORKER = "slinky.local/native-worker"
TAINT_NATIVE_WORKER = f"{LABEL_NATIVE_WORKER}=true:NoSchedule"
#: Nodes whose containerd has the Flox shim (the RuntimeClass ``flox`` schedules there).
LABEL_FLOX_NODE = "flox.dev/enabled"
#: kubeadm's control-plane label and taint key.
LABEL_CONTROL_PLANE = "node-role.kubernetes.io/control-plane"
