"""A real MCP client (the official Python SDK) for the end-to-end tests.

Connects to the gateway's MCP server over streamable HTTP (--url) or stdio (--stdio CMD ARGS...),
lists the tools, makes the calls given as a JSON list of {"tool", "args"} in --calls, validates
each successful result against seed 001's contract schemas, and prints one JSON object:

    {"protocol_version": "...", "server_name": "...",
     "tools": [{"name", "input_schema", "output_schema"}],
     "results": [{"is_error", "structured", "text", "contract_errors", "elapsed_ms"}
                 | {"rpc_error": {"code", "message"}, "elapsed_ms"}]}

Run with the venv of scripts/install-test-deps.sh: .tools/venv/bin/python tests/mcp_client/call.py
"""

import argparse
import asyncio
import json
import sys
import time

import jsonschema
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError

# Seed 001 "Contract Validation", extended to every field the seed's output schemas name.
FIELD_SCHEMA = {
    "type": "object",
    "properties": {
        "value": {},
        "error": {"type": ["string", "null"]},
        "schema": {
            "type": "object",
            "properties": {
                "description": {"type": "string"},
                "include_in_list": {"type": "boolean"},
            },
            "required": ["description", "include_in_list"],
        },
    },
    "required": ["value", "error", "schema"],
}
SHOW_AGENT_SCHEMA = {
    "type": "object",
    "properties": {
        "agent": {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "workspace_id": {"type": "string"},
                "status": {"enum": ["idle", "busy"]},
                "role": {"type": "string"},
                "project": {"type": "string"},
                "last_task": {"type": ["string", "null"]},
                "created_at": {"type": "string"},
                "updated_at": {"type": "string"},
                "metadata_count": {"type": "integer", "minimum": 0},
                "metadata": {"type": "object", "additionalProperties": FIELD_SCHEMA},
            },
            "required": [
                "name", "workspace_id", "status", "role", "project", "last_task",
                "created_at", "updated_at", "metadata_count", "metadata",
            ],
        }
    },
    "required": ["agent"],
}
LIST_AGENTS_SCHEMA = {
    "type": "object",
    "properties": {
        "agents": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "status": {"enum": ["idle", "busy"]},
                    "role": {"type": "string"},
                    "project": {"type": "string"},
                    "last_task": {"type": ["string", "null"]},
                    "created_at": {"type": "string"},
                    "metadata_count": {"type": "integer", "minimum": 0},
                    # Values only: never the {value, error, schema} objects of show_agent.
                    "metadata": {
                        "type": "object",
                        "additionalProperties": {"not": {"type": "object", "required": ["schema"]}},
                    },
                },
                "required": [
                    "name", "status", "role", "project", "last_task", "created_at",
                    "metadata_count", "metadata",
                ],
            },
        },
        "total_count": {"type": "integer", "minimum": 0},
    },
    "required": ["agents", "total_count"],
}
CONTRACTS = {"show_agent": SHOW_AGENT_SCHEMA, "list_agents": LIST_AGENTS_SCHEMA}


def contract_errors(tool, structured):
    schema = CONTRACTS.get(tool)
    if schema is None:
        return []
    validator = jsonschema.Draft202012Validator(schema)
    return [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(structured)]


async def run(args):
    server = args.url if args.url else StdioServerParameters(command=args.stdio[0], args=args.stdio[1:])
    out = {"results": []}
    async with Client(server, mode=args.mode, read_timeout_seconds=args.timeout) as client:
        out["protocol_version"] = client.protocol_version
        info = client.server_info
        out["server_name"] = info.name if info is not None else None
        listed = await client.list_tools()
        out["tools"] = [
            {"name": t.name, "input_schema": t.input_schema, "output_schema": t.output_schema}
            for t in listed.tools
        ]
        for call in json.loads(args.calls):
            started = time.monotonic()
            try:
                result = await client.call_tool(call["tool"], call.get("args") or {})
            except MCPError as e:
                out["results"].append({
                    "rpc_error": {"code": e.code, "message": e.message},
                    "elapsed_ms": round((time.monotonic() - started) * 1000),
                })
                continue
            text = "".join(getattr(c, "text", "") for c in result.content)
            structured = result.structured_content
            out["results"].append({
                "is_error": result.is_error,
                "structured": structured,
                "text": text,
                "contract_errors": [] if result.is_error else contract_errors(call["tool"], structured),
                "elapsed_ms": round((time.monotonic() - started) * 1000),
            })
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--url", help="streamable HTTP endpoint, e.g. http://127.0.0.1:8080/mcp")
    target.add_argument("--stdio", nargs=argparse.REMAINDER, help="command (and args) to launch")
    p.add_argument("--calls", default="[]", help='JSON list of {"tool": ..., "args": {...}}')
    p.add_argument("--mode", default="auto", help="auto (discover, then initialize) or legacy")
    p.add_argument("--timeout", type=float, default=60.0, help="read timeout per request, seconds")
    # --stdio swallows the rest of the line, so options must come before it.
    args = p.parse_args()
    json.dump(asyncio.run(run(args)), sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
