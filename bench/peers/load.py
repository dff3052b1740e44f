#!/usr/bin/env python3
"""One load client for both sides of the peer comparison (run by run.sh).

    load.py drive --target taskforce|langgraph --url URL --server-pids 1,2,3 --out side.json
    load.py table a.json b.json > table.md

`drive` runs the same workloads against either server, with the same client code, timing
points and checks; only the request and the parsing of its answer differ per target:

  get     GET one agent by id               Taskforce: GET /api/v1/agents/{id}
                                            LangGraph: GET /assistants/{id}
  list    one page of 100 agents, with      Taskforce: GET /api/v1/agents?page_size=100
          --population agents present       LangGraph: POST /assistants/search {"limit": 100}
  run     one streamed run: model call ->   Taskforce: POST /api/v1/execute/stream
          one tool call -> model call       LangGraph: POST /runs/stream (stateless run)
          streaming --words tokens

A run counts only when its tool result arrived and its answer came as exactly --words
non-empty token events. Latencies are timed from sending the request; percentiles are
interpolated linearly. Server CPU is utime + stime of --server-pids from /proc/<pid>/stat,
per operation. Every target must be on loopback. Exit status 1 when any operation failed.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import math
import os
import platform
import sys
import time
from urllib.parse import urlparse

import aiohttp

# ------------------------------------------------------------------------------ numbers


def pct(sorted_vals: list[float], p: float) -> float | None:
    """Percentile with linear interpolation; p in [0, 100]."""
    if not sorted_vals:
        return None
    k = (len(sorted_vals) - 1) * p / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * (k - lo)


def summary_ms(vals_s: list[float]) -> dict:
    v = sorted(x * 1000.0 for x in vals_s)
    return {"n": len(v), "p50_ms": pct(v, 50), "p99_ms": pct(v, 99)}


def proc_cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Cpu:
    """CPU seconds the server processes used since this was made."""

    def __init__(self, pids: list[int]):
        self.pids = pids
        self.start = [proc_cpu_s(p) for p in pids]

    def used_s(self) -> float:
        return sum(proc_cpu_s(p) - s for p, s in zip(self.pids, self.start))


# ------------------------------------------------------------------------------ SSE


async def sse_events(resp: aiohttp.ClientResponse):
    """Yields (event, data) of an SSE body."""
    event, data = None, []
    async for raw in resp.content:
        line = raw.decode("utf-8").rstrip("\r\n")
        if not line:
            if event is not None or data:
                yield event or "message", "\n".join(data)
            event, data = None, []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "event":
            event = value
        elif field == "data":
            data.append(value)
    if event is not None or data:
        yield event or "message", "\n".join(data)


class RunCheck:
    """What one run's stream showed, and when (seconds from sending)."""

    def __init__(self):
        self.first_event = None
        self.first_token = None
        self.tool_result = False
        self.tokens = 0
        self.error = None


# ------------------------------------------------------------------------------ targets


class Taskforce:
    """Taskforce's gateway: REST agents and `POST /api/v1/execute/stream`."""

    name = "Taskforce"
    run_agent = "peer-runner"

    def __init__(self, s: aiohttp.ClientSession, url: str, model: str):
        self.s, self.url, self.model = s, url, model

    async def create(self, i: int) -> str | None:
        agent_id = f"peer-bench-{i:05d}"
        body = {"agent_id": agent_id, "name": f"bench {i}", "description": "peer benchmark",
                "system_prompt": "You are a benchmark agent.", "tool_allowlist": ["file_read"]}
        async with self.s.post(self.url + "/api/v1/agents", json=body) as r:
            await r.read()
            return agent_id if r.status == 201 else None

    async def count(self) -> int:
        async with self.s.get(self.url + "/api/v1/agents?source=custom") as r:
            return len((await r.json())["agents"])

    async def get(self, agent_id: str) -> bool:
        async with self.s.get(f"{self.url}/api/v1/agents/{agent_id}") as r:
            return r.status == 200 and (await r.json())["agent_id"] == agent_id

    async def list_page(self) -> bool:
        async with self.s.get(self.url + "/api/v1/agents?page_size=100") as r:
            return r.status == 200 and len((await r.json())["agents"]) == 100

    def run_request(self):
        body = {"mission": "Please read the file ping, then answer.", "agent_id": self.run_agent,
                "model": self.model}
        return self.url + "/api/v1/execute/stream", body

    @staticmethod
    def on_event(c: RunCheck, ev: str, data: str, now: float) -> None:
        if ev == "tool_end":
            if json.loads(data).get("is_error") is False:
                c.tool_result = True
            else:
                c.error = f"tool failed: {data[:200]}"
        elif ev == "token":
            if c.tool_result and json.loads(data).get("text"):
                c.tokens += 1
                if c.first_token is None:
                    c.first_token = now
        elif ev in ("error", "tool_error"):
            c.error = f"{ev}: {data[:200]}"
        elif ev == "done" and json.loads(data).get("status") != "completed":
            c.error = f"done: {data[:200]}"


