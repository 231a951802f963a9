"""A single-node Slurm cluster on this machine, for the tests of ``surprisal-cc grid --launcher slurm``.

:func:`start_cluster` writes a ``slurm.conf`` into a folder of its own (one node: this host, with its
CPUs; ``proctrack/linuxproc``, ``task/none``, no accounting), starts ``munged`` (unless one answers
already), ``slurmctld`` and ``slurmd`` in the foreground as child processes, and waits for the node to
be idle; :meth:`Cluster.stop` ends exactly those processes, by their PIDs. The pytest fixture
:func:`slurm_cluster` does both around a test module and skips, with one reason, only where Slurm is
not installed and cannot be (not root, no ``apt-get``) or does not start.

Debian's packages: ``apt-get install -y slurm-wlm munge`` (``.ci/run`` installs them).
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

import pytest

DAEMONS = ("munged", "slurmctld", "slurmd")
MUNGE_KEY = Path("/etc/munge/munge.key")


@dataclass
class Cluster:
    """A started cluster: its configuration file, the environment its commands need, its daemons."""

    folder: Path
    conf: Path
    processes: List[subprocess.Popen] = field(default_factory=list)

    @property
    def env(self) -> Dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def logs(self) -> str:
        """The tail of each daemon's log (for a failure's message)."""
        parts = []
        for name in ("slurmctld.log", "slurmd.log"):
            path = self.folder / name
            if path.exists():
                parts.append(f"--- {name}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-15:]))
        return "\n".join(parts)

    def stop(self) -> None:
        """Cancel this cluster's jobs (the tests' own), then end the daemons it started (by their PIDs), newest first."""
        if self.processes:
            queued = subprocess.run(["squeue", "-h", "-o", "%i"], env=self.env, capture_output=True, text=True)
            if queued.stdout.split():
                subprocess.run(["scancel", *queued.stdout.split()], env=self.env, capture_output=True)
                deadline = time.time() + 30
                while time.time() < deadline and subprocess.run(["squeue", "-h", "-o", "%i"], env=self.env,
                                                                 capture_output=True, text=True).stdout.split():
                    time.sleep(0.5)
        for proc in reversed(self.processes):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        self.processes.clear()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def missing_programs() -> List[str]:
    return [name for name in (*DAEMONS, "sbatch", "squeue", "scontrol") if shutil.which(name) is None]


def install_slurm() -> Optional[str]:
    """Install Debian's ``slurm-wlm`` and ``munge`` where they are missing; why not, or None."""
    if not missing_programs():
        return None
    if os.geteuid() != 0:
        return f"Slurm is not installed ({', '.join(missing_programs())} missing) and the tests do not run as root"
    if shutil.which("apt-get") is None:
        return f"Slurm is not installed ({', '.join(missing_programs())} missing) and there is no apt-get"
    proc = subprocess.run("apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge",
                          shell=True, capture_output=True, text=True)
    if proc.returncode != 0 or missing_programs():
        return f"apt-get install slurm-wlm munge failed: {proc.stderr.strip()[-300:]}"
    return None


def _munge_answers() -> bool:
    try:
        cred = subprocess.run(["munge", "-n"], capture_output=True, timeout=10)
        return cred.returncode == 0 and subprocess.run(["unmunge"], input=cred.stdout, capture_output=True,
                                                        timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _write_conf(folder: Path) -> Path:
    host = socket.gethostname().split(".")[0]
    cpus = os.cpu_count() or 1
    conf = folder / "slurm.conf"
    conf.write_text("\n".join([
        "ClusterName=surprisalcc",
        f"SlurmctldHost={host}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"SlurmctldPort={_free_port()}",
        f"SlurmdPort={_free_port()}",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",
        "SchedulerType=sched/builtin",
        "MpiDefault=none",
        "ReturnToService=2",
        "JobRequeue=1",
        "KillWait=10",
        "MinJobAge=300",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        f"StateSaveLocation={folder / 'state'}",
        f"SlurmdSpoolDir={folder / 'spool'}",
        f"SlurmctldPidFile={folder / 'slurmctld.pid'}",
        f"SlurmdPidFile={folder / 'slurmd.pid'}",
        f"SlurmctldLogFile={folder / 'slurmctld.log'}",
        f"SlurmdLogFile={folder / 'slurmd.log'}",
        f"NodeName={host} CPUs={cpus} State=UNKNOWN",
        f"PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP",
        ""]))
    (folder / "state").mkdir(exist_ok=True)
    (folder / "spool").mkdir(exist_ok=True)
    return conf


def start_cluster(folder: Path, timeout_s: float = 60.0) -> Cluster:
    """Start a one-node cluster configured in ``folder``; RuntimeError (with the daemons' logs) when its
    node is not idle within ``timeout_s``."""
    folder.mkdir(parents=True, exist_ok=True)
    cluster = Cluster(folder, _write_conf(folder))
    try:
        if not _munge_answers():
            if not MUNGE_KEY.exists():
                subprocess.run(["mungekey", "--create"], check=True, capture_output=True)
            os.chmod(MUNGE_KEY, 0o400)
            Path("/run/munge").mkdir(parents=True, exist_ok=True)
            cluster.processes.append(subprocess.Popen(["munged", "--force", "--foreground"],
                                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            deadline = time.time() + 15
            while not _munge_answers():
                if time.time() > deadline or cluster.processes[-1].poll() is not None:
                    raise RuntimeError("munged did not start")
                time.sleep(0.2)
        for daemon in ("slurmctld", "slurmd"):
            cluster.processes.append(subprocess.Popen([daemon, "-D", "-f", str(cluster.conf)], env=cluster.env,
                                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            time.sleep(0.5)
        deadline = time.time() + timeout_s
        while True:
            state = subprocess.run(["sinfo", "-h", "-o", "%t"], env=cluster.env, capture_output=True, text=True)
            if state.stdout.strip() in ("idle", "mix", "alloc"):
                return cluster
            dead = [p.args[0] for p in cluster.processes if p.poll() is not None]
            if dead or time.time() > deadline:
                raise RuntimeError(f"the Slurm node is not idle ({state.stdout.strip() or state.stderr.strip()}"
                                   f"{'; ended: ' + ', '.join(dead) if dead else ''})\n{cluster.logs()}")
            time.sleep(0.5)
    except BaseException:
        cluster.stop()
        raise


@pytest.fixture(scope="module")
def slurm_cluster(tmp_path_factory):
    """A running single-node Slurm (:func:`start_cluster`), ``SLURM_CONF`` exported while it runs."""
    reason = install_slurm()
    if reason is not None:
        pytest.skip(reason)
    folder = tmp_path_factory.mktemp("slurm")
    try:
        cluster = start_cluster(folder)
    except (RuntimeError, OSError, subprocess.CalledProcessError) as err:
        if os.environ.get("CI"):
            pytest.fail(f"Slurm did not start: {err}", pytrace=False)
        pytest.skip(f"Slurm did not start: {str(err).splitlines()[0]}")
    before = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(cluster.conf)
    try:
        yield cluster
    finally:
        if before is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = before
        cluster.stop()
