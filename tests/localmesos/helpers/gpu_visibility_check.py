"""Device check (run on a GPU machine from the repo root): CUDA_VISIBLE_DEVICES set by the local agent's
launcher really scopes what a CUDA process sees (driver API via ctypes; needs only libcuda)."""

import asyncio
import json
import pathlib
import sys
import tempfile

from dl2_mesos.localmesos import executor_process as launcher
from dl2_mesos.localmesos.spawner import ExecutorSpawner
CHECK = (
    "import ctypes,json,os; l=ctypes.CDLL('libcuda.so.1'); r=l.cuInit(0); n=ctypes.c_int(0); "
    "r2=l.cuDeviceGetCount(ctypes.byref(n)) if r==0 else None; "
    "print(json.dumps({'cvd': os.environ.get('CUDA_VISIBLE_DEVICES'), 'cuInit': r, 'count': n.value}))"
)


async def run(gpus):
    d = pathlib.Path(tempfile.mkdtemp())
    env = launcher.executor_environment(
        agent_endpoint="127.0.0.1:1",
        agent_id="A",
        framework_id="F",
        executor_id="E",
        directory=d,
        checkpoint=False,
        grace_period=1,
        gpus=gpus,
        mesos_local=True,
        command=None,
    )
    spawner = ExecutorSpawner()
    p = await launcher.ExecutorProcess.spawn({"value": f'{sys.executable} -c "{CHECK}"'}, env, d, spawner)
    st = await p.wait()
    await spawner.close()
    return {
        "gpus": gpus,
        "status": st,
        "stdout": (d / "stdout").read_text().strip(),
        "stderr": (d / "stderr").read_text().strip()[-300:],
    }


for g in ([0], [], None):
    print(json.dumps(asyncio.run(run(g))))