class LangGraph:
    """LangGraph's agent server: assistants and stateless `POST /runs/stream`."""

    name = "LangGraph"

    def __init__(self, s: aiohttp.ClientSession, url: str, _model: str):
        self.s, self.url = s, url

    async def create(self, i: int) -> str | None:
        body = {"graph_id": "agent", "name": f"bench-{i}", "metadata": {"bench": "peer", "i": i},
                "config": {}}
        async with self.s.post(self.url + "/assistants", json=body) as r:
            if r.status != 200:
                await r.read()
                return None
            return (await r.json())["assistant_id"]

    async def count(self) -> int:
        async with self.s.post(self.url + "/assistants/count", json={}) as r:
            return int(await r.json())

    async def get(self, agent_id: str) -> bool:
        async with self.s.get(f"{self.url}/assistants/{agent_id}") as r:
            return r.status == 200 and (await r.json())["assistant_id"] == agent_id

    async def list_page(self) -> bool:
        async with self.s.post(self.url + "/assistants/search", json={"limit": 100, "offset": 0}) as r:
            return r.status == 200 and len(await r.json()) == 100

    def run_request(self):
        body = {"assistant_id": "agent",
                "input": {"messages": [{"role": "user", "content": "Please echo ping, then answer."}]},
                "stream_mode": ["messages-tuple", "values"]}
        return self.url + "/runs/stream", body

    @staticmethod
    def on_event(c: RunCheck, ev: str, data: str, now: float) -> None:
        if ev == "error":
            c.error = f"error: {data[:200]}"
        elif ev == "messages" or ev.startswith("messages|"):
            payload = json.loads(data)
            msg = payload[0] if isinstance(payload, list) else payload
            kind = msg.get("type")
            if kind == "tool":
                c.tool_result = True
            elif kind in ("AIMessageChunk", "ai") and c.tool_result:
                content = msg.get("content")
                if isinstance(content, list):
                    content = "".join(b.get("text", "") for b in content if isinstance(b, dict))
                if content:
                    c.tokens += 1
                    if c.first_token is None:
                        c.first_token = now


TARGETS = {"taskforce": Taskforce, "langgraph": LangGraph}

# ------------------------------------------------------------------------------ loops


async def closed_loop(n: int, clients: int, op) -> tuple[list[float], list[str], float]:
    """`clients` workers make `n` calls of `op(i)` in all; returns latencies, errors, wall."""
    lat, errors, next_i = [], [], 0

    async def worker():
        nonlocal next_i
        while next_i < n:
            i, next_i = next_i, next_i + 1
            t0 = time.perf_counter()
            try:
                err = await op(i)
            except Exception as e:  # noqa: BLE001
                err = repr(e)[:200]
            if err:
                errors.append(err)
            else:
                lat.append(time.perf_counter() - t0)

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(clients)))
    return lat, errors, time.perf_counter() - t0


