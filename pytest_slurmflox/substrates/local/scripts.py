"""The two bash programs that make a namespace into a node. Written into ``<workdir>/local/scripts/``.

``node-boot.sh`` runs on the host side, already inside the node's fresh mount/UTS/IPC/PID namespaces (PID 1
there) and its network namespace. It assembles the node's root: an overlay (read-only image + the node's own
writable layer), its own /proc, /sys (with its own cgroups), /dev, /run and /tmp, the shared /home, the
cluster's Slurm config, the runtime store, and copies the node's secrets into its private /run. Then it becomes
``node-init.sh`` inside that root (chroot), still PID 1, so stopping that one process ends every process of the
node.

``node-init.sh`` starts the role's daemons. A worker first activates its realized runtime and runs the
production task-profile initializer inside it; only if that succeeds does slurmd start (fail closed). Progress
is written to ``/run/slurmflox/ctl/phase`` (the host's ``<node dir>/ctl/phase``) for the supervisor.
"""

from __future__ import annotations

NODE_BOOT_SH = r"""#!/bin/bash
# slurmflox local node boot (host side, PID 1 of the node's namespaces). Argument: the node's state dir.
set -euo pipefail
NODE_DIR=$1
# shellcheck disable=SC1091
. "$NODE_DIR/boot.env"
M=$NODE_DIR/merged
phase() { printf '%s\n' "$*" > "$NODE_DIR/ctl/phase.tmp" && mv -f "$NODE_DIR/ctl/phase.tmp" "$NODE_DIR/ctl/phase"; }
trap 'phase "failed: boot: line $LINENO exited $?"' ERR
phase booting
hostname "$NODE_NAME"
mount --make-rprivate /
mkdir -p "$NODE_DIR/upper" "$NODE_DIR/work" "$M"
mount -t overlay overlay -o "lowerdir=$LOWER,upperdir=$NODE_DIR/upper,workdir=$NODE_DIR/work" "$M"
mount -t proc proc "$M/proc"
mount -t sysfs -o ro,nosuid,nodev,noexec sysfs "$M/sys"
if [ -n "${CGROUP_CONTROLLERS:-}" ]; then
    # The node's own cgroups, where Slurm's cgroup/v1 plugin looks for them: we are in a cgroup namespace rooted
    # at the node's cgroup, so each hierarchy mounted here shows that cgroup as its root (and nothing above it).
    mount -t tmpfs -o mode=0755,size=64k,nosuid,nodev,noexec cgroup "$M/sys/fs/cgroup"
    for c in $CGROUP_CONTROLLERS; do
        mkdir "$M/sys/fs/cgroup/$c"
        mount -t cgroup -o "$c,nosuid,nodev,noexec" cgroup "$M/sys/fs/cgroup/$c"
    done
    mount -o remount,ro,nosuid,nodev,noexec "$M/sys/fs/cgroup"
fi
mount -t tmpfs -o mode=0755,size=256m tmpfs "$M/run"
mount -t tmpfs -o mode=1777,size=1g tmpfs "$M/tmp"
mount -t tmpfs -o mode=0755,size=1m tmpfs "$M/dev"
for d in null zero full random urandom tty; do
    touch "$M/dev/$d"
    mount --bind "/dev/$d" "$M/dev/$d"
done
mkdir -p "$M/dev/pts" "$M/dev/shm"
mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts "$M/dev/pts"
ln -s pts/ptmx "$M/dev/ptmx"
mount -t tmpfs -o mode=1777,size=256m tmpfs "$M/dev/shm"
ln -s /proc/self/fd "$M/dev/fd"
ln -s /proc/self/fd/0 "$M/dev/stdin"
ln -s /proc/self/fd/1 "$M/dev/stdout"
ln -s /proc/self/fd/2 "$M/dev/stderr"
bind_ro() { mount --bind "$1" "$2" && mount -o remount,bind,ro "$2"; }
mkdir -p "$M/etc/slurm" "$M/opt/slurmflox" "$M/flox/store"
[ -e "$M/etc/hosts" ] || : > "$M/etc/hosts"
if [ -n "${HOME_MOUNT:-}" ]; then  # workers: WORKER_HOME_PATH (empty: no shared home at all)
    mkdir -p "$M$HOME_MOUNT"
    mount --bind "$HOME_DIR" "$M$HOME_MOUNT"
fi
bind_ro "$CONF_DIR" "$M/etc/slurm"
bind_ro "$HOSTS_FILE" "$M/etc/hosts"
bind_ro "$SCRIPTS_DIR" "$M/opt/slurmflox"
bind_ro "$STORE_DIR" "$M/flox/store"
if [ -n "${NIX_DIR:-}" ]; then mkdir -p "$NIX_DIR" "$M/nix" && bind_ro "$NIX_DIR" "$M/nix"; fi  # #20: the Nix store
mkdir -p "$M/run/slurmflox/ctl"
mount --bind "$NODE_DIR/ctl" "$M/run/slurmflox/ctl"
install -m 0600 "$NODE_DIR/boot.env" "$M/run/slurmflox/node.env"
install -m 0400 "$MUNGE_KEY" "$M/run/slurmflox/munge.key"
if [ -n "${JWT_KEY:-}" ]; then  # ctl and db: auth/jwt verifies REST tokens with it (#13)
    install -m 0600 "$JWT_KEY" "$M/run/slurmflox/jwt_hs256.key"
fi
if [ "$NODE_ROLE" = db ]; then  # MariaDB's data under the work dir; slurmdbd's config and the storage password
    mkdir -p "$M/var/lib/mysql"
    if [ ! -e "$DB_DATA/mysql" ] && [ -d "$M/var/lib/mysql/mysql" ]; then
        # a fresh data dir starts as a copy of the one Debian's postinst initialized in the image (sparse: ~6 MB,
        # well under a second; mariadb-install-db takes seconds)
        cp -a --sparse=always "$M/var/lib/mysql/." "$DB_DATA/"
    fi
    mount --bind "$DB_DATA" "$M/var/lib/mysql"
    install -m 0600 "$DB_PASSWORD_FILE" "$M/run/slurmflox/db_password"
    install -m 0600 "$DBD_CONF" "$M/run/slurmflox/slurmdbd.conf"
fi
if [ "$NODE_ROLE" = login ]; then
    install -m 0600 "$SSH_HOST_KEY" "$M/run/slurmflox/ssh_host_ed25519_key"
    install -m 0644 "$SSH_AUTHORIZED" "$M/run/slurmflox/authorized_keys"
fi
if [ -n "${LDAP_BIND_SECRET:-}" ]; then  # a directory client (login; ctl under auth/munge): directory.py (#13)
    install -m 0600 "$LDAP_BIND_SECRET" "$M/run/slurmflox/ldap-bind.secret"
fi
if [ -n "${LDAP_DIR:-}" ]; then  # the controller's slapd: config and database from the work dir (#13)
    mkdir -p "$M/var/lib/slurmflox-ldap"
    mount --bind "$LDAP_DIR" "$M/var/lib/slurmflox-ldap"
fi
trap - ERR
exec chroot "$M" /bin/bash /opt/slurmflox/node-init.sh
"""

