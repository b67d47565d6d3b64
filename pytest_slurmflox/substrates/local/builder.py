"""The node image's builder stage: a throw-away chroot that compiles what Debian does not package.

``libnss_slurm`` (``LaunchParameters=enable_nss_slurm`` needs it to resolve names of users the worker has no
account for) from Debian's own slurm-wlm source, against the packaged libslurm, and a tiny MPI program
(``mpi-hello``). image.py runs it with mmdebstrap (stage 1 of 2) and copies ``/build/out`` into the node rootfs.
The texts here take part in the image's recipe key (image.recipe_key).
"""

from __future__ import annotations

from .mpistack import mpi_stack

BUILDER_PACKAGES = (
    "build-essential",
    "dpkg-dev",
    "libslurm-dev",
    "libmunge-dev",
    "pkg-config",
)


def builder_packages(suite: str) -> tuple[str, ...]:
    """The builder chroot's packages for ``suite``: BUILDER_PACKAGES and the suite's MPI (mpistack.py), whose
    mpicc compiles ``mpi-hello`` for the node image that carries the same MPI."""
    return BUILDER_PACKAGES + mpi_stack(suite).builder_packages


MPI_HELLO_C = r"""
#include <mpi.h>
#include <stdio.h>
#include <unistd.h>
int main(int argc, char **argv) {
    int rank = 0, size = 0;
    char host[256] = "";
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    gethostname(host, sizeof host - 1);
    /* allreduce proves the ranks really talk to each other, not just that they started */
    int sum = 0;
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    printf("mpi-hello rank=%d size=%d host=%s sum=%d\n", rank, size, host, sum);
    MPI_Finalize();
    return 0;
}
"""

#: Runs inside the builder chroot (bash -eu). Writes artifacts to /build/out.
BUILDER_SCRIPT = r"""
set -euo pipefail
mkdir -p /build/out /build/src
cd /build/src
echo "I: fetching Debian's slurm-wlm source package"
# Some mirrors serve the upstream tarball but not the .dsc/.debian.tar: then build from the upstream source of
# the same version (Debian's patches do not touch contribs/nss_slurm).
apt-get source --download-only slurm-wlm >/build/apt-source.log 2>&1 || true
if ls ./slurm-wlm_*.dsc >/dev/null 2>&1 && ls ./slurm-wlm_*.debian.tar.* >/dev/null 2>&1; then
  dpkg-source --no-check -x ./slurm-wlm_*.dsc slurm >/build/dpkg-source.log 2>&1 \
    || { cat /build/dpkg-source.log; exit 1; }
elif ls ./slurm-wlm_*.orig.tar.* >/dev/null 2>&1; then
  echo "I: the mirror has no .dsc for slurm-wlm; using its upstream tarball"
  mkdir slurm && tar -xf ./slurm-wlm_*.orig.tar.* -C slurm --strip-components=1
else
  cat /build/apt-source.log; exit 1
fi
cd slurm
echo "I: configuring slurm-wlm (for config.h only)"
./configure --prefix=/usr --sysconfdir=/etc/slurm --libdir=/usr/lib/x86_64-linux-gnu \
  --localstatedir=/var >/build/configure.log 2>&1 || { tail -n 40 /build/configure.log; exit 1; }
echo "I: compiling libnss_slurm against the packaged libslurm"
gcc -shared -fPIC -O2 -I. -Islurm -Isrc/common \
  -o /build/out/libnss_slurm.so.2 contribs/nss_slurm/libnss_slurm.c \
  -Wl,-soname,libnss_slurm.so.2 -Wl,--no-undefined -lslurm
echo "I: compiling mpi-hello"
mpicc -O2 -o /build/out/mpi-hello /build/mpi-hello.c
dpkg-query -W -f='${Version}' libslurm-dev > /build/out/slurm-version
# libnss_slurm links libslurm.so.N: the node image needs that runtime package (its name changes per release).
dpkg-query -W -f='${Depends}\n' libslurm-dev | tr ',' '\n' | grep -o 'libslurm[0-9][a-z0-9]*' | head -n 1 \
  > /build/out/libslurm-package
test -s /build/out/libslurm-package
"""

#: sid's builder (BUILDER_SCRIPT with this in place of its source fetch). Measured on this host's mirror: it lists
#: slurm-wlm 26.05.5-1 in sid's Sources but serves none of its files (.dsc, orig, debian tarballs: 404), while
#: trixie's 24.11.5 orig tarball downloads. So libnss_slurm comes from the newest source the mirror serves (sid's,
#: then trixie's deb-src, newest version first), built against sid's libslurm; the version taken is recorded.
#: 24.11's libnss_slurm.c equals 26.05's but for a comment, and the libslurm functions it calls kept their
#: signatures; one internal struct it reads did not: 26.05 added start_time to step_loc_t (upstream commit
#: bf60296913, src/common/stepd_api.h), which is added to an older tree's header before compiling.
NEWEST_SERVED_SOURCE = r"""
echo "I: fetching the newest slurm-wlm source package the mirror serves"
want=$(dpkg-query -W -f='${Version}' libslurm-dev)
got=''
for v in $(apt-cache showsrc slurm-wlm | sed -n 's/^Version: //p' | sort -rVu); do
  rm -f ./slurm-wlm_*
  apt-get source --download-only "slurm-wlm=$v" >>/build/apt-source.log 2>&1 || true
  if ls ./slurm-wlm_*.orig.tar.* >/dev/null 2>&1; then got=$v; break; fi
  echo "I: the mirror lists slurm-wlm $v but serves none of its source files"
done
test -n "$got" || { cat /build/apt-source.log; exit 1; }
echo "I: libnss_slurm from slurm-wlm $got, against libslurm $want"
mkdir -p /build/out && echo "$got" > /build/out/nss-slurm-source
mkdir slurm && tar -xf ./slurm-wlm_*.orig.tar.* -C slurm --strip-components=1
if dpkg --compare-versions "$want" ge 26.05 && dpkg --compare-versions "$got" lt 26.05; then
  loc='/^typedef struct step_location {/,/} step_loc_t;/'
  sed -i "$loc"' s/^\(\tuint16_t protocol_version;\)$/\1\n\ttime_t start_time;/' slurm/src/common/stepd_api.h
  sed -n "$loc"'p' slurm/src/common/stepd_api.h | grep -q 'time_t start_time;'
fi
"""
#: Suites whose mirror serves no source of their own Slurm: the other suites whose deb-src the builder reads.
SOURCE_FALLBACK_SUITES = {"sid": ("trixie",)}


def builder_script(suite: str) -> str:
    """BUILDER_SCRIPT for ``suite``: trixie's and bookworm's text stays byte-identical (their recipe keys and
    cached images are unchanged); sid's takes the newest source the mirror serves (NEWEST_SERVED_SOURCE)."""
    if suite not in SOURCE_FALLBACK_SUITES:
        return BUILDER_SCRIPT
    start = BUILDER_SCRIPT.index('echo "I: fetching')
    end = BUILDER_SCRIPT.index("cd slurm\n")
    return BUILDER_SCRIPT[:start] + NEWEST_SERVED_SOURCE.lstrip("\n") + BUILDER_SCRIPT[end:]
