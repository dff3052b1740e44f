"""LangGraph's in-memory agent server as `langgraph dev --no-browser --no-reload` starts it (the
same `run_server` call), with one change that is NOT stock: the run queue's hard-coded 0.5 s poll
sleep (`langgraph_runtime_inmem.ops.Runs.next`) becomes --queue-poll-s (default 10 ms).

Stock, every run waits 0.5-1.0 s in that queue before a worker starts it; this variant (run.sh's
LG_MODE=fastpoll) separates that wait from the engine's own cost. For reference only.
"""

import argparse
import asyncio
import os
import pathlib
import sys

import langgraph_cli.config
import uvicorn
from langgraph_api.cli import run_server

p = argparse.ArgumentParser()
p.add_argument("--host", default="127.0.0.1")
p.add_argument("--port", type=int, default=2024)
p.add_argument("--config", default="langgraph.json")
p.add_argument("--n-jobs-per-worker", type=int, default=10)
p.add_argument("--queue-poll-s", type=float, default=0.01)
a = p.parse_args()

config_path = pathlib.Path(a.config)
cfg = langgraph_cli.config.validate_config_file(config_path)
for dep in cfg.get("dependencies", []):
    d = config_path.parent / dep
    if d.is_dir():
        sys.path.append(str(d))
os.chdir(config_path.parent)

# langgraph_api reads its settings from the environment at import time, and run_server() sets
# them just before uvicorn.run(): patch the queue at that moment, not earlier.
_real_uvicorn_run = uvicorn.run


def _run_with_fast_poll(*args, **kwargs):
    from langgraph_runtime_inmem import ops  # noqa: PLC0415

    class _AsyncioShim:
        """Stands in for `ops.asyncio`: only the queue's 0.5 s poll sleep changes."""

        def __getattr__(self, name):
            return getattr(asyncio, name)

        @staticmethod
        async def sleep(delay, result=None):
            return await asyncio.sleep(a.queue_poll_s if delay == 0.5 else delay, result)

    ops.asyncio = _AsyncioShim()
    print(f"serve_fastpoll: queue poll 0.5 s -> {a.queue_poll_s} s", flush=True)
    return _real_uvicorn_run(*args, **kwargs)


uvicorn.run = _run_with_fast_poll

run_server(
    a.host,
    a.port,
    False,  # no reload
    cfg.get("graphs", {}),
    n_jobs_per_worker=a.n_jobs_per_worker,
    open_browser=False,
    env=cfg.get("env"),
    store=cfg.get("store"),
    auth=cfg.get("auth"),
    http=cfg.get("http"),
    checkpointer=cfg.get("checkpointer"),
    server_level="WARNING",
)
