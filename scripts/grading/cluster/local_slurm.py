"""A one-node Slurm cluster on this machine, for the cluster grader's tests and CI (staff only; needs root).

    python -m scripts.grading.cluster.local_slurm install            # apt-get install slurm-wlm munge (Debian)
    python -m scripts.grading.cluster.local_slurm start /tmp/slurm   # prints `export SLURM_CONF=...`
    python -m scripts.grading.cluster.local_slurm stop /tmp/slurm

Debian's ``slurm-wlm`` (Slurm 22.05) and ``munge``, started by hand (no systemd here): ``munged`` with its key,
socket, pid and log files in FOLDER, then ``slurmctld`` and ``slurmd`` as root from ``FOLDER/slurm.conf`` (clients
find it through ``SLURM_CONF``), on free ports, one node named as ``hostname -s`` with this machine's CPUs, one
partition ``debug``, no accounting (``sacct`` then fails: the cluster grader's ``status`` falls back to ``squeue``).
Everything it starts is stopped by the pids in FOLDER's pid files; nothing else on the machine is touched.
tests/staff/grader/test_cluster.py starts one per test module (and skips, saying why, where this cannot work).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel")
PARTITION = "debug"


class SlurmUnavailable(RuntimeError):
    """Why a local Slurm cannot run here (not root, not Debian, a daemon that would not start): a test skips."""


def install() -> None:
    """apt-get install Debian's slurm-wlm and munge, when they are missing (about 10 s after apt-get update)."""
    if all(shutil.which(d) or Path("/usr/sbin", d).exists() for d in DAEMONS):
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise SlurmUnavailable("slurm-wlm and munge are not installed, and this is not a root Debian (no apt-get)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "slurm-wlm", "munge"]):
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if proc.returncode:
            raise SlurmUnavailable(f"{' '.join(cmd)} failed: {proc.stderr[-500:]}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _config(folder: Path, host: str) -> str:
    return "\n".join([
        "ClusterName=cs336local", f"SlurmctldHost={host}", "SlurmUser=root", "SlurmdUser=root",
        "AuthType=auth/munge", f"AuthInfo=socket={folder / 'munge.socket'}", "CredType=cred/munge",
        f"SlurmctldPort={_free_port()}", f"SlurmdPort={_free_port()}",
        f"StateSaveLocation={folder / 'state'}", f"SlurmdSpoolDir={folder / 'spool'}",
        f"SlurmctldPidFile={folder / 'slurmctld.pid'}", f"SlurmdPidFile={folder / 'slurmd.pid'}",
        f"SlurmctldLogFile={folder / 'slurmctld.log'}", f"SlurmdLogFile={folder / 'slurmd.log'}",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "MpiDefault=none",
        "SelectType=select/cons_tres", "SelectTypeParameters=CR_CPU",
        "AccountingStorageType=accounting_storage/none", "JobAcctGatherType=jobacct_gather/none",
        "ReturnToService=2", "KillWait=5",  # a cancelled task's processes get 5 s after SIGTERM, not 30
        "SchedulerParameters=sched_interval=1", "MessageTimeout=20",
        f"NodeName={host} CPUs={os.cpu_count()} State=UNKNOWN",
        f"PartitionName={PARTITION} Nodes={host} Default=YES MaxTime=INFINITE State=UP", "",
    ])  # fmt: skip


def _munge_paths(folder: Path) -> list[str]:
    return [f"--key-file={folder / 'munge.key'}", f"--socket={folder / 'munge.socket'}",
            f"--pid-file={folder / 'munged.pid'}", f"--log-file={folder / 'munged.log'}",
            f"--seed-file={folder / 'munged.seed'}"]  # fmt: skip


def start(folder: Path, wait_s: float = 30) -> dict[str, str]:
    """Start munged, slurmctld and slurmd with everything in ``folder``; wait until the node is idle.
    Returns the environment a client needs (``SLURM_CONF``). Raises SlurmUnavailable, with the daemon's log."""
    if os.geteuid() != 0:
        raise SlurmUnavailable("a local Slurm needs root here (slurmd runs jobs as their user)")
    install()
    folder.mkdir(parents=True, exist_ok=True)
    for sub in ("state", "spool"):
        (folder / sub).mkdir(exist_ok=True)
    key = folder / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    host = socket.gethostname().split(".")[0]
    (folder / "slurm.conf").write_text(_config(folder, host))
    env = {**os.environ, "SLURM_CONF": str(folder / "slurm.conf")}
    commands = {"munged": ["munged", "--force", *_munge_paths(folder)],
                "slurmctld": ["slurmctld", "-i", "-f", str(folder / "slurm.conf")],
                "slurmd": ["slurmd", "-f", str(folder / "slurm.conf")]}  # fmt: skip
    for name, cmd in commands.items():
        proc = subprocess.run([shutil.which(cmd[0]) or f"/usr/sbin/{cmd[0]}", *cmd[1:]], env=env,
                              capture_output=True, text=True)  # fmt: skip
        if proc.returncode:
            stop(folder)
            raise SlurmUnavailable(f"{name} did not start: {(proc.stderr or _log(folder, name))[-800:]}")
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        out = subprocess.run(["sinfo", "-h", "-o", "%T"], env=env, capture_output=True, text=True).stdout
        if out.strip() == "idle":
            return {"SLURM_CONF": env["SLURM_CONF"]}
        time.sleep(0.5)
    logs = _log(folder, "slurmctld") + _log(folder, "slurmd")
    stop(folder)
    raise SlurmUnavailable(f"the node was not idle within {wait_s:.0f} s: {logs[-800:]}")


def _log(folder: Path, name: str) -> str:
    path = folder / f"{name}.log"
    return path.read_text(errors="replace") if path.exists() else ""


def stop(folder: Path) -> None:
    """Stop slurmd, slurmctld and munged, by the pids in their pid files (each waited for, up to 10 s)."""
    for name in ("slurmd", "slurmctld", "munged"):
        pid_file = folder / f"{name}.pid"
        try:
            pid = int(pid_file.read_text().split()[0])
            os.kill(pid, signal.SIGTERM)
        except (OSError, ValueError, IndexError):
            continue
        for _ in range(100):
            try:
                os.kill(pid, 0)
            except OSError:
                break
            time.sleep(0.1)
        else:
            os.kill(pid, signal.SIGKILL)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("action", choices=["install", "start", "stop"])
    p.add_argument("folder", type=Path, nargs="?", help="start/stop: where the configuration, state and logs live")
    args = p.parse_args(argv)
    try:
        if args.action == "install":
            install()
        elif args.folder is None:
            p.error(f"{args.action} needs a FOLDER")
        elif args.action == "start":
            env = start(args.folder.resolve())
            print(f"export SLURM_CONF={env['SLURM_CONF']}")
        else:
            stop(args.folder.resolve())
    except SlurmUnavailable as exc:
        print(f"local Slurm unavailable: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