async def one_run(s: aiohttp.ClientSession, target, words: int, timings: list) -> str | None:
    url, body = target.run_request()
    c, t0 = RunCheck(), time.perf_counter()
    async with s.post(url, json=body, timeout=aiohttp.ClientTimeout(total=120)) as r:
        if r.status != 200:
            return f"HTTP {r.status}: {(await r.text())[:200]}"
        async for ev, data in sse_events(r):
            now = time.perf_counter() - t0
            if c.first_event is None:
                c.first_event = now
            target.on_event(c, ev, data, now)
    if c.error:
        return c.error
    if not c.tool_result or c.tokens != words:
        return f"incomplete run: tool result {c.tool_result}, {c.tokens} answer tokens (want {words})"
    timings.append((c.first_event, c.first_token))
    return None


async def drive(a) -> int:
    host = urlparse(a.url).hostname or ""
    if host not in ("localhost", "::1") and not host.startswith("127."):
        print(f"refusing a target that is not on loopback: {host!r}", file=sys.stderr)
        return 2
    pids = [int(p) for p in a.server_pids.split(",") if p]
    out = {"target": a.target, "url": a.url, "date_utc": dt.datetime.now(dt.timezone.utc)
           .isoformat(timespec="seconds"), "machine": {"cpus": os.cpu_count(),
           "platform": platform.platform(), "python": platform.python_version()},
           "params": {k: v for k, v in vars(a).items() if k not in ("out", "func")},
           "phases": []}
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn) as s:
        target = TARGETS[a.target](s, a.url.rstrip("/"), a.model)
        phases = a.phases.split(",")
        ids: list[str] = []
        if "get" in phases or "list" in phases:
            have = await target.count()
            print(f"[{a.target}] creating {max(0, a.population - have)} agents (not timed)", flush=True)

            async def make(i):
                agent_id = await target.create(have + i)
                if agent_id is None:
                    return "create failed"
                ids.append(agent_id)
                return None
            _, errs, _ = await closed_loop(max(0, a.population - have), 10, make)
            if errs:
                print(f"creating agents failed: {errs[:3]}", file=sys.stderr)
                return 1

        async def get(i):
            return None if await target.get(ids[i % len(ids)]) else "get failed"

        async def list_page(_i):
            return None if await target.list_page() else "list failed"

        bad = 0
        for phase in phases:
            if phase in ("get", "list"):
                op = get if phase == "get" else list_page
                n = a.n_get if phase == "get" else a.n_list
                levels = a.get_clients if phase == "get" else a.list_clients
                for clients in [int(x) for x in levels.split(",") if x]:
                    await closed_loop(min(n, 50), clients, op)  # warm-up
                    cpu = Cpu(pids)
                    lat, errs, wall = await closed_loop(n, clients, op)
                    used = cpu.used_s()
                    row = {"workload": phase, "clients": clients, "ops": len(lat),
                           "errors": len(errs), "ops_per_s": len(lat) / wall,
                           "latency": summary_ms(lat),
                           "server_cpu_ms_per_op": 1000 * used / max(1, len(lat))}
                    out["phases"].append(row)
                    bad += len(errs)
                    print(f"[{a.target}] {phase} x{n} at {clients}: {row['ops_per_s']:.0f}/s, "
                          f"p50 {row['latency']['p50_ms']:.2f} ms, errors {len(errs)} {errs[:2]}",
                          flush=True)
            elif phase == "run":
                for _ in range(3):  # warm-up
                    err = await one_run(s, target, a.words, [])
                    if err:
                        print(f"[{a.target}] warm-up run failed: {err}", file=sys.stderr)
                        return 1
                for clients in [int(x) for x in a.run_clients.split(",") if x]:
                    timings: list = []
                    n = clients * a.runs_per_client
                    cpu = Cpu(pids)
                    lat, errs, wall = await closed_loop(
                        n, clients, lambda _i: one_run(s, target, a.words, timings))
                    used = cpu.used_s()
                    row = {"workload": "run", "clients": clients, "ops": len(lat),
                           "errors": len(errs), "ops_per_s": len(lat) / wall,
                           "latency": summary_ms(lat),
                           "first_event": summary_ms([t[0] for t in timings]),
                           "first_token": summary_ms([t[1] for t in timings]),
                           "server_cpu_ms_per_op": 1000 * used / max(1, len(lat))}
                    out["phases"].append(row)
                    bad += len(errs)
                    print(f"[{a.target}] run x{n} at {clients}: {row['ops_per_s']:.1f} runs/s, "
                          f"total p50 {row['latency']['p50_ms']:.1f} ms, errors {len(errs)} "
                          f"{sorted(set(errs))[:2]}", flush=True)
            else:
                print(f"unknown phase {phase!r}", file=sys.stderr)
                return 2
    with open(a.out, "w") as f:
        json.dump(out, f, indent=2)
    return 1 if bad else 0


