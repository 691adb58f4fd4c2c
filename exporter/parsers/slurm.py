"""Pure parser: the Slurm job and step a process runs in, from its ``/proc/<pid>/cgroup``.

slurmd's cgroup plugins put every task of a job step in a cgroup named after the job and the step:

- cgroup v1 (``cgroup/v1``): ``/slurm/uid_<uid>/job_<id>/step_<step>/task_<n>`` under each controller, e.g.
  ``10:devices:/slurm/uid_2101171/job_280678/step_interactive/task_0``; ``/slurm_<nodename>/...`` when several
  slurmd run on one host.
- cgroup v2 (``cgroup/v2``, Slurm >= 22.05): ``0::/system.slice/slurmstepd.scope/job_<id>/step_<step>/user/task_<n>``;
  ``<nodename>_slurmstepd.scope`` with several slurmd.

The step is a number, or ``batch``, ``extern`` (processes adopted by pam_slurm_adopt) or ``interactive``. A
path without a ``job_`` level under the Slurm root (slurmstepd's own ``.../slurmstepd.scope/system``) is not a job.
"""

from __future__ import annotations

import re

_SLURM_JOB = re.compile(
    r"/(?:slurm(?:_[^/]+)?/uid_\d+|(?:[^/]+_)?slurmstepd\.scope)/job_(?P<job>\d+)(?:/step_(?P<step>[^/\s]+))?"
)


def parse_slurm_cgroup(text: str) -> tuple[str | None, str | None]:
    """``/proc/<pid>/cgroup`` -> (Slurm job id, step), each None when absent."""
    for line in text.splitlines():
        m = _SLURM_JOB.search(line.split(":", 2)[-1])
        if m:
            return m["job"], m["step"]
    return None, None
