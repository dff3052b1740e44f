#!/usr/bin/env python3
"""Deterministic, scripted, OpenAI-compatible chat-completions server (no model).

Endpoints
  POST /v1/chat/completions   (stream=true -> SSE chunks, else one JSON object)
  GET  /v1/models
  GET  /healthz

Script (same input -> same output):
  * request has `tools` and the last message is from the user
      -> exactly one tool call to the FIRST tool offered, arguments
         {"text": "<...>"} (or the tool's first string property if it has no
         "text" property). finish_reason = "tool_calls".
  * otherwise (last message is a tool result, or no tools offered)
      -> a final answer of N words, N = $FAKE_LLM_WORDS (default 20);
         with stream=true it is sent as one SSE chunk per word.

Environment
  FAKE_LLM_HOST            bind address (default 127.0.0.1)
  FAKE_LLM_PORT            port (default 18080)
  FAKE_LLM_WORDS           words in the final answer (default 20)
  FAKE_LLM_TOKEN_DELAY_MS  optional sleep between streamed chunks (default 0)
  FAKE_LLM_TTFT_MS         optional sleep before the first byte (default 0)

Quiet by design: no access log, nothing printed per request.
Dependencies: Python stdlib + aiohttp.
"""

from __future__ import annotations

import asyncio
import json
import os
import time

from aiohttp import web

HOST = os.environ.get("FAKE_LLM_HOST", "127.0.0.1")
PORT = int(os.environ.get("FAKE_LLM_PORT", "18080"))
WORDS = int(os.environ.get("FAKE_LLM_WORDS", "20"))
TOKEN_DELAY = float(os.environ.get("FAKE_LLM_TOKEN_DELAY_MS", "0")) / 1000.0
TTFT_DELAY = float(os.environ.get("FAKE_LLM_TTFT_MS", "0")) / 1000.0
MODEL = "fake-model"

_VOCAB = (
    "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima "
    "mike november oscar papa quebec romeo sierra tango uniform victor whiskey "
    "xray yankee zulu"
).split()

# Pre-rendered answer (deterministic): word i is _VOCAB[i % len(_VOCAB)].
ANSWER_WORDS = [_VOCAB[i % len(_VOCAB)] for i in range(WORDS)]
# One streamed piece per word; every piece but the first carries a leading space
# so that concatenating the deltas gives exactly ANSWER_TEXT.
ANSWER_PIECES = [w if i == 0 else " " + w for i, w in enumerate(ANSWER_WORDS)]
ANSWER_TEXT = "".join(ANSWER_PIECES)

_counter = 0


def _next_id() -> str:
    global _counter
    _counter += 1
    return f"chatcmpl-fake-{_counter:08d}"


def _dumps(obj) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _tool_call_for(body: dict) -> dict | None:
    """Return the scripted tool call, or None if a final answer is due."""
    tools = body.get("tools") or []
    messages = body.get("messages") or []
    if not tools or not messages or messages[-1].get("role") != "user":
        return None
    fn = tools[0].get("function") or {}
    name = fn.get("name", "tool")
    props = ((fn.get("parameters") or {}).get("properties") or {})
    key = "text"
    if "text" not in props:
        for k, v in props.items():
            if isinstance(v, dict) and v.get("type") == "string":
                key = k
                break
    args = json.dumps({key: "ping"}, separators=(",", ":"))
    return {
        # deterministic id, unique within one conversation
        "id": f"call_fake_{len(messages):04d}",
        "type": "function",
        "function": {"name": name, "arguments": args},
    }


def _usage(body: dict, completion_tokens: int) -> dict:
    prompt_tokens = sum(
        len(str(m.get("content") or "").split()) + 4 for m in body.get("messages") or []
    )
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


async def models(_request: web.Request) -> web.Response:
    return web.json_response(
        {
            "object": "list",
            "data": [{"id": MODEL, "object": "model", "created": 0, "owned_by": "fake"}],
        }
    )


async def healthz(_request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def chat_completions(request: web.Request) -> web.StreamResponse:
    try:
        body = await request.json()
    except Exception:
        return web.json_response(
            {"error": {"message": "invalid JSON body", "type": "invalid_request_error"}},
            status=400,
        )
    model = body.get("model") or MODEL
    call = _tool_call_for(body)
    cid = _next_id()
    created = int(time.time())
    if TTFT_DELAY:
        await asyncio.sleep(TTFT_DELAY)

    if not body.get("stream"):
        if call is not None:
            message = {"role": "assistant", "content": None, "tool_calls": [call]}
            finish, ntok = "tool_calls", 8
        else:
            message = {"role": "assistant", "content": ANSWER_TEXT}
            finish, ntok = "stop", WORDS
        return web.Response(
            body=_dumps(
                {
                    "id": cid,
                    "object": "chat.completion",
                    "created": created,
                    "model": model,
                    "choices": [
                        {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
                    ],
                    "usage": _usage(body, ntok),
                }
            ),
            content_type="application/json",
        )

    resp = web.StreamResponse(
        status=200,
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-cache",
            "Connection": "keep-alive",
        },
    )
    await resp.prepare(request)

    def frame(choices: list, **extra) -> bytes:
        payload = {"id": cid, "object": "chat.completion.chunk", "created": created,
                   "model": model, "choices": choices, **extra}
        return b"data: " + _dumps(payload) + b"\n\n"

    def chunk(delta: dict, finish: str | None = None) -> bytes:
        return frame([{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}])

    if call is not None:
        await resp.write(chunk({"role": "assistant", "content": None}))
        await resp.write(
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": call["id"],
                            "type": "function",
                            "function": {"name": call["function"]["name"], "arguments": ""},
                        }
                    ]
                }
            )
        )
        await resp.write(
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": call["function"]["arguments"]}}]})
        )
        await resp.write(chunk({}, "tool_calls"))
        ntok = 8
    else:
        await resp.write(chunk({"role": "assistant", "content": ""}))
        for piece in ANSWER_PIECES:
            if TOKEN_DELAY:
                await asyncio.sleep(TOKEN_DELAY)
            await resp.write(chunk({"content": piece}))
        await resp.write(chunk({}, "stop"))
        ntok = WORDS

    if (body.get("stream_options") or {}).get("include_usage"):
        await resp.write(frame([], usage=_usage(body, ntok)))
    await resp.write(b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp


def make_app() -> web.Application:
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_post("/chat/completions", chat_completions)  # base_url without /v1
    app.router.add_get("/v1/models", models)
    app.router.add_get("/models", models)
    app.router.add_get("/healthz", healthz)
    return app


def main() -> None:
    try:
        import uvloop  # optional, only if already installed

        uvloop.install()
    except Exception:
        pass
    # access_log=None and print=None: nothing is printed per request (or at all).
    web.run_app(make_app(), host=HOST, port=PORT, access_log=None, print=None, backlog=1024)


if __name__ == "__main__":
    main()