# ------------------------------------------------------------------------------ table


def table(a) -> int:
    sides = []
    for path in a.results:
        with open(path) as f:
            sides.append(json.load(f))
    names = {"taskforce": "Taskforce", "langgraph": "LangGraph"}
    base, other = sides[0], sides[1:]
    label = {"run": "streamed run (1 tool call, 20 tokens)", "get": "GET one agent",
             "list": "list 100 agents"}

    def ms(d, key="p50_ms"):
        return "-" if not d or d.get(key) is None else f"{d[key]:.2f}"

    head = "| workload | clients | side | ops/s | p50 / p99 ms | first event p50 ms | first token p50 ms | server CPU ms/op |"
    print(head)
    print("|---|---:|---|---:|---|---:|---:|---:|")
    for row in base["phases"]:
        for side in [base, *other]:
            r = next((x for x in side["phases"] if x["workload"] == row["workload"]
                      and x["clients"] == row["clients"]), None)
            if r is None:
                continue
            lat = r["latency"]
            err = f" ({r['errors']} errors)" if r["errors"] else ""
            print(f"| {label[r['workload']]} | {r['clients']} | {names[side['target']]} | "
                  f"{r['ops_per_s']:.1f}{err} | {ms(lat)} / {ms(lat, 'p99_ms')} | "
                  f"{ms(r.get('first_event'))} | {ms(r.get('first_token'))} | "
                  f"{r['server_cpu_ms_per_op']:.3f} |")
    print()
    print("| workload | clients | ops/s ratio | server CPU per op ratio |")
    print("|---|---:|---:|---:|")
    for row in base["phases"]:
        for side in other:
            r = next((x for x in side["phases"] if x["workload"] == row["workload"]
                      and x["clients"] == row["clients"]), None)
            if r is None or not r["ops_per_s"] or not row["server_cpu_ms_per_op"]:
                continue
            print(f"| {label[row['workload']]} | {row['clients']} | "
                  f"{names[base['target']]} {row['ops_per_s'] / r['ops_per_s']:.1f}× | "
                  f"{names[side['target']]} uses {r['server_cpu_ms_per_op'] / row['server_cpu_ms_per_op']:.1f}× |")
    return 0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(required=True)
    d = sub.add_parser("drive", help="run the workloads against one server")
    d.add_argument("--target", choices=sorted(TARGETS), required=True)
    d.add_argument("--url", required=True)
    d.add_argument("--server-pids", required=True, help="comma list: the server's processes")
    d.add_argument("--model", default="fake", help="Taskforce: the model alias of the runs")
    d.add_argument("--phases", default="get,list,run")
    d.add_argument("--population", type=int, default=1000, help="agents present for get/list")
    d.add_argument("--n-get", type=int, default=2000)
    d.add_argument("--get-clients", default="1,10")
    d.add_argument("--n-list", type=int, default=500)
    d.add_argument("--list-clients", default="1,10")
    d.add_argument("--run-clients", default="50")
    d.add_argument("--runs-per-client", type=int, default=5)
    d.add_argument("--words", type=int, default=int(os.environ.get("FAKE_LLM_WORDS", "20")))
    d.add_argument("--out", required=True)
    d.set_defaults(func=lambda a: asyncio.run(drive(a)))
    t = sub.add_parser("table", help="one markdown table from drive's JSON files (first = base)")
    t.add_argument("results", nargs="+")
    t.set_defaults(func=table)
    a = p.parse_args()
    sys.exit(a.func(a))


if __name__ == "__main__":
    main()