NODE_INIT_SH = r"""#!/bin/bash
# slurmflox local node init (PID 1 inside the node's root). Starts the role's daemons and supervises them.
set -uo pipefail
# shellcheck disable=SC1091
. /run/slurmflox/node.env
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
cd /
phase() {
    printf '%s\n' "$*" > /run/slurmflox/ctl/phase.tmp && mv -f /run/slurmflox/ctl/phase.tmp /run/slurmflox/ctl/phase
}
fail() { phase "failed: $*"; echo "node-init: $*" >&2; exit 1; }
pids=()
stop_all() {
    phase stopping
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
    for _ in $(seq 50); do
        alive=0
        for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
        [ "$alive" = 0 ] && break
        sleep 0.1
    done
    phase stopped
    exit 0
}
trap stop_all TERM INT

mkdir -p /var/log/slurm /run/slurm
# munged signs and checks job credentials (CredType=cred/munge) on every node.
if :; then
    mkdir -p /run/munge /var/lib/munge /var/log/munge
    install -o munge -g munge -m 0400 /run/slurmflox/munge.key /etc/munge/munge.key
    chmod 0755 /etc/munge  # the key stays 0400 munge; its presence is visible (and provably denied) to tasks
    chown munge:munge /run/munge /var/lib/munge /var/log/munge
    chmod 0755 /run/munge
    setpriv --reuid=munge --regid=munge --clear-groups /usr/sbin/munged --foreground --num-threads=2 \
        >>/var/log/munge/munged.out 2>&1 &
    pids+=($!)
    for _ in $(seq 100); do [ -S /run/munge/munge.socket.2 ] && break; sleep 0.05; done
    [ -S /run/munge/munge.socket.2 ] || fail "munged did not start (see /var/log/munge/munged.out)"
fi

# The test user exists only in the directory (#13): nslcd resolves it (passwd/group: files ldap), with the bind
# secret in a config on /run (never on disk). No local account, and no nscd: a change is seen at once. The login
# node, and the controller (auth/jwt maps a token's name to a uid there; auth/munge resolves the submitter); on
# Slurm 26.05 the workers too, nss_slurm first (directory.worker_boot: WORKER_NSS).
directory_client() {
    local sources=${1:-files ldap}
    phase starting nslcd
    t0=$(date +%s%N)
    ( umask 077 && printf 'uid nslcd\ngid nslcd\nuri %s\nbase %s\nbinddn %s\nbindpw %s\n' "$LDAP_URI" "$LDAP_BASE" \
        "$LDAP_BIND_DN" "$(cat /run/slurmflox/ldap-bind.secret)" > /run/slurmflox/nslcd.conf )
    ln -sfn /run/slurmflox/nslcd.conf /etc/nslcd.conf
    sed -i -E "s/^(passwd|group):.*/\\1: $sources/" /etc/nsswitch.conf
    mkdir -p /run/nslcd && chown nslcd:nslcd /run/nslcd
    /usr/sbin/nslcd -n >>/var/log/nslcd.out 2>&1 &
    pids+=($!)
    for _ in $(seq 200); do getent passwd "$TEST_USER" >/dev/null && break; sleep 0.05; done
    getent passwd "$TEST_USER" >/dev/null || fail "the directory does not resolve $TEST_USER (see /var/log/nslcd.out)"
    echo "node-init: nslcd resolved $TEST_USER $(( ($(date +%s%N) - t0) / 1000000 )) ms after its start"
}

case "$NODE_ROLE" in
db)
    # MariaDB (socket only: nothing but slurmdbd in this node talks to it), then slurmdbd (#13).
    mkdir -p /run/mysqld /var/log/mysql /run/slurmdbd
    # sid's MariaDB 11.8.9-4 client library looks for the server's socket in /run/mariadbd/ (measured: slurmdbd
    # retried "Can't connect to local server through socket '/run/mariadbd/mysqld.sock'"); trixie's in /run/mysqld/
    rm -rf /run/mariadbd && ln -s /run/mysqld /run/mariadbd  # this node's own /run, empty at boot
    chown mysql:mysql /run/mysqld /var/lib/mysql /var/log/mysql
    if [ ! -d /var/lib/mysql/mysql ]; then
        phase initializing mariadb
        mariadb-install-db --user=mysql --datadir=/var/lib/mysql --skip-test-db \
            >/var/log/mysql/install.log 2>&1 || fail "mariadb-install-db failed (see /var/log/mysql/install.log)"
    fi
    phase starting mariadb
    # the pid file named: sid's MariaDB 11.8.9 defaults it to /run/mariadbd/, which no node has (measured)
    /usr/sbin/mariadbd --user=mysql --datadir=/var/lib/mysql --socket=/run/mysqld/mysqld.sock --skip-networking \
        --pid-file=/run/mysqld/mysqld.pid --innodb-buffer-pool-size=32M --performance-schema=OFF --skip-name-resolve \
        --log-error=/var/log/mysql/error.log &
    pids+=($!)
    for _ in $(seq 300); do
        mariadb-admin --socket=/run/mysqld/mysqld.sock ping >/dev/null 2>&1 && break
        sleep 0.05
    done
    mariadb-admin --socket=/run/mysqld/mysqld.sock ping >/dev/null 2>&1 || fail "mariadbd did not start"
    # the database (created here: slurmdbd's own first-start path that creates it, reconnecting on the same handle,
    # fails against trixie's libmariadb 11.8 with error 5027 on its first query; measured) and the storage user,
    # with the generated password read from a file (never on a command line)
    pw=$(cat /run/slurmflox/db_password)
    mariadb --socket=/run/mysqld/mysqld.sock -u root <<SQL || fail "creating the slurmdbd storage user failed"
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$pw';
ALTER USER 'slurm'@'localhost' IDENTIFIED BY '$pw';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
SQL
    unset pw
    chown slurm:slurm /var/log/slurm /run/slurmdbd
    install -o slurm -g slurm -m 0600 /run/slurmflox/slurmdbd.conf /run/slurmdbd/slurmdbd.conf
    if [ "$AUTH" = slurm ]; then  # auth/munge (bookworm): munged above; no slurm.key in the config dir
        install -o slurm -g slurm -m 0600 /etc/slurm/slurm.key /run/slurmdbd/slurm.key
    fi
    chown slurm:slurm /run/slurmflox/jwt_hs256.key
    phase starting slurmdbd
    # slurmdbd reads slurmdbd.conf (and slurm.key) from the directory of SLURM_CONF
    SLURM_CONF=/run/slurmdbd/slurm.conf /usr/sbin/slurmdbd -D >>/var/log/slurm/slurmdbd.out 2>&1 &
    pids+=($!)
    # a first start creates every table (longer on a newer Slurm or a loaded host): wait while slurmdbd lives
    for _ in $(seq 2400); do
        (echo >/dev/tcp/127.0.0.1/6819) 2>/dev/null && break
        kill -0 "${pids[-1]}" 2>/dev/null || break
        sleep 0.05
    done
    (echo >/dev/tcp/127.0.0.1/6819) 2>/dev/null || fail "slurmdbd does not listen (see /var/log/slurm/slurmdbd.log)"
    ;;
ctl)
    if [ -n "${LDAP_DIR:-}" ]; then
        # The directory (#13): loaded once from the seed, then kept (an admin's change survives a restart).
        phase starting slapd
        t0=$(date +%s%N)
        L=/var/lib/slurmflox-ldap
        mkdir -p /run/slapd "$L/data"
        if [ ! -e "$L/data/data.mdb" ]; then
            slapadd -q -f "$L/conf/slapd.conf" -l "$L/conf/seed.ldif" >>/var/log/slapd.out 2>&1 \
                || fail "slapadd could not load the directory seed (see /var/log/slapd.out)"
        fi
        chown -R openldap:openldap /run/slapd "$L/data"
        /usr/sbin/slapd -d 0 -u openldap -g openldap -f "$L/conf/slapd.conf" -h "ldap:/// ldapi:///" \
            >>/var/log/slapd.out 2>&1 &
        pids+=($!)
        for _ in $(seq 200); do
            ldapsearch -Q -LLL -Y EXTERNAL -H ldapi:/// -s base -b dc=slurmflox dn >/dev/null 2>&1 && break
            sleep 0.05
        done
        ldapsearch -Q -LLL -Y EXTERNAL -H ldapi:/// -s base -b dc=slurmflox dn >/dev/null 2>&1 \
            || fail "slapd does not answer (see /var/log/slapd.out)"
        echo "node-init: slapd answered $(( ($(date +%s%N) - t0) / 1000000 )) ms after its start"  # cold-start cost
    fi
    directory_client  # auth/jwt (and auth/munge) resolve the user on the controller: through the directory
    mkdir -p /var/lib/slurm/slurmctld
    chown slurm:slurm /var/lib/slurm/slurmctld /var/log/slurm
    phase starting slurmctld
    if [ "$AUTH" = slurm ]; then
        # slurmctld runs as SlurmUser: give it its own readable copy of the root-only shared key
        install -o slurm -g slurm -m 0600 /etc/slurm/slurm.key /run/slurmflox/slurmctld.key
        export SLURM_SACK_KEY=/run/slurmflox/slurmctld.key
    fi
    [ -e /run/slurmflox/jwt_hs256.key ] && chown slurm:slurm /run/slurmflox/jwt_hs256.key
    /usr/sbin/slurmctld -D >>/var/log/slurm/slurmctld.out 2>&1 &
    unset SLURM_SACK_KEY
    pids+=($!)
    if [ -n "${REST_PORT:-}" ]; then
        # slurmrestd refuses to run as root or SlurmUser: its own user; SLURM_JWT=daemon makes it pass each
        # request's token on to slurmctld (auth/jwt), so every request runs as the token's user (#13)
        getent passwd slurmrestd >/dev/null || useradd -r -M -d /nonexistent -s /usr/sbin/nologin slurmrestd
        phase starting slurmrestd
        env SLURM_JWT=daemon setpriv --reuid=slurmrestd --regid=slurmrestd --clear-groups \
            /usr/sbin/slurmrestd -a rest_auth/jwt "0.0.0.0:$REST_PORT" >>/var/log/slurm/slurmrestd.out 2>&1 &
        pids+=($!)
    fi
    ;;
worker)
    phase activating "$SLURMFLOX_ENVIRONMENT"
    # The worker runs from what its Nix profile pins (#20), as a Flox pod runs from its generation's store path.
    FLOX_ENV=$(readlink -e "$NIX_PROFILE") || fail "no Nix profile generation at $NIX_PROFILE"
    # Activation and the initializer see only what a pod's init container would: the activation inputs.
    if ! env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
        SLURMFLOX_ENVIRONMENT="$SLURMFLOX_ENVIRONMENT" SLURMFLOX_ACTIVATE_MODE="$SLURMFLOX_ACTIVATE_MODE" \
        SLURMFLOX_IMAGE="$SLURMFLOX_IMAGE" SLURMFLOX_REVISION="$SLURMFLOX_REVISION" \
        SLURMFLOX_PATH_PRECEDENCE="$SLURMFLOX_PATH_PRECEDENCE" SLURMFLOX_ENV_EXPORTS="$SLURMFLOX_ENV_EXPORTS" \
        SLURMFLOX_PROFILE_DIR=/run/flox-task-profile \
        /opt/slurmflox/flox-activate "$FLOX_ENV" "$SLURMFLOX_ACTIVATE_MODE" -- \
        /bin/bash /opt/slurmflox/task-profile-init.sh >/run/slurmflox/ctl/init.log 2>&1; then
        fail "task-profile initializer failed in $SLURMFLOX_ENVIRONMENT: $(tail -n 1 /run/slurmflox/ctl/init.log)"
    fi
    mkdir -p /var/lib/slurm/slurmd  # slurmd itself enforces 0755 on it (its cred_state inside is 0600)
    if [ -n "${WORKER_NSS:-}" ]; then  # root resolves the user outside jobs (Slurm 26.05's --get-user-env)
        directory_client "$WORKER_NSS"
    fi
    phase starting slurmd
    /usr/sbin/slurmd -D -Z --conf "$WORKER_CONF" >>/var/log/slurm/slurmd.out 2>&1 &
    pids+=($!)
    ;;
login)
    directory_client
    if [ -n "${STRANGER_USER:-}" ] && ! getent passwd "$STRANGER_USER" >/dev/null; then
        # a login account with no accounting association (#13: TA checks it is refused at submission)
        useradd -u "$STRANGER_UID" -U -M -d /nonexistent -s /bin/bash "$STRANGER_USER"
    fi
    if [ ! -d "/home/$TEST_USER" ]; then
        install -d -o "$TEST_UID" -g "$TEST_GID" -m 0755 "/home/$TEST_USER"
    fi
    install -m 0600 /run/slurmflox/ssh_host_ed25519_key /etc/ssh/ssh_host_ed25519_key
    mkdir -p /etc/ssh/authorized_keys /run/sshd
    install -m 0644 /run/slurmflox/authorized_keys /etc/ssh/authorized_keys/root
    install -m 0644 /run/slurmflox/authorized_keys "/etc/ssh/authorized_keys/$TEST_USER"
    if [ "$AUTH" = slurm ]; then
        # sackd mints auth/slurm tokens for the login node's users (who cannot read the key) and vouches for
        # their identity (AuthInfo=use_client_ids): the controller and workers need no account for them.
        phase starting sackd
        /usr/sbin/sackd -D >>/var/log/slurm/sackd.out 2>&1 &
        pids+=($!)
        for _ in $(seq 100); do [ -S /run/slurm/sack.socket ] && break; sleep 0.05; done
        [ -S /run/slurm/sack.socket ] || fail "sackd did not start (see /var/log/slurm/sackd.out)"
    fi
    phase starting sshd
    /usr/sbin/sshd -D -e -f /opt/slurmflox/sshd_config >>/var/log/sshd.out 2>&1 &
    pids+=($!)
    ;;
*)
    fail "unknown role $NODE_ROLE"
    ;;
esac
phase running
# Supervise: if a daemon dies, the node is not healthy any more; stop the rest and say so.
while :; do
    wait -n "${pids[@]}"
    for p in "${pids[@]}"; do
        if ! kill -0 "$p" 2>/dev/null; then
            phase "failed: daemon pid $p exited"
            for q in "${pids[@]}"; do kill -TERM "$q" 2>/dev/null; done
            sleep 1
            exit 1
        fi
    done
done
"""
